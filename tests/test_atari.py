"""ppo_atari.py's preprocessing on real ale-py games, for both env paths. gymnasium's wrappers: no-op
and FIRE resets, max-pooled frame skip, life loss versus game over, clipped rewards versus the logged
score, the frame stack, and an env that pickles mid-game and plays on identically. ale-py's native
vector env: the same semantics, truncation bootstrapped, equivalence with the wrappers frame by
frame, v5 ids, ids it cannot play, and resume without env state."""

import copy
import functools
import gc
import os
import pickle
import weakref

import ale_py
import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from ale_py.vector_env import AtariVectorEnv
from torch.utils.tensorboard import SummaryWriter

import tests.envs  # noqa: F401  (registers the short games the native tests play)
from tests.helpers import TINY, checkpoint_path, error_of, interrupt_at_call, load, run, signal_at_call

SCRIPT = "ppo_atari.py"


def make(env_id="BreakoutNoFrameskip-v4"):
    return load(SCRIPT).make_env(env_id, 0, False, "test")()


def layer(env, cls):
    """The wrapper of type `cls` in the env's chain."""
    while not isinstance(env, cls):
        env = env.env
    return env


def record_steps(env) -> list:
    """Log every (action, obs, reward) that `env` itself steps; for `env.unwrapped`, each is one
    emulator frame on NoFrameskip ids."""
    log, original = [], env.step

    def step(action):
        out = original(action)
        log.append((int(action), out[0].copy(), out[1]))
        return out

    env.step = step
    return log


@pytest.mark.parametrize("env_id,fire", [("BreakoutNoFrameskip-v4", True), ("MsPacmanNoFrameskip-v4", False)])
def test_reset_plays_noops_then_fire(env_id, fire):
    env = make(env_id)
    log = record_steps(env.unwrapped)
    noops = set()
    for seed in range(6):
        log.clear()
        env.reset(seed=seed)
        actions = [a for a, _, _ in log]
        k = actions.count(0)
        assert 1 <= k <= 30
        assert actions == [0] * k + ([1] * 4 + [2] * 4 if fire else [])  # FIRE then action 2, each skipped over 4 frames
        noops.add(k)
    assert len(noops) > 1  # drawn from the seeded RNG


def test_frame_skip_max_pools_the_last_two_frames():
    env = make()
    log = record_steps(env.unwrapped)
    obs, _ = env.reset(seed=0)
    rng, pooled_differs = np.random.default_rng(0), False
    for _ in range(100):
        log.clear()
        new_obs, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        if terminated or truncated:
            break
        assert len(log) == 4  # one agent step = 4 emulator frames
        pooled = cv2.resize(np.maximum(log[-2][1], log[-1][1]), (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(new_obs[-1], pooled)
        pooled_differs |= not np.array_equal(pooled, cv2.resize(log[-1][1], (84, 84), interpolation=cv2.INTER_AREA))
        np.testing.assert_array_equal(new_obs[:3], obs[1:])  # oldest frame first, newest last
        obs = new_obs
    assert pooled_differs  # the max mattered on some step (the ball moves between the two frames)


def test_a_time_limit_observation_holds_the_emulators_last_two_frames():
    """At a game's time limit gymnasium's AtariPreprocessing stops its frame skip before it takes the last two screens (it
    would return the step before's); LastScreens puts them in, so that the truncated step's observation, the one whose
    value the rollout bootstraps, holds the max of the emulator's last two frames like every other observation."""
    stale = 0
    for seed in range(4):  # no-op starts of different lengths: limits that fall on different frames of the skip
        env = make("tests.envs:ShortPong-v4")  # cut at 400 emulator frames
        log = record_steps(env.unwrapped)
        obs, _ = env.reset(seed=seed)
        truncated = False
        while not truncated:
            before = obs
            obs, _, terminated, truncated, _ = env.step(0)
            assert not terminated
        pooled = cv2.resize(np.maximum(log[-2][1], log[-1][1]), (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(obs[-1], pooled)
        stale += not np.array_equal(obs[-1], before[-1])  # what AtariPreprocessing alone returns here
    assert stale > 0


def test_frame_stack_shape_and_start():
    env = make()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all(np.array_equal(obs[0], frame) for frame in obs)  # a new game starts with its first frame four times
    assert env.observation_space.shape == (4, 84, 84)


def test_v5_ids_skip_in_the_emulator():
    env = make("ALE/Breakout-v5")
    env.reset(seed=0)
    ale = env.unwrapped.ale
    before = ale.getEpisodeFrameNumber()
    env.step(0)
    assert ale.getEpisodeFrameNumber() - before == 4
    assert env.unwrapped._frameskip == 4 and layer(env, gym.wrappers.AtariPreprocessing).frame_skip == 1


def test_life_loss_ends_the_episode_for_learning_but_not_the_game():
    envs = gym.vector.SyncVectorEnv(
        [load(SCRIPT).make_env("BreakoutNoFrameskip-v4", 0, False, "t")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    ale = envs.envs[0].unwrapped.ale
    envs.reset(seed=1)
    envs.action_space.seed(1)
    life_losses, game_overs = 0, 0
    while game_overs == 0:
        lives, frame = ale.lives(), ale.getEpisodeFrameNumber()
        _, _, terminations, truncations, infos = envs.step(envs.action_space.sample())
        if not (terminations[0] or truncations[0]):
            continue
        if ale.lives() == 5 and ale.getEpisodeFrameNumber() < frame:  # the emulator was reset: the game is over
            game_overs += 1
            assert infos["final_info"]["_episode"][0]  # one whole game logged
        else:
            life_losses += 1
            assert ale.lives() == lives - 1 and ale.getEpisodeFrameNumber() > frame  # play goes on with the next life
            assert not infos["final_info"].get("_episode", [False])[0]  # nothing logged for a life
    assert life_losses == 4 and game_overs == 1


def test_rewards_are_clipped_for_learning_and_the_logged_return_is_the_score():
    """Space Invaders pays 5 to 30 points an alien: learning sees 1, the log sees the points of the whole game."""
    env = make("SpaceInvadersNoFrameskip-v4")
    steps = record_steps(layer(env, gym.wrappers.AtariPreprocessing))  # every reward the score counts, unclipped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    while True:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        assert reward == np.sign(steps[-1][2])
        if "episode" in info:
            break
        if terminated or truncated:
            env.reset()  # a lost life: the episode ends for learning, the game goes on
    raw = [r for _, _, r in steps]
    assert info["episode"]["r"] == sum(raw)
    assert max(raw) > 1  # the clipping was exercised


def test_env_pickles_mid_game_and_plays_on_identically():
    env = make()
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    for _ in range(150):
        if any(env.step(int(rng.integers(4)))[2:4]):
            env.reset()
    twin = pickle.loads(pickle.dumps(env))
    for _ in range(300):
        action = int(rng.integers(4))
        a, b = env.step(action), twin.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:4] == b[1:4]
        if a[2] or a[3]:
            np.testing.assert_array_equal(env.reset()[0], twin.reset()[0])


# ale-py's native vector env (the default path): the same learning semantics as make_env's stack


def native(env_id="BreakoutNoFrameskip-v4", num_envs=1, video=None, **settings):
    """The script's NativeAtari of one group, with ale-py's `settings` in place of its own (noop_max=0, use_fire_reset=False:
    as the tests' gymnasium stacks are set up; without FIRE at a game's start, no serve after a lost life either)."""
    module = load(SCRIPT)
    real = ale_py.AtariVectorEnv

    def make(game, num_envs, **kwargs):
        return real(game, num_envs, **{**kwargs, **settings})

    with pytest.MonkeyPatch.context() as m:
        m.setattr(ale_py, "AtariVectorEnv", make)
        envs = module.NativeAtari(env_id, num_envs, 1, video)
    envs.fire = envs.fire and settings.get("use_fire_reset", True)
    return envs


def step(envs, actions) -> tuple:
    """One step of a NativeAtari of one group, as the rollout takes it: send the actions, receive the step."""
    envs.send(actions)
    return envs.recv()


def test_native_life_loss_ends_the_episode_for_learning_but_not_the_game():
    """A lost life terminates (no bootstrap) while the game goes on: the lives count down, the frame
    count runs on, the broken bricks stay broken, nothing is logged. Game over starts a new game."""
    envs = native()
    obs, infos = envs.reset(seed=1)
    wall = obs[0, -1, 23:37].copy()  # the rows of the bricks in the 84x84 frame
    rng = np.random.default_rng(1)
    life_losses, scored_losses, game_overs = 0, 0, 0
    score = 0.0
    while game_overs < 2:
        lives, frame = infos["lives"][0], infos["episode_frame_number"][0]
        obs, reward, terminations, truncations, infos = step(envs, rng.integers(4, size=1))
        score += reward[0]
        assert not truncations[0]
        if not terminations[0]:
            assert "final_info" not in infos and infos["episode_frame_number"][0] == frame + 4
            continue
        if infos["lives"][0] < lives:
            life_losses += 1
            assert infos["lives"][0] == lives - 1 and infos["episode_frame_number"][0] == frame + 4
            assert "final_info" not in infos
            if score > 0:  # bricks were hit in this game: the wall was not rebuilt
                scored_losses += 1
                assert not np.array_equal(obs[0, -1, 23:37], wall)
        else:
            game_overs += 1
            assert infos["lives"][0] == 5 and infos["episode_frame_number"][0] <= 31  # a new game after its no-ops
            assert infos["final_info"]["_episode"][0] and infos["final_info"]["episode"]["l"][0] > 0
            np.testing.assert_array_equal(obs[0, -1, 23:37], wall)
            score = 0.0
    assert life_losses == 8 and scored_losses > 0


def test_native_env_serves_each_new_life():
    """A new life waits for FIRE: like gymnasium's FireReset, the native env presses it after a lost life,
    in place of the agent's action on that one step. A policy that never fires still plays its games
    to the end, and two copies of one game given different actions on that step stay identical."""
    envs = native(num_envs=2)
    envs.reset(seed=np.array([1, 1]))  # two copies of one game
    noop, left = np.zeros(2, dtype=np.int64), np.array([0, 3])
    for _ in range(200):  # to the first lost life (the game's start is served: about 20 steps)
        _, _, terminations, _, _ = step(envs, noop)
        if terminations[0]:
            break
    assert terminations[0]
    obs, *_ = step(envs, left)  # served: LEFT is not played
    assert np.array_equal(obs[0], obs[1])
    obs, *_ = step(envs, left)  # in play: it is
    assert not np.array_equal(obs[0], obs[1])
    envs.reset(seed=2)
    life_losses, game_overs, steps = 0, 0, 0
    while game_overs < 2 and steps < 2000:  # unserved, a life would wait for the time limit (27,000 steps)
        _, _, terminations, truncations, infos = step(envs, noop)
        steps += 1
        assert not truncations.any()
        over = "final_info" in infos and infos["final_info"]["_episode"][0]
        game_overs, life_losses = game_overs + over, life_losses + (terminations[0] and not over)
    assert life_losses == 8 and game_overs == 2


def test_native_rewards_are_clipped_for_learning_and_the_logged_return_is_the_score():
    """Space Invaders pays 5 to 30 points an alien: learning sees the sign, the log sees the points of
    every life of the game, and the game's length in agent steps."""
    envs = native("SpaceInvadersNoFrameskip-v4", 2)
    raw, (env,) = [], envs.vector_envs
    original = env.recv

    def recv():
        out = original()
        raw.append(out[1].copy())
        return out

    env.recv = recv
    envs.reset(seed=0)
    rng, start, games = np.random.default_rng(0), np.zeros(2, dtype=int), 0
    while games < 3:
        _, reward, terminations, truncations, infos = step(envs, rng.integers(envs.single_action_space.n, size=2))
        np.testing.assert_array_equal(reward, np.sign(raw[-1]))
        assert reward.dtype == np.float64
        for i in np.flatnonzero(infos.get("final_info", {}).get("_episode", np.zeros(2, bool))):
            assert infos["final_info"]["episode"]["r"][i] == sum(r[i] for r in raw[start[i] :])
            assert infos["final_info"]["episode"]["l"][i] == len(raw) - start[i]
            start[i], games = len(raw), games + 1
    assert max(r.max() for r in raw) > 1  # the clipping was exercised


def test_native_truncation_is_bootstrapped(tmp_path, monkeypatch):
    """tests.envs:ShortPong-v4 cuts every game at 400 frames (100 agent steps after the no-ops): the
    truncated step's reward is sign(r) + gamma * V(final_obs), checked against a replay of the same
    seed and actions; no Pong point ends an episode, so no other step carries a bootstrap."""
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 1)
    argv = ["--env-id", "tests.envs:ShortPong-v4", "--num-envs", "2", "--num-steps", "128", "--num-minibatches", "2"]
    g = run(SCRIPT, *argv, "--total-timesteps", "256", cwd=tmp_path)
    assert g["dones"][:, 0].nonzero().flatten().tolist() == [100] == g["dones"][:, 1].nonzero().flatten().tolist()

    replay = native("tests.envs:ShortPong-v4", 2)
    obs, _ = replay.reset(seed=1)
    np.testing.assert_array_equal(obs, g["obs"][0].numpy())
    for t in range(128):
        previous = obs
        obs, reward, terminations, truncations, infos = step(replay, g["actions"][t].numpy())
        assert not terminations.any() and truncations.all() == (t == 99)
        if t == 99:
            np.testing.assert_array_equal(infos["final_obs"][:, :3], previous[:, 1:])  # the game's last stack, not a stale one
            assert not infos["final_obs"][:, 3].sum() == 0 and not np.array_equal(infos["final_obs"], obs)
            with torch.inference_mode():
                reward = reward + g["args"].gamma * g["agent"].get_value(torch.as_tensor(infos["final_obs"])).numpy()
        assert torch.equal(g["rewards"][t], torch.as_tensor(reward, dtype=torch.float32)), t
    np.testing.assert_array_equal(obs, g["next_obs"].numpy())


def test_native_time_limit_ends_the_game_even_when_the_lives_count_drops():
    """VideoPinball awards extra lives. Cut at its time limit holding more lives than a new game starts
    with, the game restarts and the count drops, as at a lost life: it must still be logged, whole."""
    envs = native("tests.envs:ShortVideoPinball-v4", 2)  # 1,000 agent steps a game
    _, infos = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for t in range(1000):
        lives = infos["lives"]
        _, _, terminations, truncations, infos = step(envs, rng.integers(envs.single_action_space.n, size=2))
        assert truncations.all() == (t == 999) and not terminations[truncations].any()
    assert (infos["lives"] < lives).any()  # the case in point: a restart that lowered the count
    assert infos["final_info"]["_episode"].all() and (infos["final_info"]["episode"]["l"] == 1000).all()


@pytest.mark.parametrize("env_id", ["BreakoutNoFrameskip-v4", "PongNoFrameskip-v4"])
def test_native_env_matches_the_gymnasium_wrappers(env_id, monkeypatch):
    """No-op starts and FIRE resets off, the same actions: the native vector env and make_env's stack
    agree on every reward, termination and logged game, and on every frame of the stack that both
    have seen. They differ where docs/atari.md says: at a game start the native env pads the stack with
    zeros (gymnasium repeats the first frame), and after a lost life gymnasium's EpisodicLife plays a
    no-op the agent does not see (given to the native env here as action 0, a step of its game's length) and restarts
    the stack, which the native env keeps."""
    module = load(SCRIPT)
    monkeypatch.setattr(gym.wrappers, "AtariPreprocessing", functools.partial(gym.wrappers.AtariPreprocessing, noop_max=0))
    env = module.make_env(env_id, 0, False, "test")()
    layer(env, module.EpisodicLife).serve_actions = ()  # no FIRE after a reset or a lost life
    envs = native(env_id, 1, noop_max=0, use_fire_reset=False)
    a, _ = env.reset(seed=0)
    (b,), _ = envs.reset(seed=0)
    rng, seen, games, life_losses, steps, lost_in_game = np.random.default_rng(0), 1, 0, 0, 0, 0
    while games < 2 and steps < 3000:
        np.testing.assert_array_equal(a[4 - seen :], b[4 - seen :])  # the frames both stacks hold
        if seen == 1:
            assert all(np.array_equal(frame, a[-1]) for frame in a)  # gymnasium: the first frame four times
        action = int(rng.integers(env.action_space.n))
        a, reward_a, term_a, trunc_a, info_a = env.step(action)
        (b,), (reward_b,), (term_b,), (trunc_b,), infos = step(envs, np.array([action]))
        steps, seen = steps + 1, min(seen + 1, 4)
        assert (reward_a, term_a, trunc_a) == (reward_b, term_b, trunc_b)
        assert ("episode" in info_a) == ("final_info" in infos)
        if "episode" in info_a:  # game over: both start a new game
            assert (info_a["episode"]["r"], info_a["episode"]["l"] + lost_in_game) == (
                infos["final_info"]["episode"]["r"][0],
                infos["final_info"]["episode"]["l"][0],
            )
            a, _ = env.reset()
            assert not b[:3].any()  # the native env pads with zeros
            games, seen, lost_in_game = games + 1, 1, 0
        elif term_a:  # a lost life: gymnasium steps a no-op and restarts its stack
            a, _ = env.reset()
            (b,), (reward_b,), (term_b,), _, _ = step(envs, np.array([0]))
            assert not term_b and np.array_equal(a[-1], b[-1])
            seen, life_losses, lost_in_game = 1, life_losses + 1, lost_in_game + 1
    assert games >= 1 and life_losses == (4 * games if env_id.startswith("Breakout") else 0)


def test_native_v5_ids_skip_in_the_emulator_with_sticky_actions():
    """ALE/*-v5: 4 frames a step; with repeat_action_probability 0.25 the same seed and actions give
    the same game, another seed another one (NoFrameskip-v4 ids are deterministic given the no-ops)."""

    def play(env_id, seed):
        envs = native(env_id, noop_max=0)
        obs, infos = envs.reset(seed=seed)
        frames, rng = [obs], np.random.default_rng(0)
        for _ in range(200):
            frame = infos["episode_frame_number"][0]
            obs, _, terminations, _, infos = step(envs, rng.integers(4, size=1))
            assert terminations[0] or infos["episode_frame_number"][0] == frame + 4
            frames.append(obs)
        return np.concatenate(frames)

    v5 = play("ALE/Breakout-v5", 0)
    assert np.array_equal(v5, play("ALE/Breakout-v5", 0)) and not np.array_equal(v5, play("ALE/Breakout-v5", 1))
    assert np.array_equal(play("BreakoutNoFrameskip-v4", 0), play("BreakoutNoFrameskip-v4", 1))


def test_native_env_threads_are_the_cores_this_process_may_use(monkeypatch):
    """ale-py's threads: the cores this process may use (os.sched_getaffinity, Linux's), else the machine's (macOS and
    Windows have no sched_getaffinity), shared among torchrun's processes on the machine, at most one per env."""
    module = load(SCRIPT)
    threads = []

    def make(game, num_envs, **kwargs):
        threads.append(kwargs["num_threads"])
        return AtariVectorEnv(game, num_envs, **{**kwargs, "num_threads": 1})

    monkeypatch.setattr(ale_py, "AtariVectorEnv", make)
    monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(module.os, "cpu_count", lambda: 12)
    module.NativeAtari("BreakoutNoFrameskip-v4", 8, 1, None).close()
    monkeypatch.delattr(module.os, "sched_getaffinity")
    module.NativeAtari("BreakoutNoFrameskip-v4", 8, 1, None).close()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    module.NativeAtari("BreakoutNoFrameskip-v4", 8, 2, None).close()
    module.NativeAtari("BreakoutNoFrameskip-v4", 2, 1, None).close()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "24")  # more processes than cores: one thread each
    module.NativeAtari("BreakoutNoFrameskip-v4", 2, 1, None).close()
    assert threads == [3, 8, 3, 3, 2, 1]


def test_closing_the_native_env_ends_ale_pys_envs_and_their_threads(tmp_path):
    """ale-py's AtariVectorEnv has no close of its own: its C++ threads end when it is deleted. envs.close() (the run's
    end, Ctrl-C included) lets go of every group and the video twin, so that an IPython session holding `envs` after a
    %run keeps no emulator threads (nor the frames of the game the video was recording)."""
    threads = lambda: len(os.listdir("/proc/self/task"))  # noqa: E731
    gc.collect()  # an earlier in-process run's envs, if any, go first
    before = threads()
    envs = load(SCRIPT).NativeAtari("BreakoutNoFrameskip-v4", 4, 2, str(tmp_path / "videos"))
    envs.reset(seed=1)
    alive = [weakref.ref(held) for held in [*envs.vector_envs, envs.twin, envs.clip[0]]]  # clip: the video's frames
    assert threads() > before
    envs.close()
    gc.collect()
    assert [ref() for ref in alive] == [None] * 4 and threads() == before


def test_native_env_refuses_ids_it_cannot_play(tmp_path):
    assert "--no-native-envs" in error_of(SCRIPT, "--env-id", "Breakout-v4", cwd=tmp_path)  # frame skip drawn from 2-4
    assert not (tmp_path / "runs").exists()
    g = run(SCRIPT, "--env-id", "Breakout-v4", "--no-native-envs", *TINY, "--total-timesteps", "32", cwd=tmp_path)
    assert isinstance(g["envs"], gym.vector.SyncVectorEnv)


def test_native_resume_restores_the_run_and_starts_new_games(tmp_path, monkeypatch, capsys):
    """The native env does not pickle: a checkpoint holds the agent, optimizer, counters and RNGs,
    and --resume continues them with new games, saying so, from seeds the run has not played (not the openings of the
    games it started with)."""
    argv = [*TINY, "--total-timesteps", "320", "--save-model"]  # 10 iterations of 2 envs x 16 steps
    seeds, reset = [], AtariVectorEnv.reset
    monkeypatch.setattr(
        AtariVectorEnv, "reset", lambda self, seed=None, options=None: seeds.append(seed) or reset(self, seed=seed)
    )
    with monkeypatch.context() as m:
        signal_at_call(m, AtariVectorEnv, "recv", 5 * 16 + 7)  # Ctrl-C in iteration 6: it ends, and is saved
        with pytest.raises(SystemExit):
            run(SCRIPT, *argv, cwd=tmp_path / "a")
    path = checkpoint_path(tmp_path / "a")
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["iteration"] == 6 and ckpt["global_step"] == 192 and ckpt["ranks"][0]["envs"] is None
    capsys.readouterr()
    with monkeypatch.context() as m:
        interrupt_at_call(m, torch.optim.Adam, "step", 1)  # before the first update of the resumed run
        g = run(SCRIPT, "--resume", str(path), cwd=tmp_path / "b")
    assert "no env state" in capsys.readouterr().out
    assert [list(s) for s in seeds] == [[1, 2], [1, 2], [193, 194]]  # the run's, the fresh ones, the resumed games'
    assert g["iteration"] == 7 and g["global_step"] == 224
    assert g["optimizer"].param_groups[0]["lr"] == pytest.approx(0.4 * g["args"].learning_rate)  # annealed as at iteration 7
    assert all(torch.equal(p, ckpt["agent"][k]) for k, p in g["agent"].state_dict().items())
    state = g["optimizer"].state_dict()["state"]
    assert all(torch.equal(state[k]["exp_avg"], v["exp_avg"]) for k, v in ckpt["optimizer"]["state"].items())
    resumed = run(SCRIPT, "--resume", str(path), cwd=tmp_path / "c")
    assert resumed["global_step"] == 320 and type(resumed["envs"]).__name__ == "NativeAtari"


def test_native_env_groups_store_the_transitions_of_one_group(tmp_path, monkeypatch):
    """--env-groups 2 (the GPU's default) steps envs 0-3 while the policy acts for envs 4-7 and back: for the same seeds
    and actions (drawn from one table, row by row, in place of the policy's samples), the rollout stores what the one-
    group rollout stores, on Breakout with lost lives, serves and whole games in it: observations, actions, rewards,
    dones, the observation after the rollout and every logged game, exactly; values and log-probabilities, computed
    on batches of 4 instead of 8, to float32 rounding."""
    table = np.random.default_rng(0).integers(4, size=8 * 200)

    def collect(groups: str) -> dict:
        rows, logged = [0], []

        def multinomial(probs, num_samples, replacement=False):  # the next rows of the table, in the order of the envs
            n = probs.shape[0]
            rows[0] += n
            return torch.as_tensor(table[rows[0] - n : rows[0]]).unsqueeze(-1)

        with monkeypatch.context() as m:
            m.setattr(torch, "multinomial", multinomial)  # the policy's sampling (get_action_and_value)
            m.setattr(SummaryWriter, "add_scalar", lambda self, tag, *a, **k: logged.append((tag, *a)))
            interrupt_at_call(m, torch.optim.Adam, "step", 1)  # the first rollout, then stop
            argv = ["--num-envs", "8", "--num-steps", "200", "--num-minibatches", "4", "--total-timesteps", "1600"]
            g = run(SCRIPT, *argv, "--env-groups", groups, cwd=tmp_path / groups)
        assert len(g["envs"].parts) == int(groups) and rows[0] == 8 * 200
        return {
            **{k: g[k] for k in ("obs", "actions", "rewards", "dones", "next_obs", "next_done", "values", "logprobs")},
            "games": logged,
        }

    one, two = collect("1"), collect("2")
    for name in ("obs", "actions", "rewards", "dones", "next_obs", "next_done"):
        assert torch.equal(one[name], two[name]), name
    torch.testing.assert_close(one["values"], two["values"], rtol=0, atol=1e-5)
    torch.testing.assert_close(one["logprobs"], two["logprobs"], rtol=0, atol=1e-5)
    games = [entry for entry in one["games"] if entry[0] == "charts/episodic_return"]
    assert one["games"] == two["games"] and len(games) >= 4  # whole games logged, the same ones at the same steps
    assert one["dones"].sum() > len(games)  # lost lives end episodes inside games (each followed by a serve)


@pytest.mark.parametrize(
    "env_id,seed",
    [("tests.envs:ShortBreakout-v4", 7), ("tests.envs:ShortBreakout-v4", 8), ("tests.envs:ShortDemonAttack-v4", 1)],
)
def test_every_game_is_logged_once_with_its_score_and_length(env_id, seed, monkeypatch):
    """gymnasium's path under short time limits: every game the emulator plays is logged once, in the agent step in
    which it ended, with the sum of every frame's reward (those of the no-op and serve the agent does not see too)
    and its number of agent steps; also a game that ends in those unseen steps (Breakout cut at 800 frames) and games
    with bonus lives (DemonAttack)."""
    module = load(SCRIPT)
    ended_unseen, original_unseen = [], module.EpisodicLife.play_unseen
    monkeypatch.setattr(
        module.EpisodicLife, "play_unseen", lambda self, *a: ended_unseen.append(original_unseen(self, *a)) or ended_unseen[-1]
    )
    envs = gym.vector.SyncVectorEnv(
        [module.make_env(env_id, 0, False, "t")], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    emulator = envs.envs[0].unwrapped
    frames, starts, reset = record_steps(emulator), [], emulator.reset  # every frame; where each game's frames start
    emulator.reset = lambda *, seed=None, options=None: starts.append(len(frames)) or reset(seed=seed, options=options)
    envs.reset(seed=seed)
    rng, logged, agent_steps = np.random.default_rng(seed), 0, 0
    while logged < 8:
        *_, infos = envs.step(rng.integers(envs.single_action_space.n, size=1))
        agent_steps += 1
        if "episode" in infos.get("final_info", {}):
            logged += 1
            assert infos["final_info"]["episode"]["r"][0] == sum(r for _, _, r in frames[starts[logged - 1] : starts[logged]])
            assert infos["final_info"]["episode"]["l"][0] == agent_steps
            agent_steps = 0
        assert len(starts) == logged + 1  # every game that ended was logged, in the step that ended it
    if "Breakout" in env_id:
        assert any(start is None for start in ended_unseen)  # the case in point: a game that ended in an unseen step


def test_native_game_over_on_a_lost_bonus_life_at_the_time_limit_is_logged_alone():
    """DemonAttack cut at 1,868 frames, seed 1, no no-ops: the step that reaches the limit loses a life held above the 4
    a game starts with. The emulator reports a termination, not a truncation, and starts a new game with 4 lives, a
    drop in the count as at a lost life: the game is logged alone with its score and length, the next one starts
    unserved, and is logged alone in turn."""
    envs = native("tests.envs:ShortDemonAttack-v4", noop_max=0)
    raw, original = [], envs.vector_envs[0].recv
    envs.vector_envs[0].recv = lambda: raw.append(original()) or raw[-1]
    _, infos = envs.reset(seed=1)
    actions = np.random.default_rng(0).integers(6, size=(6000, 8))[:, 1:2]
    ends = []
    for t in range(1000):
        lives = infos["lives"]
        _, _, terminations, truncations, infos = step(envs, actions[t])
        if t == 466:  # the case in point
            assert terminations[0] and not truncations[0] and lives[0] == 5 and infos["lives"][0] == 4
            assert not envs.serves[0]  # a new game: its first step is the agent's
        if "final_info" in infos:
            ends.append(t)
            start = ends[-2] + 1 if len(ends) > 1 else 0
            assert infos["final_info"]["episode"]["l"][0] == t + 1 - start
            assert infos["final_info"]["episode"]["r"][0] == sum(r[1][0] for r in raw[start : t + 1])
    assert ends[0] == 466 and len(ends) == 2


def test_native_serve_rows_are_left_out_of_the_policy_terms(tmp_path, monkeypatch):
    """On the first step of a new life the native env plays FIRE whatever the policy sampled. Those rows, and only
    those, are marked served; every other row's stored action is the one the env played. The update's policy terms
    leave the served rows out: other actions (with their log-probabilities) on them give the same parameters, bit for
    bit, while another action on any played row does not. Breakout, 2 envs x 256 steps from the untrained policy."""
    sent, send = [], AtariVectorEnv.send
    monkeypatch.setattr(AtariVectorEnv, "send", lambda self, actions: sent.append(actions.copy()) or send(self, actions))
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 1)  # the first rollout, then stop
    g = run(
        SCRIPT, "--num-envs", "2", "--num-steps", "256", "--num-minibatches", "1", "--total-timesteps", "512", cwd=tmp_path
    )
    played, served = torch.as_tensor(np.stack(sent[:256])), g["serves"].bool()
    assert 3 <= served.sum() and torch.all(played[served] == 1) and torch.equal(played[~served], g["actions"][~served])
    assert (g["actions"][served] != 1).any()  # sampled actions the env did not play
    assert torch.all(g["dones"].bool()[served])  # a serve is the first row of an episode (a new life)

    batch = tuple(g[k] for k in ("b_obs", "b_logprobs", "b_actions", "b_advantages", "b_returns", "b_values", "b_serves"))

    def update(rows) -> list:
        """The parameters after the minibatch step on the whole batch, with other actions on `rows`."""
        agent = copy.deepcopy(g["agent"])
        actions = batch[2].clone()
        actions[rows] = (actions[rows] + 1) % 4
        with torch.no_grad():
            logprobs = torch.where(rows, agent.get_action_and_value(batch[0], actions)[1], batch[1])
        g["update_minibatch"](
            g["args"],
            agent,
            torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5),
            (batch[0], logprobs, actions, *batch[3:]),
        )
        return [p.detach().clone() for p in agent.parameters()]

    reference = update(torch.zeros_like(batch[6], dtype=torch.bool))
    b_served = batch[6].bool()
    assert all(torch.equal(a, b) for a, b in zip(update(b_served), reference, strict=True))
    one_played = torch.zeros_like(b_served)
    one_played[(~b_served).nonzero()[0]] = True
    assert not all(torch.equal(a, b) for a, b in zip(update(one_played), reference, strict=True))


def test_a_life_lost_on_the_time_limit_step_is_a_termination_on_both_paths():
    """One rule on both paths: a life lost on the step that reaches the time limit ends the episode by termination (no
    bootstrap: the life is over whatever the limit), not truncation, and the game is logged, whole, in that step. The
    native env reports it so; gymnasium's path reported a truncation (and the rollout bootstrapped a lost life)."""
    env = make("tests.envs:LifeAtLimitBreakout-v4")  # gymnasium's path, 122 frames
    env.reset(seed=9)
    lives, ended = env.unwrapped.ale.lives(), []
    while not ended:
        _, _, terminated, truncated, info = env.step(0)
        ended = [(terminated, truncated)] if terminated or truncated else []
    assert env.unwrapped.ale.lives() == lives - 1 and env.unwrapped.ale.game_truncated()  # the case in point
    assert ended == [(True, False)] and info["episode"]["l"] == 23

    envs = native("tests.envs:NativeLifeAtLimitBreakout-v4")  # the native env, 88 frames after the no-ops
    _, infos = envs.reset(seed=1)
    while "final_info" not in infos:
        lives = infos["lives"]
        _, _, terminations, truncations, infos = step(envs, np.array([0]))
    assert lives[0] == 5 and infos["final_info"]["episode"]["l"][0] == 22  # a life lost as the game was cut
    assert (terminations[0], truncations[0]) == (True, False) and not envs.serves[0]  # a new game: no serve


def record_agent_env(monkeypatch) -> list:
    """Log ("obs", observations) that the agent's AtariVectorEnv returns (84x84 stacks: not --capture-video's colour
    twin) and ("sent", actions) that it is sent."""
    log, reset, send, recv = [], AtariVectorEnv.reset, AtariVectorEnv.send, AtariVectorEnv.recv

    def agents(env) -> bool:
        return env.single_observation_space.shape == (4, 84, 84)

    def logged_reset(self, seed=None, options=None):
        out = reset(self, seed=seed)
        log.extend([("obs", out[0].copy())] if agents(self) else [])
        return out

    def logged_send(self, actions):
        log.extend([("sent", actions.copy())] if agents(self) else [])
        return send(self, actions)

    def logged_recv(self):
        out = recv(self)
        log.extend([("obs", out[0].copy())] if agents(self) else [])
        return out

    monkeypatch.setattr(AtariVectorEnv, "reset", logged_reset)
    monkeypatch.setattr(AtariVectorEnv, "send", logged_send)
    monkeypatch.setattr(AtariVectorEnv, "recv", logged_recv)
    return log


def test_evaluation_plays_the_env_path_its_checkpoint_trained_on(tmp_path, monkeypatch):
    """A native-trained checkpoint, evaluated with and without --capture-video, acts on what the native env gives, as in
    training: the same observations as the training env's for the same seed and actions, at a game's start (the stack
    padded with zeros) and after a lost life (the stack kept; the env plays FIRE on the serve), where gymnasium's path,
    which evaluation played before, repeats the first frame and restarts the stack behind steps the agent does not see.
    The video is env 0's game in colour, by a twin that plays it again; --env-groups does not matter to evaluation."""
    run(SCRIPT, *TINY, "--total-timesteps", "32", "--save-model", "--env-groups", "2", cwd=tmp_path)
    path, seen = str(checkpoint_path(tmp_path)), {}
    for extra in ([], ["--capture-video"]):
        with monkeypatch.context() as m:
            log = record_agent_env(m)
            with pytest.raises(SystemExit) as stop:
                run(SCRIPT, "--eval-checkpoint", path, "--eval-episodes", "1", "--env-groups", "2", *extra, cwd=tmp_path)
        assert stop.value.code == 0
        seen[bool(extra)] = ([x for kind, x in log if kind == "obs"], [x for kind, x in log if kind == "sent"])
    (observed, sent), (recorded, recorded_sent) = seen[False], seen[True]
    assert len(observed) == len(recorded) and all(np.array_equal(a, b) for a, b in zip(observed, recorded, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(sent, recorded_sent, strict=True))
    assert list(tmp_path.glob("videos/*-eval/game-episode-0.mp4"))

    replay = native("BreakoutNoFrameskip-v4", 1)  # as training makes it (make_vector_env)
    obs, _ = replay.reset(seed=1)  # evaluation's seed: --seed's
    assert len(observed) == len(sent) + 1 and np.array_equal(obs, observed[0]) and not obs[0, :3].any()  # zeros at the start
    served = 0
    for t, action in enumerate(sent):
        serving = replay.serves[0]
        obs, _, _, _, _ = step(replay, action)
        assert np.array_equal(obs, observed[t + 1]), t
        if serving:  # a new life's first step: FIRE, and the stack the agent saw before the lost life goes on
            served += 1
            assert action[0] == 1 and np.array_equal(observed[t + 1][0, :3], observed[t][0, 1:])
    assert served == 4  # every lost life but the last


def test_the_video_twin_plays_env_0s_games(tmp_path):
    """--capture-video on the native path: the colour twin, sent env 0's played actions (the serves included), plays its
    games frame for frame (the same rewards, lives and frame counts at every step, across lost lives and games), and
    each game gymnasium's RecordVideo would record (0, 1, 8, ...) is written as game-episode-N.mp4."""
    envs = native(num_envs=2, video=str(tmp_path / "videos"))
    twin_steps, step_twin = [], envs.twin.step
    envs.twin.step = lambda actions: twin_steps.append(step_twin(actions)) or twin_steps[-1]
    _, infos = envs.reset(seed=3)
    rng, games = np.random.default_rng(0), 0
    while games < 2:
        _, reward, _, _, infos = step(envs, rng.integers(envs.single_action_space.n, size=2))
        _, twin_reward, _, _, twin_infos = twin_steps[-1]
        assert (twin_infos["lives"][0], twin_infos["episode_frame_number"][0]) == (
            infos["lives"][0],
            infos["episode_frame_number"][0],
        )
        assert np.sign(twin_reward[0]) == reward[0]
        games += int("final_info" in infos and infos["final_info"]["_episode"][0])
    envs.close()
    assert sorted(p.name for p in (tmp_path / "videos").iterdir()) == ["game-episode-0.mp4", "game-episode-1.mp4"]
