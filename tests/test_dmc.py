"""ppo_continuous_action.py on the DeepMind Control Suite (`--env-id dm_control/<domain>-<task>-v0`, through Shimmy):
the observations flattened in a pinned order, training across the 1,000-step time limit, exact resume after SIGTERM,
evaluation with and without a video. Needs requirements-dmc.txt (dm-control and shimmy, mujoco 3.17.0), a venv of its
own: `.ci/run` makes one and runs this file there; with requirements.txt alone it is skipped."""

import os
import signal

import numpy as np
import pytest
import torch

from tests.helpers import TINY, cli, load, run, start, wait_for

if not os.environ.get("DISPLAY"):  # as the script does before dm_control imports: it picks its renderer then
    os.environ.setdefault("MUJOCO_GL", "egl")
pytest.importorskip("shimmy", reason="the DeepMind Control Suite needs requirements-dmc.txt (its own venv)")

SCRIPT = "ppo_continuous_action.py"


def checkpoint_path(cwd):
    """The run's checkpoint: runs/dm_control_<task>__.../, one directory (the id's "/" becomes "_")."""
    (path,) = list(cwd.glob("runs/dm_control_*/*.pt"))
    return path


CARTPOLE = ["--env-id", "dm_control/cartpole-swingup-v0"]


def test_observations_are_flattened_in_sorted_key_order():
    """walker-walk's Dict (orientations, height, velocity as dm_control lists them) becomes one vector: height,
    orientations, velocity, gymnasium's sorted order, step for step against the env's own Dict."""
    import gymnasium as gym

    module = load(SCRIPT)
    flat, raw = module.make_env("dm_control/walker-walk-v0", 0, False, "test")(), gym.make("dm_control/walker-walk-v0")
    assert list(raw.observation_space.spaces) == ["height", "orientations", "velocity"]
    assert flat.observation_space.shape == (1 + 14 + 9,)
    a, _ = flat.reset(seed=3)
    b, _ = raw.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        np.testing.assert_array_equal(a, np.concatenate([b["height"].ravel(), b["orientations"], b["velocity"]]))
        action = rng.uniform(-1, 1, flat.action_space.shape)
        a, b = flat.step(action)[0], raw.step(action)[0]


def test_the_readme_command_runs(tmp_path):
    result = cli(SCRIPT, "--env-id", "dm_control/cartpole-balance-v0", "--total-timesteps", "4096", cwd=tmp_path)
    assert result.returncode == 0 and "iter 2/2 step 4096" in result.stdout and result.stderr == "", result.stderr


def test_sigterm_then_resume_equals_an_uninterrupted_run_across_the_time_limit(tmp_path):
    """2 envs x 16 steps, 72 iterations: every env's episode reaches DMC's 1,000-step limit (a truncation, bootstrapped)
    once. SIGTERM mid-run: exit status 143, the checkpoint holds the envs mid-episode (the whole env, pickled), and the
    resumed run ends with the parameters of the run that never stopped."""
    argv = [*CARTPOLE, *TINY, "--total-timesteps", str(32 * 72), "--save-model"]
    proc = start(SCRIPT, argv, tmp_path / "a")
    wait_for(proc, "iter 20/")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM and err == "", err
    ckpt = torch.load(checkpoint_path(tmp_path / "a"), weights_only=False)
    assert 20 <= ckpt["iteration"] < 72 and ckpt["ranks"][0]["envs"] is not None
    resumed = run(SCRIPT, *argv, "--resume", str(checkpoint_path(tmp_path / "a")), cwd=tmp_path / "b")
    straight = run(SCRIPT, *argv, cwd=tmp_path / "c")
    assert resumed["global_step"] == straight["global_step"] == 32 * 72
    assert len(straight["run"].recent_returns) == 2  # each env's episode reached the limit
    assert all(torch.equal(p, q) for p, q in zip(resumed["agent"].parameters(), straight["agent"].parameters(), strict=True))


def test_no_entropy_bonus_by_default_on_the_suite_and_an_explicit_one_is_saved_with_the_run(tmp_path):
    """--ent-coef defaults to 0 on dm_control/ ids as everywhere (docs/continuous.md); 0.01, given, is kept in the checkpoint."""
    assert run(SCRIPT, *CARTPOLE, *TINY, "--total-timesteps", "32", cwd=tmp_path / "a")["args"].ent_coef == 0.0
    run(SCRIPT, *CARTPOLE, *TINY, "--total-timesteps", "32", "--ent-coef", "0.01", "--save-model", cwd=tmp_path / "b")
    assert torch.load(checkpoint_path(tmp_path / "b"), weights_only=False)["args"]["ent_coef"] == 0.01


def test_evaluation_with_and_without_a_video(tmp_path, capsys):
    run(SCRIPT, *CARTPOLE, *TINY, "--total-timesteps", "64", "--save-model", cwd=tmp_path)
    path, evals = str(checkpoint_path(tmp_path)), []
    for extra in ([], ["--capture-video"]):
        with pytest.raises(SystemExit) as stop:
            run(SCRIPT, *CARTPOLE, "--eval-checkpoint", path, "--eval-episodes", "1", *extra, cwd=tmp_path)
        assert stop.value.code == 0
        evals.extend(line for line in capsys.readouterr().out.splitlines() if line.startswith("eval: "))
    assert len(evals) == 2 and evals[1].startswith(evals[0] + "; videos in videos/dm_control_")  # the same episode, recorded
    assert evals[1].endswith("-eval/") and list(tmp_path.glob("videos/dm_control_*-eval/*.mp4"))
