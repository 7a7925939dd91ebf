"""The benchmarks from a fresh clone: run_many.sh runs every run of a fresh benchmark and skips finished ones only with
CONTINUE=1; it stops before an earlier benchmark's runs mix into the report; a benchmark script takes OUT= and passes
extra flags after its own (the later flag wins); sweep.py's --fresh and --tag; committed reports rebuild from what git
holds (benchmark/tools/rebuild_reports.py). A fake script or a fake `python` stands in for training where it can."""

import argparse
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT, TINY, run

sys.path.insert(0, str(ROOT / "benchmark"))
import report  # noqa: E402
import sweep  # noqa: E402

FINISHED = "iter 3/3 step 24 SPS 1 return 1.00 (1 episodes)\n"
# a training script's stand-in: its arguments, then one whole iteration
FAKE_SCRIPT = 'import sys\nprint("argv", *sys.argv[1:])\nprint("iter 1/1 step 8 SPS 1 return 1.00 (1 episodes)")\n'
# `python` on the PATH of a benchmark script: records each command line, and prints one whole iteration
FAKE_PYTHON = (
    '#!/usr/bin/env bash\necho "$*" >>"$(dirname "$0")/calls"\necho "iter 1/1 step 8 SPS 1 return 1.00 (1 episodes)"\n'
)
REBUILD = [sys.executable, str(ROOT / "benchmark" / "tools" / "rebuild_reports.py")]
git_checkout = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="rebuilds from git's copy: needs a git checkout")


def clean_env(**extra) -> dict:
    """This process's environment without the benchmark settings a shell may have set, plus `extra`."""
    names = ("CONTINUE", "RUN_MANY_SESSION", "CLUSTER", "TAG", "JOBS", "OUT", "SWEEP_ARGS", "FORCE")
    return {**{k: v for k, v in os.environ.items() if k not in names}, **extra}


def run_many(tmp_path, out, *args, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "fake.py"
    script.write_text(FAKE_SCRIPT)
    argv = ["bash", str(ROOT / "benchmark" / "run_many.sh"), str(script), str(out), "CartPole-v1", "1", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(**env), timeout=120)


def fake_python(tmp_path) -> tuple:
    """(a PATH whose `python` is FAKE_PYTHON, the file of the command lines it got)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}", bin_dir / "calls"


def test_run_many_runs_a_finished_run_again_unless_continue(tmp_path):
    out = tmp_path / "out"
    log = out / "logs" / "fake__CartPole-v1__1.log"
    log.parent.mkdir(parents=True)
    log.write_text(FINISHED)
    fresh = run_many(tmp_path, out, "--total-timesteps", "500000", "--total-timesteps", "64")
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout == f"start {tmp_path / 'fake.py'} CartPole-v1 seed 1\n"
    assert (
        log.read_text().splitlines()[0]
        == "argv --env-id CartPole-v1 --seed 1 --no-cuda --total-timesteps 500000 --total-timesteps 64"
    )
    log.write_text(FINISHED)
    kept = run_many(tmp_path, out, CONTINUE="1")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == f"skip {tmp_path / 'fake.py'} CartPole-v1 seed 1: its log has its last iteration (CONTINUE=1)\n"
    assert log.read_text() == FINISHED
    log.write_text("iter 2/3 step 16 SPS 1 return 1.00 (1 episodes)\n")  # interrupted: CONTINUE=1 runs it
    assert run_many(tmp_path, out, CONTINUE="1").stdout.startswith("start ") and log.read_text().startswith("argv ")


def test_run_many_stops_when_runs_holds_an_earlier_benchmark_and_removes_its_scalars(tmp_path):
    out = tmp_path / "out"
    (out / "runs" / "CartPole-v1__fake__1__1795000000").mkdir(parents=True)
    (out / "scalars").mkdir()
    (out / "scalars" / "CartPole-v1__fake__1__1795000000.json.gz").write_bytes(b"x")
    stopped = run_many(tmp_path, out)
    assert stopped.returncode == 1 and stopped.stdout == ""
    assert stopped.stderr == (
        f"error: {out}/runs holds an earlier benchmark's runs, which the report would mix in: CONTINUE=1 to complete "
        f"that benchmark, or move {out}/runs away\n"
    )
    assert not (out / "logs").exists() and (out / "scalars").exists()
    continued = run_many(tmp_path, out, CONTINUE="1")  # completes the earlier benchmark: its runs and scalars stay
    assert continued.returncode == 0 and (out / "scalars").exists() and (out / "logs" / "fake__CartPole-v1__1.log").exists()
    shutil.move(out / "runs", tmp_path / "earlier_runs")
    fresh = run_many(tmp_path, out)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.splitlines()[0] == (
        f"removed {out}/scalars, an earlier benchmark's (git keeps them): the report holds only this benchmark's runs"
    )
    assert not (out / "scalars").exists()


def test_run_many_calls_of_one_benchmark_share_its_session(tmp_path):
    """A benchmark script's later run_many.sh calls on the same OUT (other tags) see its own runs in runs/: they go on,
    under the session it exports; another invocation stops."""
    out = tmp_path / "out"
    assert run_many(tmp_path, out, RUN_MANY_SESSION="1 a").returncode == 0
    (out / "runs" / "CartPole-v1__fake__1__1795000000").mkdir(parents=True)  # what the real script would have made
    again = run_many(tmp_path, out, RUN_MANY_SESSION="1 a", TAG="other")
    assert again.returncode == 0, again.stderr
    assert (out / "logs" / "fake__other__CartPole-v1__1.log").read_text().startswith("argv ")
    other = run_many(tmp_path, out, RUN_MANY_SESSION="2 b")
    assert other.returncode == 1 and other.stderr.startswith(f"error: {out}/runs holds an earlier benchmark's runs")


def test_run_many_through_the_sweep_is_fresh_unless_continue(tmp_path):
    path, calls = fake_python(tmp_path)
    out = tmp_path / "out"
    for env in ({}, {"CONTINUE": "1"}):
        result = run_many(tmp_path, out, "--total-timesteps", "64", CLUSTER="local", TAG="x", PATH=path, **env)
        assert result.returncode == 0, result.stderr
    sweep_py = ROOT / "benchmark" / "sweep.py"
    common = f"{sweep_py} {tmp_path / 'fake.py'} --env-ids CartPole-v1 --seeds 1 --out {out} --cluster local"
    assert calls.read_text().splitlines() == [
        f"{common} --fresh --tag x --wait -- --total-timesteps 64",
        f"{common} --tag x --wait -- --total-timesteps 64",
    ]


def test_sweep_fresh_starts_each_log_empty_and_stops_at_an_earlier_run(tmp_path):
    args = argparse.Namespace(out=tmp_path, env_ids=["CartPole-v1"], seeds=[1, 2], script="ppo.py", tag="x", fresh=True)
    log = tmp_path / "logs" / "ppo__x__CartPole-v1__1.log"
    log.parent.mkdir()
    log.write_text(FINISHED)
    runs = sweep.plan(args, "ppo", [])
    assert [run.log for _, _, run in runs] == [str(tmp_path / "logs" / f"ppo__x__CartPole-v1__{seed}.log") for seed in (1, 2)]
    assert log.read_text() == ""
    (tmp_path / "runs" / "CartPole-v1__ppo__2__sweep").mkdir(parents=True)
    with pytest.raises(SystemExit) as stop:
        sweep.plan(args, "ppo", [])
    assert str(stop.value) == (
        f"error: {tmp_path}/runs/CartPole-v1__ppo__2__sweep exists, an earlier sweep's run: drop --fresh to continue it, "
        "or move it away"
    )
    log.write_text(FINISHED)
    sweep.plan(argparse.Namespace(**{**vars(args), "fresh": False}), "ppo", [])  # continuing: logs are appended to
    assert log.read_text() == FINISHED


def test_a_benchmark_script_takes_out_and_passes_flags_after_its_own(tmp_path, capsys):
    """OUT=... bash benchmark/ppo.sh FLAGS (a copy of benchmark/, so nothing here writes into the repository): nine
    runs under OUT with FLAGS after the script's own, then the report of OUT, its title naming FLAGS; the later
    --total-timesteps wins."""
    repo = tmp_path / "repo"
    (repo / "benchmark").mkdir(parents=True)
    for name in ("ppo.sh", "run_many.sh"):
        shutil.copy(ROOT / "benchmark" / name, repo / "benchmark" / name)
    path, calls = fake_python(tmp_path)
    out = tmp_path / "quick"
    flags = ["--total-timesteps", "64", *TINY]
    result = subprocess.run(
        ["bash", str(repo / "benchmark" / "ppo.sh"), *flags],
        capture_output=True,
        text=True,
        env=clean_env(OUT=str(out), PATH=path),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    *runs, report = calls.read_text().splitlines()
    envs = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")
    assert sorted(runs) == sorted(
        f"{repo}/ppo.py --env-id {env} --seed {seed} --no-cuda --total-timesteps 500000 {' '.join(flags)}"
        for env in envs
        for seed in (1, 2, 3)
    )
    assert report == (
        f"benchmark/report.py {out}/runs {out}/scalars --save-scalars --title ppo.py, classic control, 500k steps; extra flags: "
        f"{' '.join(flags)} --out {out}/report"
    )
    assert sorted(p.name for p in (out / "logs").iterdir()) == sorted(f"ppo__{e}__{s}.log" for e in envs for s in (1, 2, 3))
    # the run as ppo.py parses it (in this process): the later flag wins (tyro), 64 steps of 32 a batch
    argv = runs[0].split()[1:]
    capsys.readouterr()
    run("ppo.py", *argv, cwd=tmp_path)
    assert re.findall(r"^iter (\d+/\d+) step (\d+)", capsys.readouterr().out, re.M)[-1] == ("2/2", "64")


def test_report_reads_run_logs_and_passes_over_other_logs(tmp_path):
    """A folder of logs may hold other logs than runs' (torchrun.sh's speed_ppo_1proc.log): report.py passes over them."""
    (tmp_path / "speed_ppo_1proc.log").write_text(FINISHED)
    (tmp_path / "ppo__CartPole-v1__1.log").write_text(FINISHED)
    groups = report.collect(tmp_path)
    assert list(groups) == [("CartPole-v1", "ppo")] and groups[("CartPole-v1", "ppo")][1]["final"] == 1.0


@git_checkout
def test_a_report_from_committed_scalars_rebuilds_byte_for_byte():
    """The MuJoCo v4 report (report.md and report.png) from its committed scalars/ alone, as on a fresh clone."""
    result = subprocess.run([*REBUILD, "ppo_continuous_action_v4"], capture_output=True, text=True, timeout=600)
    assert (result.returncode, result.stdout, result.stderr) == (0, "ppo_continuous_action_v4: identical\n", "")


def test_a_report_from_committed_logs_rebuilds_byte_for_byte():
    """The Breakout 1M statistics (stats.md and its figures) from the committed run logs alone, as on a fresh clone."""
    result = subprocess.run([*REBUILD, "ppo_atari_1m_native/stats"], capture_output=True, text=True, timeout=600)
    assert (result.returncode, result.stdout, result.stderr) == (0, "ppo_atari_1m_native/stats: identical\n", "")
