"""How much would leaving ppo_atari.py's serve rows out of the per-minibatch advantage normalization move it? Runs the
default native Breakout run in this process up to the first minibatch step (the untrained policy's first rollout) and
prints, for each minibatch of that epoch, the advantages' mean and standard deviation over all rows and over the played
rows only (docs/atari.md, the serve).

    python benchmark/tools/serve_rows_adv_norm.py [--seed 1]"""

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers import run  # noqa: E402  (the scripts run as `%run` runs them, their globals returned)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    seed = parser.parse_args().seed
    step = torch.optim.Adam.step

    def first_step(self, *args, **kwargs):  # the first minibatch step: the rollout and the epoch's order are ready
        raise KeyboardInterrupt

    torch.optim.Adam.step = first_step
    try:
        caught = run(
            "ppo_atari.py", "--seed", str(seed), "--total-timesteps", "1024", cwd=ROOT / "runs" / "serve_rows_adv_norm"
        )
    finally:
        torch.optim.Adam.step = step
    adv, served, order = caught["b_advantages"], caught["b_serves"], caught["epoch_inds"]
    print(f"rows {len(adv)}, serve rows {int(served.sum())}")
    worst_mean, worst_std = 0.0, 0.0
    for mb in order.reshape(caught["args"].num_minibatches, -1):
        a, s = adv[mb], served[mb]
        p = a[s == 0]
        worst_mean = max(worst_mean, abs(p.mean() / a.mean() - 1).item())
        worst_std = max(worst_std, abs(p.std() / a.std() - 1).item())
        print(
            f"minibatch: {int(s.sum())} serve rows; mean {a.mean():.4f} (played {p.mean():.4f}), std {a.std():.4f} (played {p.std():.4f})"
        )
    print(f"largest change from leaving them out: mean {100 * worst_mean:.1f}%, std {100 * worst_std:.1f}%")


if __name__ == "__main__":
    main()
