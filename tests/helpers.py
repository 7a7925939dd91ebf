"""Run the scripts as a user would: in-process with runpy (to read the resulting globals) or as a
subprocess (to see exit codes and what the terminal shows)."""

import importlib.util
import os
import runpy
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["ppo.py", "ppo_rnn.py"]
TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2"]


def load(script: str):
    """Import a script's definitions (its __main__ guard keeps training from running)."""
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_under_test", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(script: str, *argv: str, cwd) -> dict:
    """Run a script in this process, in `cwd`, and return its globals (what `%run` leaves)."""
    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = [script, *argv]
    Path(cwd).mkdir(parents=True, exist_ok=True)
    os.chdir(cwd)
    try:
        return runpy.run_path(str(ROOT / script), run_name="__main__")
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)


def cli(script: str, *argv: str, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    """Run a script as a subprocess in `cwd`."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *argv],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def params(agent) -> list:
    return [p.detach().clone() for p in agent.parameters()]


def same_params(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def checkpoint_path(cwd) -> Path:
    (path,) = list(Path(cwd).glob("runs/*/*.pt"))
    return path


def interrupt_at_call(monkeypatch, cls, name, call_number):
    """Make cls.name raise KeyboardInterrupt (as Ctrl-C would) on its `call_number`-th call."""
    original, calls = getattr(cls, name), [0]

    def wrapper(self, *a, **kw):
        calls[0] += 1
        if calls[0] == call_number:
            raise KeyboardInterrupt
        return original(self, *a, **kw)

    monkeypatch.setattr(cls, name, wrapper)
