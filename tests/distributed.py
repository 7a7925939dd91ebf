"""Run a script as N processes of one torch.distributed job on this machine (gloo, CPU), the way torchrun
would start them, but in-process in each child so that a test can patch the script and read its globals.
Each process writes what the test asks for to `out/rank{rank}.pt`."""

import multiprocessing
import os
import signal
import socket
import sys
from pathlib import Path

import gymnasium as gym
import torch
import torch._dynamo  # noqa: F401  (the scripts import it as their group starts: 2 s a process, once in the server here)
import torch.multiprocessing as mp

from tests.helpers import STEP_CLASS, STEP_METHOD, run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stop(KeyboardInterrupt):
    """Ctrl-C, as a patched call raises it."""


def _patch(cls, name: str, call_number: int, before=None, signum=None):
    """Make cls.name raise Stop on its call_number-th call (after calling `before(self)`, if given), or, with `signum`,
    send this process that signal there and go on (the script's handler notes it: the run stops after the iteration)."""
    original, calls = getattr(cls, name), [0]

    def wrapper(self, *a, **kw):
        calls[0] += 1
        if calls[0] == call_number and signum is not None:
            signal.raise_signal(signum)
        elif calls[0] == call_number:
            if before is not None:
                before(self)
            raise Stop
        return original(self, *a, **kw)

    setattr(cls, name, wrapper)


def _worker(rank: int, world_size: int, port: int, script: str, argvs: list, cwd: str, out: str, stop: dict):
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    episodes = []  # every episode this process's envs finished: (return, length)
    native = "--no-native-envs" not in argvs[rank]
    step_class, method = (STEP_CLASS[script], STEP_METHOD[script]) if native else (gym.vector.SyncVectorEnv, "step")
    original_step = getattr(step_class, method)

    def recording_step(self, *args):
        result = original_step(self, *args)
        info = result[4].get("final_info", {})
        if "episode" in info:
            for i in info["_episode"].nonzero()[0]:
                episodes.append((float(info["episode"]["r"][i]), int(info["episode"]["l"][i])))
        return result

    setattr(step_class, method, recording_step)
    grads = {}
    if "adam_step" in stop:  # the first optimizer step: keep the averaged, clipped gradients it would apply
        _patch(
            torch.optim.Adam,
            "step",
            stop["adam_step"],
            lambda opt: grads.update(enumerate(p.grad.clone() for p in opt.param_groups[0]["params"])),
        )
    if "env_step" in stop:
        _patch(step_class, method, stop["env_step"])
    if "env_step_sigterm" in stop:  # SIGTERM: handled even where a background shell left Ctrl-C ignored
        _patch(step_class, method, stop["env_step_sigterm"], signum=signal.SIGTERM)
    groups = []  # the default process group the script creates
    original_init = torch.distributed.init_process_group

    def recording_init(*a, **kw):
        original_init(*a, **kw)
        groups.append(torch.distributed.group.WORLD)

    torch.distributed.init_process_group = recording_init
    error = None
    try:
        g = run(script, *argvs[rank], cwd=Path(cwd) / f"rank{rank}")
    except SystemExit as e:
        error, g = e.code, {}
    keep = {"error": error, "episodes": episodes, "grads": [grads[i] for i in sorted(grads)]}
    # references to the group besides `groups` (and getrefcount's argument) once the script is done: a group kept past
    # destroy_process_group keeps its gloo threads, which can free a collective's tensor during interpreter exit (SIGABRT)
    keep["group_held_elsewhere"] = sys.getrefcount(groups[0]) - 2 if groups else None
    # and let go of it here, while the interpreter runs: the patched torch.distributed.init_process_group would keep
    # `groups` (its closure) to interpreter exit, with the group's gloo threads alive while the interpreter tears down
    # (a thread that needs the GIL then aborts the process: "terminate called without an active exception")
    torch.distributed.init_process_group = original_init
    groups.clear()
    if hasattr(g.get("envs"), "obs_rms"):  # ppo_continuous_action.py's running statistics
        keep["statistics"] = [(rms.mean, rms.var, rms.count) for rms in (g["envs"].obs_rms, g["envs"].return_rms)]
    if "agent" in g:
        keep["agent"] = {k: v.detach().cpu() for k, v in g["agent"].state_dict().items()}
        keep["global_step"], keep["iteration"] = g["global_step"], g["iteration"]
        mb = g.get("mb_inds")
        if mb is not None:
            names = ["b_obs", "b_actions", "b_logprobs", "b_advantages", "b_returns", "b_values", "b_dones"]
            keep["minibatch"] = {name: g[name][mb].detach().cpu() for name in names if name in g}
            keep["mb_inds"] = mb
            if "mb_state" in g:
                keep["mb_state"] = tuple(s.cpu() for s in g["mb_state"])
    torch.save(keep, Path(out) / f"rank{rank}.pt")


def run_distributed(script: str, argv, cwd, world_size: int = 2, stop=None, argvs=None) -> list:
    """Run `script argv` as world_size processes; returns each rank's record (see _worker)."""
    out = Path(cwd) / "records"
    out.mkdir(parents=True, exist_ok=True)
    argvs = argvs or [list(argv)] * world_size
    # forked from a server that imported torch (torch._dynamo too), gymnasium and ale-py once (and ran nothing): a fresh
    # interpreter each, as with "spawn", without each paying those imports again (about 2 s each a process on 2 cores)
    multiprocessing.set_forkserver_preload(["tests.distributed"])
    mp.start_processes(
        _worker,
        args=(world_size, free_port(), script, argvs, str(cwd), str(out), stop or {}),
        nprocs=world_size,
        start_method="forkserver",
    )
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]
