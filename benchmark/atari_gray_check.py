"""Does ppo_atari.py's grayscale (the emulator's own, max-pooled over the last two frames) differ from
CleanRL's (max over the last two RGB frames, cv2 RGB->gray, then resize)? Plays the same random
actions through both pipelines and compares the stacked observations.
usage: python benchmark/atari_gray_check.py [ENV_ID] [STEPS]"""

import importlib.util
import sys
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np

env_id = sys.argv[1] if len(sys.argv) > 1 else "BreakoutNoFrameskip-v4"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
spec = importlib.util.spec_from_file_location("ppo_atari", Path(__file__).resolve().parent.parent / "ppo_atari.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)


def cleanrl_gray(env):
    """The script's env with its first layers swapped for CleanRL's order: RGB max-pool, gray, resize."""
    inner = gym.wrappers.AtariPreprocessing(gym.make(env_id), screen_size=(160, 210), grayscale_obs=False)
    to_gray = lambda rgb: cv2.resize(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_AREA)  # noqa: E731
    inner = gym.wrappers.TransformObservation(inner, to_gray, gym.spaces.Box(0, 255, (84, 84), np.uint8))
    above = env
    while not isinstance(above.env, gym.wrappers.AtariPreprocessing):
        above = above.env
    above.env = inner  # the layer above AtariPreprocessing now reads CleanRL's frames
    return env


def difference(a: np.ndarray, b: np.ndarray) -> int:
    """The largest pixel difference between two stacked observations (0: identical)."""
    return int(np.abs(a.astype(int) - b.astype(int)).max())


ours = module.make_env(env_id, 0, False, "check")()
theirs = cleanrl_gray(module.make_env(env_id, 0, False, "check")())
differences = [difference(ours.reset(seed=3)[0], theirs.reset(seed=3)[0])]
rng = np.random.default_rng(0)
for _ in range(steps):
    action = rng.integers(ours.action_space.n)
    obs_a, _, term_a, trunc_a, _ = ours.step(action)
    obs_b, _, term_b, trunc_b, _ = theirs.step(action)
    assert (term_a, trunc_a) == (term_b, trunc_b)
    differences.append(difference(obs_a, obs_b))
    if term_a or trunc_a:
        differences.append(difference(ours.reset()[0], theirs.reset()[0]))
differing = sum(d > 0 for d in differences)
print(f"{env_id}, {steps} random steps: {differing} observations differ, largest pixel difference {max(differences)}")
