"""Raw throughput of a script's own vector env: its make_env, SAME_STEP autoreset, random actions
drawn in advance, no agent. num_envs defaults to the script's own default. For ppo_atari.py it
measures both of its env paths, gymnasium's wrappers in a SyncVectorEnv and ale-py's native vector
env (NativeAtari, one group, a thread per env up to one per core, as the script sets it), one after the other.
usage: python benchmark/tools/raw_env_sps.py ppo.py CartPole-v1 [num_envs] [steps]"""

import os
import sys
import time

import gymnasium as gym
from side_by_side import load  # this folder is on sys.path when the tool runs

script, env_id = sys.argv[1], sys.argv[2]
num_steps = int(sys.argv[4]) if len(sys.argv) > 4 else 50_000
if num_steps < 100:  # checked before the script loads (its imports take seconds)
    sys.exit(f"raw_env_sps.py: {num_steps} steps time too little to be a measurement; pass 100 or more")
module = load(script)
num_envs = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else module.Args().num_envs


def measure(envs, name: str, sampled: bool = True):
    # NativeAtari steps as the rollout steps it: send the actions, receive the step
    step = (lambda actions: envs.send(actions) or envs.recv()) if hasattr(envs, "recv") else envs.step
    envs.reset(seed=1)
    envs.action_space.seed(1)
    actions = [envs.action_space.sample() for _ in range(1000)]
    start = time.perf_counter()
    for t in range(num_steps):
        step(actions[t % 1000])
    elapsed = time.perf_counter() - start
    if sampled:
        start = time.perf_counter()
        for _ in range(num_steps // 5):
            step(envs.action_space.sample())
        rate = (num_steps // 5) * num_envs / (time.perf_counter() - start)
        print(f"raw {env_id} x{num_envs} {name}, action_space.sample() each step: {int(rate)} steps/s")
    print(f"raw {env_id} x{num_envs} {name}, random actions drawn in advance: {int(num_steps * num_envs / elapsed)} steps/s")
    envs.close()


if hasattr(module, "NativeAtari"):
    native = module.NativeAtari(env_id, num_envs, 1, None)
    measure(native, f"native AtariVectorEnv ({min(num_envs, len(os.sched_getaffinity(0)))} threads)", sampled=False)
    if os.environ.get("NATIVE_ONLY") == "1":
        sys.exit()
envs = gym.vector.SyncVectorEnv(
    [module.make_env(env_id, i, False, "raw") for i in range(num_envs)],
    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
)
measure(envs, "SyncVectorEnv")
