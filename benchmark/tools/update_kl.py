"""How far does one PPO update move the policy? Runs ppo_continuous_action.py in this process up to the first minibatch
step of each iteration asked for, then replays that iteration's update (the script's own update_minibatch, the same
minibatch order) once as the script runs it and once per --target-kl value, and prints, for each: the minibatch steps
taken, the approximate KL of the whole batch after the update (mean and max over the rows), and the largest change of
the action mean the env sees (clipped to the action bounds), by how far into its episode a row is. The first line of
each iteration checks the replay against the run (the mean of the per-minibatch approx KL, as TensorBoard logs it)
and gives the batch's advantages' std, the median gradient norm before --max-grad-norm clips it, and the policy's std.
CPU runs are deterministic, so this is the run's own update (docs/continuous.md, the fall after the peak).

    python benchmark/tools/update_kl.py --iterations 184 185 --target-kl 0.1 0.05 -- \\
        --env-id dm_control/cartpole-swingup-v0 --seed 2"""

import argparse
import contextlib
import copy
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers import run  # noqa: E402  (the scripts run as `%run` runs them, their globals returned)

PHASES = ((0, 100), (100, 200), (200, 400), (400, 1000))  # steps into the episode


def caller_globals() -> dict:
    """The script's globals, from the frame that called the optimizer (update_minibatch)."""
    frame = sys._getframe(1)
    while "iteration" not in frame.f_globals:
        frame = frame.f_back
    return frame.f_globals


def run_to(iterations: list, argv: list, cwd: Path = ROOT / "runs" / "update_kl") -> dict:
    """{iteration: the script's state at its first minibatch step}: the rollout, its advantages and the first epoch's
    order are ready; agent and optimizer are as the previous iteration left them. The run stops at the last one."""
    step, snapshots = torch.optim.Adam.step, {}

    def snapshot(self, *args, **kwargs):
        g = caller_globals()
        if g["iteration"] in iterations and g["iteration"] not in snapshots:
            keep = ("args", "agent", "optimizer", "batch", "b_inds", "epoch_inds", "dones", "envs", "make_optimizer")
            kept_whole = ("envs", "make_optimizer", "update_minibatch")
            snapshots[g["iteration"]] = {k: g[k] if k in kept_whole else copy.deepcopy(g[k]) for k in keep + kept_whole[2:]}
            snapshots[g["iteration"]]["rng"] = np.random.get_state()
            if g["iteration"] == max(iterations):
                raise KeyboardInterrupt
        return step(self, *args, **kwargs)

    torch.optim.Adam.step = snapshot
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the run's progress lines: stdout keeps the table
            run("ppo_continuous_action.py", *argv, cwd=cwd)
    finally:
        torch.optim.Adam.step = step
    return snapshots


def replay(g: dict, target_kl) -> dict:
    """The iteration's update from the state in g (left untouched), with --target-kl set to target_kl."""
    args = copy.copy(g["args"])
    args.target_kl = target_kl
    agent, old = copy.deepcopy(g["agent"]), copy.deepcopy(g["agent"])
    optimizer = g["make_optimizer"](args, agent, torch.device("cpu"))  # the script's own, as on the CPU
    update_minibatch = g["update_minibatch"]
    optimizer.load_state_dict(copy.deepcopy(g["optimizer"].state_dict()))  # load_state_dict keeps CPU tensors, not copies
    rng, b_inds, epoch_inds = np.random.get_state(), g["b_inds"].copy(), g["epoch_inds"]
    np.random.set_state(g["rng"])
    kls, norms, steps = [], [], 0
    for epoch in range(args.update_epochs):
        if epoch:
            np.random.shuffle(b_inds)
            epoch_inds = torch.as_tensor(b_inds)
        for start in range(0, args.batch_size, args.minibatch_size):
            stats = update_minibatch(
                args, agent, optimizer, tuple(b[epoch_inds[start : start + args.minibatch_size]] for b in g["batch"])
            )
            if stats is None:
                break
            kls.append(stats["approx_kl"].item())
            norms.append(stats["grad_norm"].item())  # the gradient's norm before --max-grad-norm clips it
            steps += 1
        else:
            continue
        break
    np.random.set_state(rng)
    b_obs, b_logprobs, b_actions = g["batch"][:3]
    with torch.no_grad():
        _, newlogprob, _, _ = agent.get_action_and_value(b_obs, b_actions)
        logratio = newlogprob - b_logprobs
        kl = (logratio.exp() - 1) - logratio
        low, high = (torch.as_tensor(x) for x in (g["envs"].single_action_space.low, g["envs"].single_action_space.high))
        shift = (agent.actor(b_obs).clamp(low, high) - old.actor(b_obs).clamp(low, high)).abs().amax(-1)
    return {"steps": steps, "mean_kl": np.mean(kls), "grad_norm": np.median(norms), "kl": kl, "shift": shift, "agent": agent}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, nargs="+", required=True)
    parser.add_argument("--target-kl", type=float, nargs="*", default=[])
    parser.add_argument("--episode-length", type=int, default=1000, help="every episode's length (the suite's time limit)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="after --: the script's own arguments")
    opts = parser.parse_args()
    argv = [a for a in opts.script_args if a != "--"]
    print(
        "| iteration | --target-kl | minibatch steps | batch KL mean | batch KL max | "
        + " | ".join(f"mean shift, steps {a}-{b}" for a, b in PHASES)
        + " |"
    )
    print("|---" * (5 + len(PHASES)) + "|")
    for iteration, g in sorted(run_to(opts.iterations, argv).items()):
        assert g["args"].num_envs == 1, "the phases below read one env's episodes"
        into = (np.arange(g["args"].batch_size) + (iteration - 1) * g["args"].batch_size) % opts.episode_length
        starts = np.flatnonzero(g["dones"].reshape(-1).numpy())
        assert (into[starts] == 0).all(), f"episodes of another length than {opts.episode_length} (--episode-length)"
        for target_kl in [None, *opts.target_kl]:
            r = replay(g, target_kl)
            phases = " | ".join(
                f"{r['shift'][torch.as_tensor((into >= a) & (into < b))].max():.3f}"
                if ((into >= a) & (into < b)).any()
                else "-"
                for a, b in PHASES
            )
            print(
                f"| {iteration} | {target_kl if target_kl is not None else 'none'} | {r['steps']} | {r['kl'].mean():.4f} | {r['kl'].max():.2f} | {phases} |"
                + (
                    f" approx_kl as logged {r['mean_kl']:.4f}; the advantages' std {g['batch'][3].std():.4f}; the gradient's"
                    f" norm before clipping, median {r['grad_norm']:.2f}; the policy's std {g['agent'].actor_logstd.exp().tolist()}"
                    if target_kl is None
                    else ""
                )
            )


if __name__ == "__main__":
    main()
