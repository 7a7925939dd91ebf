"""Data parallelism under torch.distributed (gloo on the CPU, 2 processes, tiny budgets): every rank holds
the same parameters, the averaged update is the update on the union of the ranks' minibatches, rank 0
logs every rank's episodes, resume under torchrun is exact, two "nodes" on the loopback address train
one run, and bad distributed setups stop with a one-line error."""

import os
import re
import shutil
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.distributed import free_port, run_distributed
from tests.helpers import (
    EXACT_RESUME,
    GRU,
    QUICK_ENV,
    ROOT,
    SCRIPTS,
    VARIANTS,
    command,
    error_of,
    load,
    popen_interruptible,
    python_path,
    wait_for,
)

# 4 envs in all, 2 per process; a minibatch of 32 samples (16 per process); ppo_rnn.py: one env per process's minibatch share
SMALL_STEPS = 16
SMALL = ["--num-envs", "4", "--num-steps", str(SMALL_STEPS), "--num-minibatches", "2", "--update-epochs", "2"]


def env_args(script: str) -> list:
    return ["--env-id", QUICK_ENV[script]]


@pytest.mark.parametrize("script", SCRIPTS)  # the GRU's carry is gathered as the LSTM's (a tuple of one tensor, not two)
def test_resume_under_torchrun_equals_uninterrupted_and_ranks_agree(script, tmp_path):
    """2 processes, 5 iterations straight, against SIGTERM in iteration 3 then --resume: the same parameters on every
    rank, and the same as the run that never stopped."""
    argv = [*env_args(script), *SMALL, "--total-timesteps", "320", "--save-model", *EXACT_RESUME[script]]
    straight = run_distributed(script, argv, tmp_path / "a")
    assert all(r["error"] is None and r["global_step"] == 320 for r in straight)
    assert all(torch.equal(straight[0]["agent"][k], straight[1]["agent"][k]) for k in straight[0]["agent"])
    assert [r["group_held_elsewhere"] for r in straight] == [0, 0]  # destroy_process_group freed the group on both ranks

    stopped = run_distributed(script, argv, tmp_path / "b", stop={"env_step_sigterm": 2 * 16 + 5})  # both, in iteration 3
    assert [r["error"] for r in stopped] == [128 + signal.SIGTERM] * 2  # iteration 3 ran to its end on both
    (path,) = (tmp_path / "b" / "rank0").glob("runs/*/*.pt")
    assert not list((tmp_path / "b" / "rank1").glob("runs/*"))  # one run, one record
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["iteration"] == 3 and len(ckpt["ranks"]) == 2 and ckpt["global_step"] == 192
    for rank in (0, 1):  # every process reads the settings from the file: on each machine of a run, as at its start
        (tmp_path / "c" / f"rank{rank}").mkdir(parents=True)
        shutil.copy(path, tmp_path / "c" / f"rank{rank}" / "saved.pt")
    resumed = run_distributed(script, ["--resume", "saved.pt"], tmp_path / "c")
    assert all(r["global_step"] == 320 for r in resumed)
    for rank in (0, 1):
        assert all(torch.equal(straight[0]["agent"][k], resumed[rank]["agent"][k]) for k in straight[0]["agent"])

    assert "was saved by 2 process(es), not 1; start as many" in error_of(script, "--resume", str(path), cwd=tmp_path / "d")


def reference_gradients(script: str, records: list) -> list:
    """The gradients one process computes on the union of the ranks' minibatches from the same parameters:
    advantages normalized over the union, clipped surrogate, clipped value loss, entropy, norm clipped."""
    module = load(script)
    args = module.Args(cell=command(script)[1][-1]) if script == GRU else module.Args()
    envs = gym.vector.SyncVectorEnv([module.make_env(QUICK_ENV[script], 0, False, "reference")])
    agent = module.Agent(envs, args) if command(script)[0].name == "ppo_rnn.py" else module.Agent(envs)
    agent.load_state_dict(records[0]["agent"])
    mb = {name: torch.cat([r["minibatch"][name] for r in records]) for name in records[0]["minibatch"]}
    if command(script)[0].name == "ppo_rnn.py":
        # a minibatch is whole env sequences, time-major: put the ranks' envs side by side
        def side_by_side(name):
            parts = [r["minibatch"][name] for r in records]
            return torch.cat([p.reshape(SMALL_STEPS, -1, *p.shape[1:]) for p in parts], 1).flatten(0, 1)

        mb = {name: side_by_side(name) for name in mb}
        state = tuple(torch.cat([r["mb_state"][i] for r in records], 1) for i in range(len(records[0]["mb_state"])))
        _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(mb["b_obs"], state, mb["b_dones"], mb["b_actions"])
    else:
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["b_obs"], mb["b_actions"])
    ratio = (newlogprob - mb["b_logprobs"]).exp()
    advantages = (mb["b_advantages"] - mb["b_advantages"].mean()) / (mb["b_advantages"].std() + 1e-8)
    pg_loss = module.policy_loss(advantages, ratio, args.clip_coef)
    v_clipped = mb["b_values"] + torch.clamp(newvalue - mb["b_values"], -args.clip_coef, args.clip_coef)
    v_loss = 0.5 * torch.max((newvalue - mb["b_returns"]) ** 2, (v_clipped - mb["b_returns"]) ** 2).mean()
    loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    return [p.grad for p in agent.parameters()]


@pytest.mark.parametrize("script", VARIANTS)
def test_averaged_update_is_the_update_on_the_union(script, tmp_path):
    """Stopped at the first optimizer step: each rank holds the gradients averaged over both ranks and
    clipped, the same on both, and they equal one process's gradients on the two minibatches together."""
    records = run_distributed(script, [*env_args(script), *SMALL, "--total-timesteps", "64"], tmp_path, stop={"adam_step": 1})
    assert all(len(r["minibatch"]["b_obs"]) == len(records[0]["minibatch"]["b_obs"]) > 0 for r in records)
    assert not torch.equal(records[0]["minibatch"]["b_obs"], records[1]["minibatch"]["b_obs"])  # different data
    for mine, theirs in zip(records[0]["grads"], records[1]["grads"], strict=True):
        assert torch.equal(mine, theirs)
    for mine, reference in zip(records[0]["grads"], reference_gradients(script, records), strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-6)


def test_rank_0_logs_every_ranks_episodes(tmp_path):
    records = run_distributed("ppo.py", [*SMALL, "--total-timesteps", "640"], tmp_path)
    (run_dir,) = (tmp_path / "rank0" / "runs").iterdir()
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    returns, lengths = events.Scalars("charts/episodic_return"), events.Scalars("charts/episodic_length")
    logged = sorted((r.value, length.value) for r, length in zip(returns, lengths, strict=True))
    played = sorted(records[0]["episodes"] + records[1]["episodes"])
    assert len(records[0]["episodes"]) > 5 and len(records[1]["episodes"]) > 5
    assert logged == played
    assert [e.step for e in events.Scalars("charts/SPS")] == [
        64 * i for i in range(1, 11)
    ]  # global steps count both processes


def test_episodes_of_an_interrupted_iteration_reach_the_log(tmp_path):
    """Ctrl-C in iteration 3, after every env finished an episode in it (10-step episodes, 16 steps an
    iteration): rank 0 logs the episodes of both processes, not only its own."""
    argv = ["--env-id", "tests.envs:Constant-v0", *SMALL, "--total-timesteps", "320"]
    records = run_distributed("ppo.py", argv, tmp_path, stop={"env_step": 2 * 16 + 10})  # the 42nd env step raises
    assert [len(r["episodes"]) for r in records] == [8, 8]  # 2 envs each, episodes ending at their steps 10, 20, 30, 40
    (run_dir,) = (tmp_path / "rank0" / "runs").iterdir()
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    # 4 envs in all, so an env's k-th step is global step 4k: each of the 4 ends at global steps 40, 80, 120, 160
    assert sorted(e.step for e in events.Scalars("charts/episodic_return")) == sorted([40, 80, 120, 160] * 4)


def test_normalization_statistics_are_shared(tmp_path):
    """ppo_continuous_action.py: the running observation and return statistics combine both processes'
    envs at every step, so they are identical on both ranks and count every env step of the run."""
    records = run_distributed(
        "ppo_continuous_action.py", [*env_args("ppo_continuous_action.py"), *SMALL, "--total-timesteps", "128"], tmp_path
    )
    for (mean0, var0, count0), (mean1, var1, count1) in zip(records[0]["statistics"], records[1]["statistics"], strict=True):
        np.testing.assert_array_equal(mean0, mean1)
        np.testing.assert_array_equal(var0, var1)
        assert count0 == count1
    obs_count, return_count = records[0]["statistics"][0][2], records[0]["statistics"][1][2]
    assert obs_count == pytest.approx(4 * (1 + 32)) and return_count == pytest.approx(
        4 * 32
    )  # the reset and 32 steps of all 4 envs


def test_bad_distributed_setups_are_one_line_errors(tmp_path, monkeypatch):
    records = run_distributed("ppo.py", ["--num-envs", "3", "--total-timesteps", "384"], tmp_path / "a")
    error = records[0]["error"]  # 1 or 2 envs a process, each 128 steps: 4 minibatches of 32 or 64
    assert error.startswith("error: --num-envs 3 ") and "2 processes" in error and error.endswith("--num-envs 2 or 4")
    assert records[1]["error"] == 1  # every process stops; rank 0 alone says why

    argvs = [[*SMALL, "--total-timesteps", "64"], [*SMALL, "--total-timesteps", "64", "--learning-rate", "0.001"]]
    records = run_distributed("ppo.py", None, tmp_path / "b", argvs=argvs)
    assert records[0]["error"].startswith("error: ") and "different arguments (learning_rate)" in records[0]["error"]
    assert records[1]["error"] == 1

    # one GPU for two local processes: refused before any process group is made
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    message = error_of("ppo.py", *SMALL, "--cuda", cwd=tmp_path / "c")
    assert "1 GPU(s)" in message and "--nproc-per-node" in message and "--no-cuda" in message


def torchrun(*args: str, cwd, env=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": python_path(), "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline", **(env or {})}
    command = [sys.executable, "-m", "torch.distributed.run", *args]
    return popen_interruptible(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def test_ctrl_c_under_torchrun_stops_every_process_together(tmp_path):
    """Ctrl-C in a terminal signals torchrun and every process, each somewhere else in its iteration
    (inside a collective, too): they note it, stop together at the end of the iteration, and rank 0
    saves the last whole iteration of every process and flushes the log."""
    argv = [
        str(ROOT / "ppo_continuous_action.py"),
        *env_args("ppo_continuous_action.py"),
        *SMALL,
        "--total-timesteps",
        "1000000",
    ]
    proc = torchrun("--standalone", "--nproc-per-node", "2", *argv, "--no-cuda", "--save-model", cwd=tmp_path)
    for line in proc.stdout:
        if line.startswith("iter 3/"):
            break
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole process group
    out = line + proc.communicate(timeout=120)[0]
    (stop,) = re.findall(
        r"stopped by SIG(?:INT|TERM) after iteration (\d+)", out
    )  # torchrun's SIGTERM may follow: the iteration ran to its end
    assert proc.returncode != 0 and 'ppo_continuous_action.py", line' not in out, out  # torchrun prints its own traceback
    ckpt = torch.load(next(tmp_path.glob("runs/*/*.pt")), weights_only=False)
    assert (
        len(ckpt["ranks"]) == 2
        and ckpt["iteration"] == int(stop) >= 3
        and all(part["envs"] is not None for part in ckpt["ranks"])
    )
    (events,) = list(tmp_path.glob("runs/*/events.out.tfevents.*"))
    assert events.stat().st_size > 0


def test_torchrun_standalone(tmp_path):
    """The command line of the README: one record, one progress line per iteration, global steps."""
    proc = torchrun(
        "--standalone",
        "--nproc-per-node",
        "2",
        str(ROOT / "ppo.py"),
        *SMALL,
        "--total-timesteps",
        "320",
        "--no-cuda",
        cwd=tmp_path,
    )
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    progress = [line for line in out.splitlines() if line.startswith("iter ")]
    assert len(progress) == 5 and re.match(r"iter 5/5 step 320 SPS \d+", progress[-1])
    assert "2 processes of 2 envs" in out
    assert len(list((tmp_path / "runs").iterdir())) == 1


def two_nodes(argv: list, cwd, envs=({}, {})) -> tuple:
    """Two launchers as two machines (one process each), meeting at a c10d rendezvous on 127.0.0.1, each in
    its own directory cwd/node0 and cwd/node1 with its extra environment variables; (outputs, exit codes)."""
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = []
    for node_rank in (0, 1):
        (cwd / f"node{node_rank}").mkdir()
        args = ["--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
        args += ["--rdzv-endpoint", endpoint, "--rdzv-id", "test", *argv]
        nodes.append(torchrun(*args, cwd=cwd / f"node{node_rank}", env=envs[node_rank]))
    return [node.communicate(timeout=300)[0] for node in nodes], [node.returncode for node in nodes]


def test_two_nodes_over_loopback(tmp_path):
    """Two launchers as two machines (one process each), meeting at a c10d rendezvous on 127.0.0.1."""
    outs, codes = two_nodes([str(ROOT / "ppo.py"), *SMALL, "--total-timesteps", "320", "--no-cuda", "--save-model"], tmp_path)
    assert codes == [0, 0], outs
    logging_node = 0 if "iter 5/5 step 320" in outs[0] else 1  # rank 0 may start on either node
    assert "iter 5/5 step 320" not in outs[1 - logging_node]
    (path,) = (tmp_path / f"node{logging_node}").glob("runs/*/ppo.pt")
    assert len(torch.load(path, weights_only=False)["ranks"]) == 2


def test_a_check_failing_on_one_machine_stops_both_with_its_reason(tmp_path):
    """An env id whose module imports on the first machine only: whichever rank that machine's process
    gets, both stop at start-up, and rank 0 prints the one line (not a traceback from a collective)."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "first_machine_only.py").write_text("")
    argv = [
        str(ROOT / "ppo.py"),
        "--env-id",
        "first_machine_only:CartPole-v1",
        *SMALL,
        "--total-timesteps",
        "320",
        "--no-cuda",
    ]
    outs, codes = two_nodes(argv, tmp_path, envs=({"PYTHONPATH": f"{tmp_path / 'mods'}{os.pathsep}{python_path()}"}, {}))
    assert all(code != 0 for code in codes), outs
    errors = [line for out in outs for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the module of env id 'first_machine_only:CartPole-v1' does not import" in errors[0], outs
    assert not any('ppo.py", line' in out for out in outs), outs
    assert not list(tmp_path.glob("node*/runs"))


def test_nan_under_torchrun_saves_and_says_why(tmp_path):
    """A NaN stops every process; rank 0 says why and which iteration the last checkpoint (--save-every 0) keeps. No process exits
    before rank 0 has closed (wandb's offline finish makes that slow): torchrun stops the others when one exits.
    --track writes rank 0's offline wandb run (the suite's one run of wandb: its start and finish take seconds)."""
    argv = [
        str(ROOT / "ppo.py"),
        "--env-id",
        "tests.envs:NaNReward-v0",
        *SMALL,
        "--total-timesteps",
        "2000",
        "--save-model",
        "--save-every",
        "0",
    ]
    proc = torchrun("--standalone", "--nproc-per-node", "2", *argv, "--track", "--no-cuda", cwd=tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0
    (line,) = [line for line in out.splitlines() if line.startswith("error:")]
    assert line.startswith("error: the loss became nan") and "at iteration 19;" in line, out
    assert line.endswith("/ppo.pt keeps iteration 18"), line
    assert 'ppo.py", line' not in out, out
    ckpt = torch.load(next(tmp_path.glob("runs/*/ppo.pt")), weights_only=False)
    assert ckpt["iteration"] == 18 and len(ckpt["ranks"]) == 2
    assert len(list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))) == 1


def pid_of_rank(rank: int, marker: str) -> int:
    """The pid of the worker with this RANK whose command line holds marker (a path of this test's)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmdline and f"RANK={rank}".encode() in environ and b"ppo.py" in b" ".join(cmdline):
            return int(pid)
    raise AssertionError(f"no worker of rank {rank} running")


def test_torchrun_max_restarts_continues_a_killed_run_from_its_checkpoint(tmp_path):
    """torchrun --max-restarts 1 with --run-dir and --resume auto: one worker killed with SIGKILL after a periodic
    checkpoint, torchrun stops the other and starts both again, and they continue from the checkpoint. The run
    finishes with the parameters of a run that was never killed, in one run directory, every iteration logged once."""
    run_dir = tmp_path / "run"
    argv = [str(ROOT / "ppo.py"), *SMALL, "--total-timesteps", "1920", "--no-cuda", "--save-model", "--save-every", "0"]
    proc = torchrun(
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        *argv,
        "--run-dir",
        str(run_dir),
        "--resume",
        "auto",
        cwd=tmp_path,
    )
    lines = wait_for(proc, "iter 5/")
    os.kill(pid_of_rank(1, str(run_dir)), signal.SIGKILL)
    out = "".join(lines) + proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-4000:]
    assert "resumed from" in out and not (tmp_path / "runs").exists()
    # the run never killed: 2 processes of the same command, started as torchrun starts them (tests/distributed.py), from a
    # server that imported torch once instead of a launcher and two workers importing it afresh
    straight = run_distributed("ppo.py", [*argv[1:], "--run-dir", str(tmp_path / "straight")], tmp_path / "s")
    assert [(r["error"], r["iteration"]) for r in straight] == [(None, 30)] * 2  # finished after iteration 30
    ckpt, reference = (torch.load(path / "ppo.pt", weights_only=False) for path in (run_dir, tmp_path / "straight"))
    assert ckpt["global_step"] == 1920 and all(torch.equal(v, reference["agent"][k]) for k, v in ckpt["agent"].items())
    steps = [
        event.step for event in EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload().Scalars("charts/SPS")
    ]
    assert steps == list(range(64, 1921, 64))
