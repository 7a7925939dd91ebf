"""Run the scripts as a user would: in-process with runpy (to read the resulting globals) or as a
subprocess (to see exit codes and what the terminal shows)."""

import importlib.util
import os
import runpy
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from ale_py.vector_env import AtariVectorEnv
from gymnasium.vector import SyncVectorEnv

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["ppo.py", "ppo_rnn.py", "ppo_continuous_action.py", "ppo_atari.py"]
TOY_SCRIPTS = [s for s in SCRIPTS if s != "ppo_atari.py"]  # the scripts that can run the tests' own envs (tests.envs)
# ppo_rnn.py with its other recurrent cell: the tests of whole runs (training, resume, signals, errors, evaluation,
# torchrun, CUDA) take it as one more script; run(), cli(), load() and the tables below understand it
GRU = "ppo_rnn.py --cell gru"
VARIANTS = [*SCRIPTS, GRU]
TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2"]
# a real env of each script's kind whose episodes end within a few dozen steps of random play
QUICK_ENV = {
    "ppo.py": "CartPole-v1",
    "ppo_rnn.py": "CartPoleNoVel-v1",
    "ppo_continuous_action.py": "Hopper-v5",
    "ppo_atari.py": "BreakoutNoFrameskip-v4",
    GRU: "CartPoleNoVel-v1",
}
# another env of the same kind, for checkpoints trained on a different env
OTHER_ENV = {
    "ppo.py": "Acrobot-v1",
    "ppo_rnn.py": "Acrobot-v1",
    "ppo_continuous_action.py": "Pendulum-v1",
    "ppo_atari.py": "PongNoFrameskip-v4",
    GRU: "Acrobot-v1",
}

# the vector env class and method a script's rollout calls once a step (ppo_atari.py: ale-py's native env, its recv)
STEP_CLASS = {s: AtariVectorEnv if s == "ppo_atari.py" else SyncVectorEnv for s in VARIANTS}
STEP_METHOD = {s: "recv" if s == "ppo_atari.py" else "step" for s in VARIANTS}
# flags that make a script's envs pickle with their state, for exact resume
EXACT_RESUME = {s: ["--no-native-envs"] if s == "ppo_atari.py" else [] for s in VARIANTS}


def command(script: str) -> tuple:
    """(the script's path, the flags of its variant): GRU is ppo_rnn.py with --cell gru."""
    name, *flags = script.split()
    return ROOT / name, flags


def script_argv(script: str, argv) -> list:
    """The script's path and arguments for a subprocess: its variant's flags, then argv, on the CPU (on_cpu)."""
    path, flags = command(script)
    return [str(path), *on_cpu([*flags, *argv])]


def toy(script: str, name: str) -> str:
    """The id of a test env (tests/envs.py) with the action space the script needs."""
    return f"tests.envs:{name}{'Box' if script == 'ppo_continuous_action.py' else ''}-v0"


def plain(script: str) -> list:
    """Flags that make the observations and rewards a script learns from the env's own (no normalization)."""
    return ["--no-norm-obs", "--no-norm-reward"] if script == "ppo_continuous_action.py" else []


def load(script: str):
    """Import a script's definitions (its __main__ guard keeps training from running)."""
    path, _ = command(script)
    spec = importlib.util.spec_from_file_location(path.stem + "_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that what the script defines (env wrappers) pickles
    spec.loader.exec_module(module)
    return module


def on_cpu(argv) -> list:
    """The suite pins CPU numerics: every run is on the CPU unless a test asks for `--cuda` (tests/test_cuda.py)."""
    return list(argv) if "--cuda" in argv else [*argv, "--no-cuda"]


def run(script: str, *argv: str, cwd) -> dict:
    """Run a script in this process, in `cwd`, and return its globals (what `%run` leaves)."""
    old_argv, old_cwd = sys.argv, os.getcwd()
    path, flags = command(script)
    sys.argv = [path.name, *on_cpu([*flags, *argv])]
    Path(cwd).mkdir(parents=True, exist_ok=True)
    os.chdir(cwd)
    try:
        return runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)


def error_of(script: str, *argv: str, cwd) -> str:
    """The message a bad input stops the script with (SystemExit prints it alone, exit code 1)."""
    with pytest.raises(SystemExit) as exc:
        run(script, *argv, cwd=cwd)
    message = str(exc.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


def cli(script: str, *argv: str, cwd, env=None, timeout=600, via=()) -> subprocess.CompletedProcess:
    """Run a script as a subprocess in `cwd` (through a tool and its flags given in `via`, such as benchmark/tools/phases.py)."""
    full_env = {**os.environ, "PYTHONPATH": python_path(), "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run(
        [sys.executable, *via, *script_argv(script, argv)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(script: str, argv: list, cwd) -> subprocess.Popen:
    cwd.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": python_path(), "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline"}
    return subprocess.Popen(
        [sys.executable, *script_argv(script, argv)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(proc: subprocess.Popen, prefix: str) -> list:
    """The lines the process prints up to the first that starts with prefix."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    said = proc.stderr.read() if proc.stderr else "".join(lines)  # torchrun's: stderr into stdout
    raise AssertionError(f"the run ended before printing {prefix!r}: {said[-2000:]}")


def python_path() -> str:
    """The caller's PYTHONPATH with the repo root in front (so that `tests.envs:...` ids import), not
    instead of it: where the packages themselves import through PYTHONPATH, the child needs them too."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def params(agent) -> list:
    return [p.detach().clone() for p in agent.parameters()]


def same_params(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def checkpoint_path(cwd) -> Path:
    (path,) = list(Path(cwd).glob("runs/*/*.pt"))
    return path


def agent_outputs(g: dict, minibatch: tuple) -> tuple:
    """The agent's (action, log-prob, entropy, value) on a minibatch as update_minibatch takes it: (obs, logprobs, actions,
    ...), ppo_rnn.py's ending with (dones, state), from which it replays the sequences."""
    obs, actions = minibatch[0], minibatch[2]
    with torch.no_grad():
        if "initial_rnn_state" in g:
            return g["agent"].get_action_and_value(obs, minibatch[7], minibatch[6], actions)[:4]
        return g["agent"].get_action_and_value(obs, actions)


def minibatch_ratio(g: dict) -> tuple:
    """(new log-probs, ratio) of the minibatch step a run stopped in (at its optimizer.step, before the parameters moved),
    recomputed from the agent as update_minibatch computes them."""
    mb = g["mb_inds"]
    minibatch = tuple(b[mb] for b in g["batch"]) + ((g["mb_state"],) if "mb_state" in g else ())
    newlogprob = agent_outputs(g, minibatch)[1]
    return newlogprob, (newlogprob - g["b_logprobs"][mb]).exp()


def interrupt_at_call(monkeypatch, cls, name, call_number):
    """Make cls.name raise KeyboardInterrupt on its `call_number`-th call: the run stops there, mid-iteration (as at a
    second Ctrl-C), leaving the namespace of that moment (what a test inspects)."""
    original, calls = getattr(cls, name), [0]

    def wrapper(self, *a, **kw):
        calls[0] += 1
        if calls[0] == call_number:
            raise KeyboardInterrupt
        return original(self, *a, **kw)

    monkeypatch.setattr(cls, name, wrapper)


def signal_at_call(monkeypatch, cls, name, call_number, signum=signal.SIGINT):
    """Send this process `signum` in the `call_number`-th call of cls.name, as a user's Ctrl-C (or a kill) arrives: the
    script's handler notes it, and the run stops after the iteration in progress."""
    original, calls = getattr(cls, name), [0]

    def wrapper(self, *a, **kw):
        calls[0] += 1
        if calls[0] == call_number:
            signal.raise_signal(signum)
        return original(self, *a, **kw)

    monkeypatch.setattr(cls, name, wrapper)


def popen_interruptible(argv: list, **kwargs) -> subprocess.Popen:
    """subprocess.Popen for a child that Ctrl-C must reach, started as a terminal starts it: with SIGINT's
    default action. A test run launched in the background by a non-interactive shell (`pytest &` in a
    script) ignores SIGINT, and an ignored signal stays ignored in every child it starts."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a handled signal is reset at exec
    try:
        return subprocess.Popen(argv, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def main_in_process(capsys, main, argv: list) -> types.SimpleNamespace:
    """A tool's main(argv) run in this process (no fresh interpreter importing its libraries): its exit status, stdout and
    stderr, as subprocess.run would give them."""
    capsys.readouterr()
    try:
        main([str(arg) for arg in argv])
        code = 0
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    if isinstance(code, str):  # SystemExit("error: ..."): printed to stderr, status 1
        err, code = err + code + "\n", 1
    return types.SimpleNamespace(returncode=code or 0, stdout=out, stderr=err)


def report_cli(capsys, argv: list) -> types.SimpleNamespace:
    """benchmark/report.py's command line, run in this process (main_in_process): matplotlib and rliable imported once."""
    if str(ROOT / "benchmark") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmark"))
    import report

    return main_in_process(capsys, report.main, argv)
