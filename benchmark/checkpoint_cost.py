"""What one --save-model checkpoint costs each script at its default settings: the time to build it (make_checkpoint:
copies of the agent and optimizer, the pickled envs, the RNGs), the time to write it (save_checkpoint: a temporary file,
then the rename) and its size on disk, each the median of --repeats, after a few rollout steps so that the optimizer
state and the envs are mid-episode. The default --save-every (10 minutes) spends the sum once per 10 minutes.

    python benchmark/checkpoint_cost.py [--repeats 7] [--out benchmark/results/checkpoint_cost.md]
"""

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
CASES = [  # (script, label, Args overrides)
    ("ppo.py", "CartPole-v1", {}),
    ("ppo_rnn.py", "CartPoleNoVel-v1", {}),
    ("ppo_continuous_action.py", "HalfCheetah-v5", {}),
    ("ppo_atari.py", "Breakout, native envs", {}),
    ("ppo_atari.py", "Breakout, gymnasium's wrappers (pickled emulators)", {"native_envs": False}),
]


def load(script: str):
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_bench", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # what the script defines (env wrappers) pickles by this name
    spec.loader.exec_module(module)
    return module


def measure(script: str, overrides: dict, repeats: int, directory: str) -> tuple:
    module = load(script)
    args = module.Args(cuda=False, **overrides)
    envs = module.make_envs(args, args.num_envs, "checkpoint_cost", 0)
    agent = module.Agent(envs, args)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    obs, _ = envs.reset(seed=1)
    for _ in range(20):  # mid-episode envs
        obs, *_ = envs.step(envs.action_space.sample())
    loss = sum(p.square().sum() for p in agent.parameters())
    loss.backward()
    optimizer.step()  # Adam's moments exist, as in a run
    carry = (torch.as_tensor(obs), torch.zeros(args.num_envs))
    if script == "ppo_rnn.py":
        carry += (agent.initial_state(args.num_envs, torch.device("cpu")),)
    path = os.path.join(directory, f"{Path(script).stem}.pt")
    build, write = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        checkpoint = module.make_checkpoint(args, agent, optimizer, envs, 0, 0, carry)
        build.append(time.perf_counter() - start)
        start = time.perf_counter()
        module.save_checkpoint(checkpoint, path, rank=0, final=False)
        write.append(time.perf_counter() - start)
    envs.close()
    return statistics.median(build), statistics.median(write), os.path.getsize(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None, help="also write the table to this markdown file")
    options = parser.parse_args()
    torch.set_num_threads(1)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
    lines = [
        f"Checkpoint cost at default settings, median of {options.repeats}, {cpu}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}",
        "",
        "| script | env | build (ms) | write (ms) | size (MB) |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as directory:
        for script, label, overrides in CASES:
            build, write, size = measure(script, overrides, options.repeats, directory)
            lines.append(f"| `{script}` | {label} | {1000 * build:.1f} | {1000 * write:.1f} | {size / 1e6:.2f} |")
            print(lines[-1], flush=True)
    if options.out:
        Path(options.out).write_text("\n".join(lines) + "\n")
        print(f"written to {options.out}")


if __name__ == "__main__":
    main()
