"""Nothing lost when a run dies: SIGTERM stops the run at the end of the iteration in progress and saves it, and with
--save-model the checkpoint is also written every --save-every minutes, atomically, so that a SIGKILL or a kill in
the middle of a write leaves the last whole checkpoint."""

import os
import signal
import subprocess
import sys

import pytest
import torch

from tests.helpers import EXACT_RESUME, QUICK_ENV, ROOT, SCRIPTS, TINY, checkpoint_path, cli, load, on_cpu, python_path, run


def start(script: str, argv: list, cwd) -> subprocess.Popen:
    cwd.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": python_path(), "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline"}
    command = [sys.executable, str(ROOT / script), *on_cpu(argv)]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen, prefix: str) -> list:
    """The lines the process prints up to the first that starts with prefix."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"the run ended before printing {prefix!r}: {proc.stderr.read()[-2000:]}")


@pytest.mark.parametrize("script", SCRIPTS)
def test_sigterm_saves_and_the_resumed_run_equals_an_uninterrupted_one(script, tmp_path):
    # 200 iterations of 2 envs x 16 steps: the signal arrives long before the end
    argv = ["--env-id", QUICK_ENV[script], *TINY, "--total-timesteps", "6400", "--save-model", *EXACT_RESUME[script]]
    proc = start(script, argv, tmp_path / "a")
    wait_for(proc, "iter 3/")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "Traceback" not in err, err
    (stop,) = [line for line in out.splitlines() if line.startswith("interrupted during iteration")]
    ckpt = torch.load(checkpoint_path(tmp_path / "a"), weights_only=False)
    assert 3 <= ckpt["iteration"] < 200 and f"interrupted during iteration {ckpt['iteration'] + 1};" in stop

    # both as processes of their own, as the first: an earlier in-process run of ppo.py leaves torch at one thread,
    # and ppo_atari.py's convolutions round differently with another thread count
    for name, extra in (("b", ["--resume", str(checkpoint_path(tmp_path / "a"))]), ("c", [])):
        (tmp_path / name).mkdir()
        assert cli(script, *argv, *extra, cwd=tmp_path / name).returncode == 0
    resumed, straight = (torch.load(checkpoint_path(tmp_path / name), weights_only=False) for name in "bc")
    assert resumed["global_step"] == straight["global_step"] == 6400
    assert all(torch.equal(resumed["agent"][k], v) for k, v in straight["agent"].items())


def test_sigkill_after_a_periodic_checkpoint_leaves_one_that_resumes(tmp_path):
    argv = [*TINY, "--total-timesteps", "6400", "--save-model", "--save-every", "0"]  # written after every iteration
    proc = start("ppo.py", argv, tmp_path / "a")
    wait_for(proc, "iter 5/")
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    path = checkpoint_path(tmp_path / "a")  # the only file there: no temporary one left beside it
    ckpt = torch.load(path, weights_only=False)
    assert 4 <= ckpt["iteration"] < 200 and ckpt["global_step"] == 32 * ckpt["iteration"]
    assert run("ppo.py", *argv, "--resume", str(path), cwd=tmp_path / "b")["global_step"] == 6400


def test_a_write_stopped_before_its_rename_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    module = load("ppo.py")
    path = str(tmp_path / "ppo.pt")
    module.save_checkpoint({"iteration": 1, "agent": torch.ones(3)}, path, rank=0)

    def killed(*args):
        raise KeyboardInterrupt  # the process dies between the temporary file and the rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        module.save_checkpoint({"iteration": 2, "agent": torch.zeros(3)}, path, rank=0)
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["iteration"] == 1 and torch.equal(ckpt["agent"], torch.ones(3))
