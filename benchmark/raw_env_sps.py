"""Raw throughput of a script's own vector env: its make_env, SAME_STEP autoreset, random actions
drawn in advance, no agent. num_envs defaults to the script's own default.
usage: python benchmark/raw_env_sps.py ppo.py CartPole-v1 [num_envs] [steps]"""

import importlib.util
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

script, env_id = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("script", Path(__file__).resolve().parent.parent / script)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
num_envs = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else module.Args().num_envs
num_steps = int(sys.argv[4]) if len(sys.argv) > 4 else 50_000
envs = gym.vector.SyncVectorEnv(
    [module.make_env(env_id, i, False, "raw") for i in range(num_envs)],
    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
)
envs.reset(seed=1)
envs.single_action_space.seed(1)
actions = [np.stack([envs.single_action_space.sample() for _ in range(num_envs)]) for _ in range(1000)]
start = time.perf_counter()
for step in range(num_steps):
    envs.step(actions[step % 1000])
elapsed = time.perf_counter() - start
start = time.perf_counter()
for _ in range(num_steps // 5):
    envs.step(envs.action_space.sample())
sampled = (num_steps // 5) * num_envs / (time.perf_counter() - start)
print(f"raw {env_id} x{num_envs} SyncVectorEnv, action_space.sample() each step: {int(sampled)} steps/s")
print(f"raw {env_id} x{num_envs} SyncVectorEnv, random actions drawn in advance: {int(num_steps * num_envs / elapsed)} steps/s")
