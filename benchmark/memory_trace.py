"""How much of a cue the freshly initialized recurrent agent of ppo_rnn.py still carries after L blank steps: two
MemoryL{L}K2 episodes that differ only in the cue go through Agent.get_states, and the trace is the norm of the
difference of the two hidden outputs L - 1 steps after the cue, divided by that at the cue. Per cell and forget-gate
bias, for the initializations of seeds 1-3. No training: it is what the answer's gradient has to reach back to.

    python benchmark/memory_trace.py [--length 30] [--out benchmark/results/ppo_rnn/memory_trace.txt]
"""

import argparse
from pathlib import Path

import gymnasium as gym
import torch
from checkpoint_cost import load  # benchmark/ is on the path when this file runs

CASES = [("lstm", 0.0), ("lstm", 1.0), ("lstm", 3.0), ("gru", 0.0)]


def trace(rnn, cell: str, forget_bias: float, length: int, seed: int) -> float:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("MemoryL10K2-v0", length=length)])
    torch.manual_seed(seed)
    agent = rnn.Agent(envs, rnn.Args(cell=cell, forget_bias=forget_bias))
    envs.close()
    obs = torch.zeros(length + 1, 2, 3)  # (time, the two episodes, cue one-hot + question flag)
    obs[0, 0, 0] = obs[0, 1, 1] = 1.0
    obs[length, :, 2] = 1.0
    with torch.no_grad():
        hidden, _ = agent.get_states(obs.flatten(0, 1), agent.initial_state(2, torch.device("cpu")), torch.zeros(2 * (length + 1)))
    hidden = hidden.reshape(length + 1, 2, -1)
    gap = (hidden[:, 0] - hidden[:, 1]).norm(dim=-1)
    return (gap[length - 1] / gap[0]).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rnn = load("ppo_rnn.py")
    lines = [f"cue's trace in the hidden output after {args.length - 1} blank steps, relative to the cue step (seeds 1, 2, 3)"]
    for cell, forget_bias in CASES:
        values = ", ".join(f"{trace(rnn, cell, forget_bias, args.length, seed):.1e}" for seed in (1, 2, 3))
        lines.append(f"{cell}, forget bias {forget_bias:g}: {values}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
