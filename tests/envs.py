"""Tiny envs whose every number is known, for the tests.

Importing this module registers them, so scripts reach them as `--env-id tests.envs:Constant-v0`
(gymnasium imports the module named before the colon). Each has a twin with continuous actions for
ppo_continuous_action.py, named with `Box`: `tests.envs:ConstantBox-v0`.
"""

import gymnasium as gym
import numpy as np


class ConstantEnv(gym.Env):
    """The same observation every step and reward 1; ends by termination after `terminate_at` steps
    when given, otherwise only through the TimeLimit of its registration (truncation)."""

    def __init__(self, terminate_at=None, obs_dim=1, box=False, value=1.0):
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if box else gym.spaces.Discrete(2)
        self.value = value
        self.terminate_at = terminate_at
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.full(self.observation_space.shape, self.value, np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return np.full(self.observation_space.shape, self.value, np.float32), 1.0, terminated, False, {}


class RecorderEnv(gym.Env):
    """Short episodes of random length (2 to 4 steps) with distinct observations and rewards.
    `log` keeps (obs seen, action received, reward given) for every step the env really took."""

    def __init__(self, box=False, bound=100.0):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-bound, bound, (2,), np.float32) if box else gym.spaces.Discrete(3)
        self.log = []
        self.episode = 0

    def _obs(self):
        return np.array([self.episode, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        self.length = int(self.np_random.integers(2, 5))
        return self._obs(), {}

    def step(self, action):
        obs_before = self._obs()
        self.t += 1
        reward = float(self.episode * 100 + self.t)
        self.log.append(
            (obs_before, np.array(action) if isinstance(self.action_space, gym.spaces.Box) else int(action), reward)
        )
        return self._obs(), reward, self.t >= self.length, False, {}


class NaNRewardEnv(ConstantEnv):
    """Rewards become NaN after a few hundred steps, to trip the NaN guard mid-run."""

    def step(self, action):
        self.total = getattr(self, "total", 0) + 1
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("nan") if self.total > 300 else reward, terminated, truncated, info


for suffix, box in (("", False), ("Box", True)):
    gym.register(f"Constant{suffix}-v0", entry_point=ConstantEnv, max_episode_steps=10, kwargs={"box": box})
    gym.register(f"ConstantTerminal{suffix}-v0", entry_point=ConstantEnv, kwargs={"terminate_at": 10, "box": box})
    gym.register(f"Recorder{suffix}-v0", entry_point=RecorderEnv, kwargs={"box": box})
    gym.register(f"NaNReward{suffix}-v0", entry_point=NaNRewardEnv, max_episode_steps=10, kwargs={"box": box})
gym.register("ConstantThree-v0", entry_point=ConstantEnv, max_episode_steps=10, kwargs={"box": True, "value": 3.0})
gym.register("ClippedRecorder-v0", entry_point=RecorderEnv, kwargs={"box": True, "bound": 0.5})
gym.register("MultiDiscrete-v0", entry_point=lambda: _Spaces(gym.spaces.MultiDiscrete([2, 2])))
gym.register("DictObs-v0", entry_point=lambda: _Spaces(gym.spaces.Discrete(2), gym.spaces.Dict({"a": gym.spaces.Discrete(2)})))
gym.register(
    "DictObsBox-v0", entry_point=lambda: _Spaces(gym.spaces.Box(-1, 1, (1,)), gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
)


class _Spaces(gym.Env):
    """An env that only has spaces, for the checks that reject them."""

    def __init__(self, action_space, observation_space=None):
        self.action_space = action_space
        self.observation_space = observation_space or gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


gym.register("ImageObs-v0", entry_point=lambda: _Spaces(gym.spaces.Discrete(2), gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)))
# Pong cut at 400 emulator frames (100 agent steps): a time-limit truncation within one rollout
gym.register(
    "ShortPong-v4",
    entry_point="ale_py.env:AtariEnv",
    kwargs={
        "game": "pong",
        "repeat_action_probability": 0.0,
        "full_action_space": False,
        "frameskip": 1,
        "max_num_frames_per_episode": 400,
    },
)


def short_game(env_id: str, game: str, frames: int):
    gym.register(
        env_id,
        entry_point="ale_py.env:AtariEnv",
        kwargs={
            "game": game,
            "repeat_action_probability": 0.0,
            "full_action_space": False,
            "frameskip": 1,
            "max_num_frames_per_episode": frames,
        },
    )


# VideoPinball (extra lives come with points) cut at 4,000 frames (1,000 agent steps)
short_game("ShortVideoPinball-v4", "video_pinball", 4000)
# DemonAttack (a bonus life every so many points) cut at 1,868 frames: the step that reaches the limit in the native env
# with seed 1, no no-ops and tests/test_atari.py's actions loses a life held above the 4 a game starts with
short_game("ShortDemonAttack-v4", "demon_attack", 1868)
# Breakout cut at 800 frames: games end in the steps the agent does not see (the no-op and serve after a lost life)
short_game("ShortBreakout-v4", "breakout", 800)
# Breakout cut where a life is lost on the very step that reaches the limit, with NOOP after the serve: at 122 frames
# on gymnasium's path (seed 9, the 23rd step), at 88 frames counted after the no-ops in the native env (seed 1, the 22nd)
short_game("LifeAtLimitBreakout-v4", "breakout", 122)
short_game("NativeLifeAtLimitBreakout-v4", "breakout", 88)


def _unpicklable():
    """CartPole through a wrapper that holds a local lambda, as gymnasium's FlattenObservation does: it does not pickle."""
    env = gym.make("CartPole-v1")
    return gym.wrappers.TransformObservation(env, lambda obs: obs, env.observation_space)


gym.register("Unpicklable-v0", entry_point=_unpicklable, max_episode_steps=500)
# CartPole cut at 40 steps: time limits often, for the comparison with CleanRL's PPO (which treats one as a termination)
gym.register("CartPoleShort-v1", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=40)
