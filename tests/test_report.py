"""The benchmark report tool on real (tiny) runs and on known numbers."""

import re
import subprocess
import sys

import numpy as np

from tests.helpers import ROOT, TINY, run

sys.path.insert(0, str(ROOT / "benchmark"))
import report  # noqa: E402


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
        printed[int(seed)] = re.findall(r"step (\d+) SPS \d+ return ([\d.]+) \(last", capsys.readouterr().out)
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "report.py"), str(tmp_path / "runs"), "--out", str(out), "--at", "100,320,640"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in out.with_suffix(".md").read_text().splitlines() if line.startswith("| CartPole-v1 | ppo | 1,2 |")]
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
        (row,) = [line for line in out.with_suffix(".md").read_text().splitlines() if line.startswith(f"| CartPole-v1 | ppo | {seed} |")]
        assert row.split(" | ")[3:] == [dict(printed[seed])["128"], dict(printed[seed])["320"], dict(printed[seed])["640"] + " |"]
