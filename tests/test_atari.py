"""ppo_atari.py's preprocessing on real ale-py games: no-op and FIRE resets, max-pooled frame skip,
life loss versus game over, clipped rewards versus the logged score, the frame stack, and an env
that pickles mid-game and plays on identically."""

import pickle

import cv2
import gymnasium as gym
import numpy as np
import pytest

from tests.helpers import load

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
    copy = pickle.loads(pickle.dumps(env))
    for _ in range(300):
        action = int(rng.integers(4))
        a, b = env.step(action), copy.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:4] == b[1:4]
        if a[2] or a[3]:
            np.testing.assert_array_equal(env.reset()[0], copy.reset()[0])
