"""The benchmark report tool on real (tiny) runs and on known numbers."""

import re
import shutil
import subprocess
import sys

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from tests.helpers import ROOT, TINY, report_cli, run

sys.path.insert(0, str(ROOT / "benchmark"))
import report  # noqa: E402


def by_task(table: str) -> dict:
    """{(env, experiment): {column name: cell}} of a report's markdown table, by its header, not by row positions."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    head, *rows = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines[:1] + lines[2:])
    return {tuple(cells[:2]): dict(zip(head, cells, strict=True)) for cells in rows}


def fake_run(steps: np.ndarray, returns: np.ndarray) -> dict:
    """What read_run gives for episodes ending at `steps` with `returns`, its timing made up."""
    return {
        "steps": steps,
        "returns": returns,
        "final": float(np.mean(returns[-100:])),
        "sps": 1.0,
        "wall": 60.0,
        "last_step": int(steps[-1]),
    }


def test_first_step_reaching():
    run_data = {"steps": np.arange(1, 201) * 10, "returns": np.r_[np.zeros(100), np.ones(100) * 500]}
    # the mean of the last 100 episodes reaches 250 once 50 of them score 500: the 150th episode
    assert report.first_step_reaching(run_data, 250) == 1500
    assert report.first_step_reaching(run_data, 501) is None


def test_mean_at():
    # 10 iterations of 100 steps, one episode ending at step 10k + 5 for k = 1..95, with return k
    run_data = {"steps": np.arange(1, 96) * 10 + 5, "returns": np.arange(1.0, 96.0), "iteration_steps": np.arange(1, 11) * 100}
    assert report.mean_at(run_data, 100) == np.mean(np.arange(1, 10))  # episodes ending at 15, ..., 95
    assert report.mean_at(run_data, 101) == np.mean(np.arange(1, 20))  # the next iteration ends at 200
    assert report.mean_at(run_data, 1000, window=10) == np.mean(np.arange(86, 96))
    assert report.mean_at(run_data, 1001) is None  # no iteration got there
    assert report.mean_at({**run_data, "steps": run_data["steps"] + 100}, 100) is None  # no episode by then


def test_report_from_runs(tmp_path, capsys):
    printed = {}
    for seed in ("1", "2"):
        capsys.readouterr()
        run("ppo.py", *TINY, "--total-timesteps", "640", "--seed", seed, cwd=tmp_path)
        printed[int(seed)] = re.findall(r"step (\d+) SPS \d+ return ([\d.]+) \(\d+ episodes?\)", capsys.readouterr().out)
    out = tmp_path / "report"
    result = report_cli(
        capsys,
        [
            str(tmp_path / "runs"),
            "--out",
            str(out),
            "--at",
            "100,320,640",
        ],
    )
    assert result.returncode == 0, result.stderr
    (row,) = [
        line for line in out.with_suffix(".md").read_text().splitlines() if line.startswith("| CartPole-v1 | ppo | 1,2 |")
    ]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["CartPole-v1", "ppo", "1,2", "640"]
    mean, std = map(float, cells[5].split(" ± "))
    groups = report.collect(tmp_path / "runs")
    finals = [r["final"] for r in groups[("CartPole-v1", "ppo")].values()]
    assert (mean, std) == (round(np.mean(finals), 2), round(np.std(finals), 2))
    assert out.with_suffix(".png").stat().st_size > 0
    # --at gives the figure each script printed at the end of the first iteration at or past the step
    for seed, run_data in groups[("CartPole-v1", "ppo")].items():
        assert len(printed[seed]) == 20
        for step, figure in printed[seed]:
            assert f"{report.mean_at(run_data, int(step)):.2f}" == figure
        (row,) = [
            line
            for line in out.with_suffix(".md").read_text().splitlines()
            if line.startswith(f"| CartPole-v1 | ppo | {seed} |")
        ]
        assert row.split(" | ")[3:] == [
            dict(printed[seed])["128"],
            dict(printed[seed])["320"],
            dict(printed[seed])["640"] + " |",
        ]


def test_solved_threshold_and_success_rate_on_known_numbers(capsys):
    """`--threshold solved` takes each task's own level (NORMALIZATION's top); the success rate counts the +1 episodes
    of the last 100 on a task whose every episode returns +1 or -1, and is n/a elsewhere."""
    steps = np.arange(1, 201) * 10

    def fake(returns):
        return fake_run(steps, returns)

    half = np.r_[-np.ones(100), np.tile([1.0, -1.0], 50)]  # the last 100: 50% right, mean 0
    learned = np.r_[-np.ones(100), np.ones(100)]  # the last 100 all right; its mean reaches 0.9 at the 195th episode
    cartpole = np.r_[np.zeros(100), np.full(100, 500.0)]  # reaches 475 at the 195th episode too
    groups = {
        ("MemoryL30K2-v0", "ppo"): {1: fake(half)},
        ("MemoryL30K2-v0", "ppo_rnn"): {1: fake(learned), 2: fake(learned)},
        ("CartPole-v1", "ppo"): {1: fake(cartpole)},
        ("Unknown-v0", "ppo"): {1: fake(cartpole)},
    }
    rows = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line
        for line in report.table(groups, "solved", 100, 0, True).splitlines()
    }
    assert rows[("MemoryL30K2-v0", "ppo_rnn")].endswith("| 0.9: 1,950, 1,950 | 100, 100 |")
    assert rows[("MemoryL30K2-v0", "ppo")].endswith("| 0.9: never | 50 |")
    assert rows[("CartPole-v1", "ppo")].endswith("| 475: 1,950 | n/a |")
    assert rows[("Unknown-v0", "ppo")].endswith("| n/a | n/a |")
    assert by_task(report.table(groups, "250", 100, 0))[("CartPole-v1", "ppo")]["first step at mean ≥ 250"] == "1,500"
    result = report_cli(capsys, [".", "--out", "x", "--threshold", "high"])
    assert result.returncode == 1 and result.stderr.strip() == "error: --threshold takes a number or `solved`, not 'high'"


def test_peaks_and_published_figures_on_known_numbers():
    """--peaks: a run's best 100 episodes in a row, the step of the last of them, the end over the peak and the
    largest logged update KL; --published: the figure of PUBLISHED beside a task that has one, n/a elsewhere."""
    steps = np.arange(1, 301) * 1000
    rise_fall = np.r_[
        np.zeros(100), np.full(100, 800.0), np.tile([300.0, 500.0], 50)
    ]  # peaks at 800 (episodes 101-200), ends at 400

    def fake(returns, max_kl):
        return {**fake_run(steps, returns), "curve": report.learning_curve(steps, returns), "max_kl": max_kl}

    assert report.peak(fake(rise_fall, 0.5)) == (800.0, 200000)
    assert report.peak({"curve": (np.array([10, 20, 30]), np.array([1.0, 3.0, 2.0]))}) == (3.0, 20)  # from a log
    groups = {
        ("dm_control_cartpole-swingup-v0", "ppo_continuous_action"): {2: fake(rise_fall, 0.464)},
        ("Pendulum-v1", "x"): {1: fake(rise_fall, np.nan)},
    }
    text = report.peaks_table(groups)
    peaks = by_task(text)
    # the last 100: 300 and 500 in turn, standard deviation 100, standard error 10: the peak is 40 of them above the end
    expected = {"end (last 100)": "400.00", "peak (100 in a row)": "800.00", "peak's step": "200,000", "end / peak": "0.500"}
    expected.update({"drop in standard errors": "40.0", "fell": "yes"})
    for task, kl in ((("Pendulum-v1", "x"), "n/a"), (("dm_control_cartpole-swingup-v0", "ppo_continuous_action"), "0.464")):
        assert peaks[task] | expected | {"largest update KL": kl} == peaks[task]
    assert text.splitlines()[-2:] == ["- ppo_continuous_action: 1 of 1 runs", "- x: 1 of 1 runs"]
    published = by_task(report.table(groups, None, 100, 0, published=True))
    cleanrl = ["CleanRL, 1M steps, 3 seeds: mean ± std", "CleanRL, 8M steps, 10 seeds: mean ± std"]
    assert [published[("Pendulum-v1", "x")][column] for column in cleanrl] == ["n/a", "n/a"]
    swingup = published[("dm_control_cartpole-swingup-v0", "ppo_continuous_action")]
    assert [swingup[column] for column in cleanrl] == ["640.86 ± 11.44", "590.21 ± 16.72"]
    for column in report.PUBLISHED:  # the id as the scripts take it, and as its run directories name it
        assert report.published_figure("dm_control/walker-walk-v0", column) == report.published_figure(
            "dm_control_walker-walk-v0", column
        )
    assert [report.published_figure("dm_control/walker-walk-v0", column) for column in report.PUBLISHED] == [
        (392.51, 56.25),
        (305.74, 92.15),
    ]


def test_fall_needs_both_the_ratio_and_three_standard_errors():
    """A run falls when its end is under 0.8 of its peak and under it by at least 3 standard errors of the last 100."""
    steps = np.arange(1, 301) * 1000

    def fake(returns):
        return {**fake_run(steps, returns), "curve": report.learning_curve(steps, returns)}

    noisy = np.r_[np.zeros(100), np.full(100, 800.0), np.tile([0.0, 1200.0], 50)]  # end 600 (0.75), std 600: 3.33 errors
    assert report.drop_in_errors(fake(noisy)) == (800.0 - 600.0) / 60.0 and report.fell(fake(noisy)) is True
    noisier = np.r_[np.zeros(100), np.full(100, 800.0), np.tile([0.0, 1240.0], 50)]  # end 620, std 620: 2.90 errors
    assert report.fell(fake(noisier)) is False
    slight = np.r_[np.zeros(100), np.full(100, 800.0), np.full(100, 650.0)]  # 0.8125 of the peak, std 0: any drop counts
    assert report.drop_in_errors(fake(slight)) == np.inf and report.fell(fake(slight)) is False
    assert report.fell({"final": 1.0, "curve": (np.array([10, 20]), np.array([1.0, 3.0]))}) is None  # from a log


def test_benchmark_variant_names_map_to_the_script_flags():
    """benchmark/variant.sh: a variant's name is the flag and value it runs with; an unknown form stops the benchmark."""

    def flags(name: str) -> subprocess.CompletedProcess:
        script = f'. benchmark/variant.sh && variant_flags {name} && printf "%s|" "${{flags[@]}}"'
        return subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)

    expected = {
        "target_kl_0.1": "--target-kl|0.1|",
        "ent_coef_0.01": "--ent-coef|0.01|",
        "num_steps_1024": "--num-steps|1024|",
        "no_norm_reward": "--no-norm-reward|",
        "no_anneal_lr": "--no-anneal-lr|",
        "ent_coef_0.0+target_kl_0.1": "--ent-coef|0.0|--target-kl|0.1|",
        "ent_coef_0.0+no_bootstrap_truncation": "--ent-coef|0.0|--no-bootstrap-truncation|",
    }
    for name, joined in expected.items():
        assert flags(name).stdout == joined, name
    for name in ("Fast", "ent_coef_0.0+Fast"):
        bad = flags(name)
        assert (
            bad.returncode == 1 and bad.stdout == "" and bad.stderr.startswith(f"error: unknown variant '{name}' (NAME_VALUE")
        ), name


def test_a_report_rebuilds_from_its_saved_scalars_byte_for_byte(tmp_path, capsys):
    """--save-scalars keeps what report.py reads of each run's events in scalars/ beside runs/, which git does not keep:
    the report rebuilt from the scalars alone, as on a clean clone, is the same markdown and the same PNGs, byte for
    byte; saving them again writes the same bytes (no churn in git)."""
    results, rng = tmp_path / "results", np.random.default_rng(0)
    for seed in (1, 2, 3):
        with SummaryWriter(results / "runs" / f"CartPole-v1__ppo__{seed}__{1795000000 + seed}") as writer:
            for step in range(100, 30001, 100):
                writer.add_scalar("charts/episodic_return", float(rng.normal(step / 100, 20)), step)
                if step % 1000 == 0:
                    writer.add_scalar("charts/SPS", 900 + seed, step)
                    writer.add_scalar("losses/approx_kl", float(rng.random() / 100), step)
    argv = [str(results / "runs"), str(results / "scalars")]
    argv += ["--peaks", "--reps", "200", "--at", "10000,30000"]
    for out in ("a", "b"):
        result = report_cli(capsys, [*argv, "--save-scalars", "--out", str(tmp_path / out / "report")])
        assert result.returncode == 0, result.stderr
        saved = {path.name: path.read_bytes() for path in (results / "scalars").iterdir()}
        if out == "a":
            first = saved
    assert sorted(saved) == [f"CartPole-v1__ppo__{seed}__{1795000000 + seed}.json.gz" for seed in (1, 2, 3)]
    assert saved == first
    shutil.rmtree(results / "runs")
    result = report_cli(capsys, [*argv, "--out", str(tmp_path / "c" / "report")])
    assert result.returncode == 0, result.stderr
    for name in ("report.md", "report.png", "report_profile.png"):
        assert (tmp_path / "c" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name
    text = (tmp_path / "a" / "report.md").read_text()
    assert "| CartPole-v1 | ppo | 1,2,3 | 30,000 |" in text and "largest update KL" in text and " n/a |" not in text
