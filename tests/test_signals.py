"""Nothing lost when a run dies: SIGTERM stops the run at the end of the iteration in progress and saves it, and with
--save-model the checkpoint is also written every --save-every minutes, atomically, so that a SIGKILL or a kill in
the middle of a write leaves the last whole checkpoint."""

import os
import signal
import types

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import (
    EXACT_RESUME,
    QUICK_ENV,
    SCRIPTS,
    TINY,
    checkpoint_path,
    error_of,
    load,
    run,
    start,
    wait_for,
)


@pytest.mark.parametrize("script", SCRIPTS)  # the GRU's state goes through the same checkpoint: test_training.py resumes it
def test_sigterm_saves_and_the_resumed_run_equals_an_uninterrupted_one(script, tmp_path):
    # 64 iterations of 2 envs x 16 steps (Atari's, 80 ms each on 2 cores: 8): the signal arrives long before the end
    iterations = 8 if script == "ppo_atari.py" else 64
    argv = [
        "--env-id",
        QUICK_ENV[script],
        *TINY,
        "--total-timesteps",
        str(32 * iterations),
        "--save-model",
        *EXACT_RESUME[script],
    ]
    proc = start(script, argv, tmp_path / "a")
    wait_for(proc, "iter 3/")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM and err == "", err  # not finished: a shell's status for SIGTERM
    (stop,) = [line for line in out.splitlines() if line.startswith("stopped by SIGTERM after iteration")]
    ckpt = torch.load(checkpoint_path(tmp_path / "a"), weights_only=False)
    # the iteration the signal came in ran to its end and is kept, not thrown away
    assert 3 <= ckpt["iteration"] < iterations and stop.startswith(
        f"stopped by SIGTERM after iteration {ckpt['iteration']}, saved to runs/"
    )

    # both in this process: the suite runs torch at one thread here and in the first's process (tests/conftest.py), so
    # ppo_atari.py's convolutions round the same (it keeps torch's thread count; the others set one thread themselves)
    for name, extra in (("b", ["--resume", str(checkpoint_path(tmp_path / "a"))]), ("c", [])):  # b continues in a's dir
        run(script, *argv, *extra, cwd=tmp_path / name)
    resumed, straight = (torch.load(checkpoint_path(tmp_path / name), weights_only=False) for name in "ac")
    assert resumed["global_step"] == straight["global_step"] == 32 * iterations
    assert all(torch.equal(resumed["agent"][k], v) for k, v in straight["agent"].items())


def test_sigkill_after_a_periodic_checkpoint_leaves_one_that_resumes(tmp_path):
    argv = [*TINY, "--total-timesteps", "1280", "--save-model", "--save-every", "0"]  # written after every iteration
    proc = start("ppo.py", argv, tmp_path / "a")
    wait_for(proc, "iter 5/")
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    path = checkpoint_path(tmp_path / "a")  # the only file there: no temporary one left beside it
    ckpt = torch.load(path, weights_only=False)
    assert 4 <= ckpt["iteration"] < 40 and ckpt["global_step"] == 32 * ckpt["iteration"]
    assert run("ppo.py", *argv, "--resume", str(path), cwd=tmp_path / "b")["global_step"] == 1280


def test_a_write_stopped_before_its_rename_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    module = load("ppo.py")
    args = module.Args(run_dir=str(tmp_path), exp_name="ppo")
    agent = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(agent.parameters())
    carry = dict(next_obs=torch.zeros(2), next_done=torch.zeros(2))  # what the loop carries
    run_state = types.SimpleNamespace(saved=None, recent_returns=[])  # what start_run makes: nothing saved yet
    module.save_checkpoint(args, run_state, agent, optimizer, object(), 10, 1, carry)  # an env with no state of its own

    def killed(*args):
        raise KeyboardInterrupt  # the process dies between the temporary file and the rename

    monkeypatch.setattr(os, "replace", killed)
    saved = {k: v.clone() for k, v in agent.state_dict().items()}
    torch.nn.init.ones_(agent.weight)
    with pytest.raises(KeyboardInterrupt):
        module.save_checkpoint(args, run_state, agent, optimizer, object(), 20, 2, carry)
    ckpt = torch.load(tmp_path / "ppo.pt", weights_only=False)
    assert ckpt["iteration"] == 1 and ckpt["global_step"] == 10 and torch.equal(ckpt["agent"]["weight"], saved["weight"])


def logged_steps(run_dir, tag="charts/SPS") -> list:
    """The steps of `tag` that TensorBoard shows for run_dir (what a restart purged is not among them)."""
    return [event.step for event in EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload().Scalars(tag)]


def test_resume_auto_continues_the_run_in_its_directory_and_its_log_once(tmp_path, monkeypatch):
    """The same command line started again continues from the checkpoint in --run-dir: the finished run has the
    parameters of one that never stopped, and its TensorBoard log shows every iteration once, although the first run
    logged 35 iterations past the checkpoint it left (its writes after the 5th did not reach the disk)."""
    run_dir = tmp_path / "run"
    argv = [
        *TINY,
        "--total-timesteps",
        "1280",
        "--save-model",
        "--save-every",
        "0",
        "--run-dir",
        str(run_dir),
        "--resume",
        "auto",
    ]
    replace, calls = os.replace, [0]

    def replace_five_times(src, dst):
        calls[0] += 1
        if calls[0] <= 10:  # five saves of the checkpoint and its model file
            replace(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", replace_five_times)
        first = run("ppo.py", *argv, cwd=tmp_path / "a")
    assert first["global_step"] == 1280 and torch.load(run_dir / "ppo.pt", weights_only=False)["iteration"] == 5
    assert logged_steps(run_dir) == list(range(32, 1281, 32))
    resumed = run("ppo.py", *argv, cwd=tmp_path / "b")  # the restart: the same command line
    assert resumed["start_iteration"] == 6 and resumed["global_step"] == 1280
    straight = run("ppo.py", *TINY, "--total-timesteps", "1280", cwd=tmp_path / "c")
    assert all(torch.equal(p, q) for p, q in zip(resumed["agent"].parameters(), straight["agent"].parameters(), strict=True))
    assert logged_steps(run_dir) == list(range(32, 1281, 32))  # iterations 1-5 of the first run, 6-40 of the restart
    assert not (tmp_path / "a" / "runs").exists() and not (tmp_path / "b" / "runs").exists()  # one run directory


def test_resume_auto_starts_a_new_run_where_there_is_no_checkpoint_and_needs_a_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    g = run(
        "ppo.py", *TINY, "--total-timesteps", "64", "--save-model", "--run-dir", str(run_dir), "--resume", "auto", cwd=tmp_path
    )
    assert g["start_iteration"] == 1 and torch.load(run_dir / "ppo.pt", weights_only=False)["global_step"] == 64
    message = "error: --resume auto continues the checkpoint in --run-dir: pass --run-dir DIR and --save-model"
    assert error_of("ppo.py", "--resume", "auto", "--save-model", cwd=tmp_path) == message
    assert error_of("ppo.py", "--resume", "auto", "--run-dir", str(run_dir), cwd=tmp_path) == message
