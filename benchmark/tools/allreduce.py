"""What one all_reduce costs on this machine: the scripts' collectives, timed under torchrun (gloo on CPU).

    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmark/tools/allreduce.py

Per minibatch step a script makes one all_reduce of its whole gradient (flattened into one float32
tensor) and four small ones (the two KL estimates, the advantages' mean, their variance).
"""

import time

import torch
import torch.distributed as dist

SIZES = {  # float32 elements: each script's default network's parameter count, and the small collectives
    "ppo_atari.py gradient (Nature CNN, 4 actions)": 1_686_693,
    "ppo.py gradient (CartPole-v1 MLP)": 9_155,
    "2 numbers (KL estimates)": 2,
}


def per_call(x: torch.Tensor, calls: int, rounds: int = 5) -> list:
    """Seconds per call in each of `rounds` rounds of `calls` calls (on 2 shared cores they vary)."""
    for _ in range(5):  # warm-up
        dist.all_reduce(x)
    times = []
    for _ in range(rounds):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(x)
        times.append((time.perf_counter() - start) / calls)
    return sorted(times)


if __name__ == "__main__":
    dist.init_process_group("gloo")
    try:
        for name, numel in SIZES.items():
            ms = [t * 1e3 for t in per_call(torch.ones(numel), calls=40 if numel > 100_000 else 400)]
            if dist.get_rank() == 0:
                print(
                    f"all_reduce over {dist.get_world_size()} processes, {name}, {numel:,} floats: "
                    f"{ms[len(ms) // 2]:.2f} ms per call (median of {len(ms)} rounds; {ms[0]:.2f}-{ms[-1]:.2f})"
                )
    finally:
        dist.destroy_process_group()
