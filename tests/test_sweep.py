"""benchmark/sweep.py (submitit) and report.py's statistics (rliable): a local sweep, bad input, known numbers, and a
real single-node Slurm cluster (tests/slurm/start.sh) where a requeued or signalled job resumes exactly."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from tests.helpers import ROOT, TINY, main_in_process, python_path, report_cli, run

sys.path.insert(0, str(ROOT / "benchmark"))
import report  # noqa: E402
import sweep as sweep_py  # noqa: E402

SWEEP = [sys.executable, str(ROOT / "benchmark" / "sweep.py")]
ENV = {**os.environ, "PYTHONPATH": python_path(), "WANDB_MODE": "offline"}


def sweep(*argv, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([*SWEEP, *argv], capture_output=True, text=True, env=env or ENV, timeout=timeout, cwd=ROOT)


def agent_of(checkpoint: Path) -> dict:
    ckpt = torch.load(checkpoint, weights_only=False)
    return ckpt["global_step"], ckpt["agent"]


def test_local_sweep_runs_every_run_and_the_report_gives_each_group_an_iqm(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["--env-ids", "CartPole-v1", "Acrobot-v1", "--seeds", "1", "2", "--out", str(out), "--jobs", "2"]
    result = sweep("ppo.py", *argv, "--", *TINY, "--total-timesteps", "1280", "--no-cuda")
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"^job \d+: \S+ seed \d finished$", result.stdout, re.M)) == 4
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        for seed in (1, 2):
            step, _ = agent_of(out / "runs" / f"{env_id}__ppo__{seed}__sweep" / "ppo.pt")
            assert step == 1280
            assert "finished after iteration 40, saved to" in (out / "logs" / f"ppo__{env_id}__{seed}.log").read_text()
    # the same command again, for one of its runs: it is finished, so it stops at once (--resume auto) and its log says so
    one = ["--env-ids", "CartPole-v1", "--seeds", "1", "--out", str(out), "--jobs", "1"]
    again = sweep("ppo.py", *one, "--", *TINY, "--total-timesteps", "1280", "--no-cuda")
    assert again.returncode == 0, again.stderr
    assert "ppo.pt is finished (iteration 40 of 40)" in (out / "logs" / "ppo__CartPole-v1__1.log").read_text()

    printed = report_cli(capsys, [out, "--out", tmp_path / "report", "--reps", "500"])
    assert printed.returncode == 0, printed.stderr
    groups = report.collect(out)
    assert sorted(groups) == [("Acrobot-v1", "ppo"), ("CartPole-v1", "ppo")]
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        (row,) = [line for line in printed.stdout.splitlines() if line.startswith(f"| {env_id} | ppo | 1,2 | 1,280 |")]
        point, low, high = map(float, re.search(r"\| ([-\d.]+) \[([-\d.]+), ([-\d.]+)\] \|", row).groups())
        finals = [run["final"] for run in groups[(env_id, "ppo")].values()]
        assert point == round(scipy.stats.trim_mean(finals, 0.25), 2) and low <= point <= high
    assert (tmp_path / "report_profile.png").stat().st_size > 0


def test_report_statistics_on_known_numbers():
    def runs(finals):
        return {seed: {"final": float(f)} for seed, f in enumerate(finals, 1)}

    # IQM: the mean of the middle half; of 1..8 that is 3, 4, 5, 6
    (iqm,) = report.group_iqms({("Breakout", "a"): runs(range(1, 9))}, reps=1000, seed=0).values()
    assert iqm[0] == 4.5 and iqm[1] <= 4.5 <= iqm[2]
    assert report.group_iqms({("Breakout", "a"): runs(range(1, 9))}, reps=1000, seed=0)[("Breakout", "a")] == iqm  # seeded
    # every run of A beats every run of B on each task: P(A > B) = 1 in every resample; equal runs: 1/2
    groups = {
        ("Pong", "A"): runs([5, 6, 7]),
        ("Pong", "B"): runs([1, 2, 3]),
        ("Breakout", "A"): runs([9, 9]),
        ("Breakout", "B"): runs([8, 8]),
    }
    assert report.compare(groups, "A", "B", reps=500, seed=0).startswith(
        "P(A > B) = 1.000 [1.000, 1.000] (95% CI) over Breakout, Pong"
    )
    assert report.compare(groups, "A", "A", reps=500, seed=0).startswith("P(A > A) = 0.500")
    # human-normalized: the human score is 1, the random one 0
    scores = report.normalized(
        {("BreakoutNoFrameskip-v4", "A"): runs([30.5, 1.7]), ("PongNoFrameskip-v4", "A"): runs([-20.7, 14.6])}
    )
    names, matrix = scores["A"]
    assert names == ["BreakoutNoFrameskip-v4", "PongNoFrameskip-v4"] and np.allclose(matrix, [[1, 0], [0, 1]])
    assert report.normalized({("MyEnv-v0", "A"): runs([1.0])}) == {}  # no normalization known: no aggregate


def test_report_reads_the_scripts_logs(tmp_path):
    log = tmp_path / "logs" / "ppo_atari__BreakoutNoFrameskip-v4__2.log"
    log.parent.mkdir()
    log.write_text(
        "batch size 1024, ...\niter 1/3 step 1024 SPS 400 return n/a (last 0) ETA 0m02s\n"
        "iter 2/3 step 2048 SPS 410 return 1.50 (last 4) ETA 0m01s\niter 3/3 step 3072 SPS 420 return -2.25 (last 9) ETA 0m00s\n"
    )
    ((key, seeds),) = report.collect(tmp_path).items()
    assert key == ("BreakoutNoFrameskip-v4", "ppo_atari") and list(seeds) == [2]
    assert seeds[2]["final"] == -2.25 and seeds[2]["last_step"] == 3072 and seeds[2]["sps"] == 420
    assert seeds[2]["curve"][0].tolist() == [2048, 3072]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope.py", "--env-ids", "CartPole-v1"], "error: unknown script 'nope.py'; the sweep runs one of ppo.py"),
        (["ppo.py", "--env-ids", "CartPol-v1"], "error: unknown env id 'CartPol-v1'"),
        (["ppo.py", "--env-ids", "PongNoFrameskip-v4"], "error: PongNoFrameskip-v4 is an Atari game; use ppo_atari.py for it"),
        (["ppo.py", "--env-ids", "CartPole-v1", "--", "--seed", "3"], "error: the sweep sets --seed itself"),
        (["ppo.py", "--env-ids", "CartPole-v1", "--", "--num-minibatches", "3"], "--num-minibatches 3; try 2 or 4"),
        (
            ["ppo.py", "--env-ids", "CartPole-v1", "--", "--no-such-flag"],
            "error: ppo.py does not take the arguments '--no-such-flag'",
        ),
        (["ppo.py", "--env-ids", "CartPole-v1", "--partition", "p"], "error: --partition and --account are Slurm's"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_submitted(tmp_path, argv, message, capsys):
    command = [argv[0], "--seeds", "1", "--out", str(tmp_path / "out"), *argv[1:]]
    if "PongNoFrameskip-v4" in argv:  # a process of its own: this one imported ale-py, whose Atari ids the script's check
        result = sweep(*command)  # then makes (and refuses for their images) instead of naming them as a fresh process does
    else:  # in this process: sweep.py's checks import the script, and torch with it (a fresh interpreter's 2 s)
        result = main_in_process(capsys, sweep_py.main, command)
    one_line = result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert result.returncode == 1 and one_line and message.removeprefix("error: ") in result.stderr, result.stderr
    assert not (tmp_path / "out" / "submitit").exists()


def test_slurm_without_sbatch_is_one_line(tmp_path):
    env = {**ENV, "PATH": str(Path(sys.executable).parent)}  # python, and no Slurm
    result = sweep("ppo.py", "--env-ids", "CartPole-v1", "--seeds", "1", "--out", str(tmp_path), "--cluster", "slurm", env=env)
    assert (
        result.returncode == 1
        and result.stderr
        == "error: --cluster slurm needs Slurm's sbatch on the PATH; run the sweep on a Slurm login node, or use --cluster local\n"
    )


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A single-node Slurm cluster with accounting, started for this module and stopped after it."""
    missing = [d for d in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd") if shutil.which(d) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} not found); .ci/run installs it with apt-get")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's daemons run as root")
    state = tmp_path_factory.mktemp("slurm")
    started = subprocess.run(
        ["bash", str(ROOT / "tests" / "slurm" / "start.sh"), str(state)], capture_output=True, text=True, timeout=120
    )
    assert started.returncode == 0, started.stderr
    env = {**ENV, "SLURM_CONF": str(state / "slurm.conf")}
    yield env
    subprocess.run(["bash", str(ROOT / "tests" / "slurm" / "stop.sh"), str(state)], timeout=60)


def squeue(env, job: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True, env=env).stdout.strip()


def earlier_instance_gone(env, job: str) -> bool:
    """No slurmstepd of a requeued job's earlier instance runs any more. Started again before that, or within the
    second its credential was revoked, the job is killed for good ("Job credential revoked"), as seen on a loaded
    machine; Slurm's own two-minute hold, which the test skips, is what prevents that on a cluster."""
    job_id = subprocess.run(["squeue", "-h", "-j", job, "-o", "%A"], capture_output=True, text=True, env=env).stdout.strip()
    return bool(job_id) and subprocess.run(["pgrep", "-f", rf"slurmstepd: \[{job_id}\."], capture_output=True).returncode == 1


def test_slurm_sweep_requeued_and_preempted_jobs_resume_exactly(slurm, tmp_path):
    out, reference = tmp_path / "sweep", tmp_path / "reference"
    script_args = ["--", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "6400", "--no-cuda"]  # 50 iterations
    common = ["ppo.py", "--env-ids", "CartPole-v1", "--seeds", "1", "2", "--cpus", "1", "--time", "10"]
    assert (
        "no partition 'nope'"
        in sweep(*common, "--out", str(out), "--cluster", "slurm", "--partition", "nope", *script_args, env=slurm).stderr
    )
    proc = subprocess.Popen(
        [*SWEEP, *common, "--out", str(out), "--cluster", "slurm", "--wait", *script_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=slurm,
        cwd=ROOT,
    )
    logs = [out / "logs" / f"ppo__CartPole-v1__{seed}.log" for seed in (1, 2)]  # array tasks 0 and 1 (the sweep's order)
    stop = [
        ["scontrol", "requeue"],  # task 0, as an admin or a preemption does: SIGTERM, then requeued
        ["scancel", "--signal=USR2"],  # task 1: submitit's signal before a time limit
    ]
    deadline, array, stopped = time.time() + 120, None, set()
    while len(stopped) < 2:  # each task stopped as soon as its own log shows iteration 10: neither waits for the other
        assert time.time() < deadline and proc.poll() is None, "the jobs did not start"
        for task, log in enumerate(logs):
            if task not in stopped and log.exists() and "iter 10/" in log.read_text():
                array = array or next(p.name for p in (out / "submitit").iterdir() if (p / f"{p.name}_submission.sh").exists())
                subprocess.run([*stop[task], f"{array}_{task}"], check=True, env=slurm)
                stopped.add(task)
        time.sleep(0.2)
    first, second = f"{array}_0", f"{array}_1"
    requeued, held_since = set(), {}
    while proc.poll() is None:  # Slurm holds a requeued job for two minutes: release it as soon as that is safe
        for job in (first, second):
            if squeue(slurm, job) != "PENDING BeginTime":
                continue
            held_since.setdefault(job, time.time())
            if time.time() - held_since[job] > 1.5 and earlier_instance_gone(slurm, job):
                subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=slurm)
                requeued.add(job)
                del held_since[job]  # a second hold waits as the first did
        assert time.time() < deadline + 300, "the sweep did not end"
        time.sleep(0.5)
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stdout + stderr
    assert requeued == {first, second}
    for log in logs:
        text = log.read_text()
        # SIGTERM: the iteration in progress ran to its end and was saved, the script exited 143, the job was requeued
        assert "stopped by SIGTERM after iteration" in text and re.search(r"resumed from \S+ at iteration \d+", text)
    # the job: its resources, its time limit and submitit's signal before it, one run per array task
    sbatch = (out / "submitit" / array / f"{array}_submission.sh").read_text()
    for line in ("#SBATCH --cpus-per-task=1", "#SBATCH --time=10", "#SBATCH --signal=USR2@120", "#SBATCH --array=0-1%2"):
        assert line in sbatch
    # accounting (slurmdbd), as submitit reads it: each task ran twice, requeued and then completed
    accounted = subprocess.run(
        ["sacct", "-X", "-n", "-D", "-j", array, "-o", "JobID,State"], capture_output=True, text=True, env=slurm
    ).stdout
    assert sorted(accounted.split("\n")[i].split()[1] for i in range(4)) == [
        "COMPLETED",
        "COMPLETED",
        "REQUEUED",
        "REQUEUED",
    ], accounted
    # the same runs, never stopped, in this process: each run's command as the sweep plans it (what the jobs ran)
    planned = argparse.Namespace(out=reference, env_ids=["CartPole-v1"], seeds=[1, 2], script="ppo.py", tag=None, fresh=True)
    for _, _, planned_run in sweep_py.plan(planned, "ppo", script_args[1:]):
        assert planned_run.command[1] == str(ROOT / "ppo.py")
        run("ppo.py", *planned_run.command[2:], cwd=ROOT)  # cwd: the jobs' (sweep.Run)
    for seed in (1, 2):
        step, agent = agent_of(out / "runs" / f"CartPole-v1__ppo__{seed}__sweep" / "ppo.pt")
        ref_step, ref_agent = agent_of(reference / "runs" / f"CartPole-v1__ppo__{seed}__sweep" / "ppo.pt")
        assert step == ref_step == 6400
        assert all(torch.equal(agent[k], ref_agent[k]) for k in agent)
    groups = report.collect(out)
    assert sorted(groups[("CartPole-v1", "ppo")]) == [1, 2]
