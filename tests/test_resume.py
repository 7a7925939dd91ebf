"""Resume as a user meets it: the checkpoint's settings without retyping them, every conflicting flag in one error, a
finished run trained further, the run directory it came from, a fresh run refused where a checkpoint is, flags that are
not settings, evaluation without --env-id, and the messages around them."""

import re
import signal

import pytest
import torch
import tyro
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import (
    OTHER_ENV,
    SCRIPTS,
    TINY,
    VARIANTS,
    checkpoint_path,
    error_of,
    load,
    params,
    run,
    same_params,
    signal_at_call,
)

# settings no script has by default: a resume that took the defaults instead would fail or train another run
SETTINGS = "--num-envs 2 --num-steps 16 --num-minibatches 2 --update-epochs 5 --learning-rate 0.001".split()


def events(run_dir) -> EventAccumulator:
    return EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()


@pytest.mark.parametrize("script", VARIANTS)
def test_resume_with_no_flags_continues_the_run_in_its_directory(script, tmp_path, monkeypatch, capsys):
    """Ctrl-C in iteration 2 of 4 stops the run after that iteration, which --save-model saves; `--resume PATH` alone then
    continues it with its own settings, in its own directory, to the parameters of the run that never stopped."""
    argv = ["--env-id", OTHER_ENV[script], *SETTINGS, "--total-timesteps", "128", "--save-model", "--no-native-envs"]
    argv = argv[:-1] if script != "ppo_atari.py" else argv
    straight = run(script, *argv, cwd=tmp_path / "straight")
    with monkeypatch.context() as m:
        signal_at_call(m, torch.optim.Adam, "step", 10 + 3)  # in iteration 2 (10 minibatch steps an iteration)
        with pytest.raises(SystemExit) as stop:
            run(script, *argv, cwd=tmp_path / "a")
    assert stop.value.code == 128 + signal.SIGINT
    out = capsys.readouterr().out
    (run_dir,) = (tmp_path / "a" / "runs").iterdir()
    assert f"stopped by SIGINT after iteration 2, saved to {run_dir.relative_to(tmp_path / 'a')}/" in out
    path = checkpoint_path(tmp_path / "a")
    assert torch.load(path, weights_only=False)["iteration"] == 2

    resumed = run(script, "--resume", str(path), cwd=tmp_path / "a")
    assert (
        f"run dir {path.parent}, resumed from {path} at iteration 2" in capsys.readouterr().out
    )  # the directory it came from
    assert resumed["start_iteration"] == 3 and resumed["global_step"] == 128 and resumed["args"].update_epochs == 5
    assert same_params(params(straight["agent"]), params(resumed["agent"]))
    assert list((tmp_path / "a" / "runs").iterdir()) == [run_dir]  # one run, one directory, one log
    steps = [e.step for e in events(run_dir).Scalars("charts/SPS")]
    assert steps == [32, 64, 96, 128]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_conflicting_setting_is_named_in_one_error(script, tmp_path):
    run(script, "--env-id", OTHER_ENV[script], *TINY, "--total-timesteps", "64", "--save-model", cwd=tmp_path)
    path = str(checkpoint_path(tmp_path))
    message = error_of(script, "--resume", path, "--num-envs", "4", "--learning-rate", "0.5", "--gamma", "0.9", cwd=tmp_path)
    default_lr = load(script).Args().learning_rate
    assert message.startswith(f"error: {path!r} keeps the settings it was trained with") and "drop those flags" in message
    for setting in (f"learning_rate={default_lr!r} (not 0.5)", "num_envs=2 (not 4)", "gamma=0.99 (not 0.9)"):
        assert setting in message  # every conflicting flag named, in one error
    assert "total_timesteps=64 (not 32)" in error_of(script, "--resume", path, "--total-timesteps", "32", cwd=tmp_path)
    # how it runs and is recorded may change: a new seed, the CPU, another run directory
    elsewhere = ["--seed", "3", "--save-every", "5", "--run-dir", str(tmp_path / "elsewhere")]
    g = run(script, "--resume", path, *elsewhere, "--total-timesteps", "96", cwd=tmp_path)
    assert g["args"].seed == 3 and g["args"].run_dir == str(tmp_path / "elsewhere") and g["start_iteration"] == 3


def test_total_timesteps_may_grow_and_the_learning_rate_anneals_over_the_new_total(tmp_path):
    """A finished run of 2 iterations trained to 4: iterations 3 and 4 run, at the learning rates of a 4-iteration schedule
    (1 - 2/4 and 1 - 3/4 of the initial one); the log goes on in the same directory."""
    argv = [*TINY, "--total-timesteps", "64", "--save-model", "--learning-rate", "0.001"]
    run("ppo.py", *argv, cwd=tmp_path)
    path = checkpoint_path(tmp_path)
    with pytest.raises(SystemExit) as finished:  # nothing left to train: one line (tests/test_newcomer.py)
        run("ppo.py", "--resume", str(path), cwd=tmp_path)
    assert finished.value.code == 0
    further = run("ppo.py", "--resume", str(path), "--total-timesteps", "128", cwd=tmp_path)
    assert further["global_step"] == 128 and torch.load(path, weights_only=False)["iteration"] == 4
    lrs = [(e.step, e.value) for e in events(path.parent).Scalars("charts/learning_rate")]
    assert lrs == [
        (32, pytest.approx(0.001)),
        (64, pytest.approx(0.0005)),
        (96, pytest.approx(0.0005)),
        (128, pytest.approx(0.00025)),
    ]


def test_a_fresh_run_whose_run_dir_holds_a_checkpoint_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    run("ppo.py", *TINY, "--total-timesteps", "64", "--save-model", "--run-dir", str(run_dir), cwd=tmp_path)
    before = (run_dir / "ppo.pt").read_bytes()
    message = error_of("ppo.py", *TINY, "--total-timesteps", "64", "--run-dir", str(run_dir), cwd=tmp_path)
    assert f"--run-dir {str(run_dir)!r} holds ppo.pt" in message and "--resume auto" in message
    assert (run_dir / "ppo.pt").read_bytes() == before
    further = ["--total-timesteps", "96", "--resume", "auto"]
    assert run("ppo.py", *TINY, "--run-dir", str(run_dir), "--save-model", *further, cwd=tmp_path)["start_iteration"] == 3


@pytest.mark.parametrize("flag", ["--batch-size", "--minibatch-size", "--num-iterations"])
def test_computed_fields_are_not_flags(flag, tmp_path, capsys):
    """What the run computes (batch and minibatch sizes, iterations) is not a setting: not in --help, and refused by tyro
    (which takes every other CleanRL flag as CleanRL's scripts do)."""
    with pytest.raises(SystemExit):
        tyro.cli(load("ppo.py").Args, args=["--help"])
    assert flag not in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # in this process: the exit status is the SystemExit's code
        run("ppo.py", flag, "1024", cwd=tmp_path)
    assert stop.value.code == 2 and flag in capsys.readouterr().err and not (tmp_path / "runs").exists()  # tyro's, not ours


@pytest.mark.parametrize("script", SCRIPTS)
def test_evaluation_takes_the_env_id_from_the_checkpoint(script, tmp_path, capsys):
    run(script, "--env-id", OTHER_ENV[script], *TINY, "--total-timesteps", "32", "--save-model", cwd=tmp_path)
    path = str(checkpoint_path(tmp_path))
    with pytest.raises(SystemExit) as stop:
        run(script, "--eval-checkpoint", path, "--eval-episodes", "2", cwd=tmp_path)
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert re.search(r"^eval: 2 episodes \(sampled\), return -?[\d.]+ ± [\d.]+$", out, re.M), out
    default_env = load(script).Args().env_id
    assert f"env_id={OTHER_ENV[script]!r} (not {default_env!r})" in error_of(
        script, "--eval-checkpoint", path, "--env-id", default_env, cwd=tmp_path
    )


def test_messages_name_the_run_dir_and_the_return_window_and_mention_no_checkpoint_where_none_is_kept(
    tmp_path, monkeypatch, capsys
):
    signal_at_call(monkeypatch, torch.optim.Adam, "step", 1)
    with pytest.raises(SystemExit):
        run("ppo.py", *TINY, "--total-timesteps", "64", cwd=tmp_path)
    lines = capsys.readouterr().out.splitlines()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert f"run dir runs/{run_dir.name}" in lines
    (progress,) = [line for line in lines if line.startswith("iter ")]
    assert re.match(r"iter 1/2 step 32 SPS \d+ return (n/a|[\d.]+ \(\d+ episodes?\)) ETA \d+ s$", progress), lines
    assert "stopped by SIGINT after iteration 1" in lines  # no checkpoint: none mentioned
    assert not any("checkpoint" in line for line in lines)


def test_a_second_ctrl_c_stops_at_once_and_says_what_the_checkpoint_keeps(tmp_path, monkeypatch, capsys):
    """The first Ctrl-C lets the iteration finish; a second one in the same iteration stops it at once (the iteration is
    lost): the exit status is Ctrl-C's, and the message names the iteration the checkpoint on disk keeps."""
    original = torch.optim.Adam.step
    calls = [0]

    def twice(self, *a, **kw):
        calls[0] += 1
        if calls[0] in (9, 10):  # iteration 3 (4 minibatch steps an iteration): Ctrl-C, then Ctrl-C again
            signal.raise_signal(signal.SIGINT)
        return original(self, *a, **kw)

    monkeypatch.setattr(torch.optim.Adam, "step", twice)
    with pytest.raises(SystemExit) as stop:
        run("ppo.py", *TINY, "--total-timesteps", "320", "--save-model", "--save-every", "0", cwd=tmp_path)
    assert stop.value.code == 128 + signal.SIGINT
    assert capsys.readouterr().out.splitlines()[-1] == "interrupted mid-iteration; the checkpoint keeps iteration 2"
    assert torch.load(checkpoint_path(tmp_path), weights_only=False)["iteration"] == 2


def test_a_dm_control_id_without_its_venv_names_requirements_dmc(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "shimmy" else real(name, *a))
    message = error_of("ppo_continuous_action.py", "--env-id", "dm_control/cartpole-swingup-v0", cwd=tmp_path)
    assert "requirements-dmc.txt" in message


def test_an_env_that_does_not_pickle_is_saved_without_its_state_and_resumes_with_new_episodes(tmp_path, capsys):
    """pickle's errors for a local lambda (AttributeError), a video recorder or a C++ env: the checkpoint is written
    without the envs, saying so as it is first written (once), and the resumed run says so and starts new episodes."""
    argv = ["--env-id", "tests.envs:Unpicklable-v0", *TINY, "--save-model", "--save-every", "0"]
    run("ppo.py", *argv, "--total-timesteps", "64", cwd=tmp_path)
    path = checkpoint_path(tmp_path)
    assert torch.load(path, weights_only=False)["ranks"][0]["envs"] is None
    notices = [line for line in capsys.readouterr().out.splitlines() if "do not pickle" in line]
    assert len(notices) == 1 and "a resume starts new episodes" in notices[0], notices  # two saves, one notice
    resumed = run("ppo.py", "--resume", str(path), "--total-timesteps", "128", cwd=tmp_path)
    assert resumed["global_step"] == 128 and "no env state" in capsys.readouterr().out
