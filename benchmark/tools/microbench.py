"""Microbenchmarks of the pieces of ppo.py's iteration that the speed issue asks about, in one thread: Adam's step in
its three implementations (and whether their parameters agree bit for bit), the rollout's policy step with and without
the entropy it does not use, the vector env's step, the gradient clip with and without foreach, one whole minibatch
step of the update, and the forward and backward of ppo_atari.py's Nature CNN trunk in float32 and under bfloat16
autocast. Best of `--repeat` timings of `--number` calls each.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmark/tools/microbench.py [--number 3000] [--repeat 5] [--cnn-batch 256]
"""

import argparse
import copy
import timeit
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from side_by_side import cpu, load  # this folder is on sys.path when the tool runs

ppo = load("ppo.py")


def best_us(fn, number: int, repeat: int) -> float:
    """The best of `repeat` timings of `number` calls of fn, in µs per call."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def adam_variants(agent: nn.Module, number: int, repeat: int, steps: int = 300) -> dict:
    """{name: (µs per step, flat parameters after `steps` steps on the same random gradients)}."""
    out = {}
    for name, kwargs in (("foreach", {"foreach": True}), ("single tensor", {"foreach": False}), ("fused", {"fused": True})):
        copied = copy.deepcopy(agent)
        optimizer = torch.optim.Adam(copied.parameters(), lr=2.5e-4, eps=1e-5, **kwargs)
        generator = torch.Generator().manual_seed(1)
        for _ in range(steps):
            for param in copied.parameters():
                param.grad = torch.randn(param.shape, generator=generator)
            optimizer.step()
        flat = torch.cat([param.detach().flatten() for param in copied.parameters()])
        out[name] = (best_us(optimizer.step, number // 10, repeat), flat)
    return out


def policy_without_entropy(agent, x: torch.Tensor):
    """get_action_and_value's rollout outputs (action, log-prob, value), its entropy left out."""
    logits = agent.actor(x)
    logits = logits - logits.logsumexp(-1, keepdim=True)
    action = torch.multinomial(logits.softmax(-1), 1, True).squeeze(-1)
    return action, logits.gather(-1, action.unsqueeze(-1)).squeeze(-1), agent.critic(x).squeeze(-1)


def minibatch_us(agent: nn.Module, run_args, rows: int, args) -> tuple:
    """One step of the update (update_minibatch: forward, losses, backward, clip, Adam) on a copy of agent, at ppo.py's
    default minibatch size (rows), on rows the copy's own policy produced for random observations: (µs per step, (the step's
    top-level calls and all its operations as torch.profiler records them))."""
    copied = copy.deepcopy(agent)
    optimizer, update_step = ppo.make_optimizer(run_args, copied, torch.device("cpu")), ppo.update_minibatch
    obs = torch.randn(rows, copied.actor[0].in_features)
    with torch.no_grad():
        actions, logprobs, _, values = copied.get_action_and_value(obs)
    minibatch = (obs, logprobs, actions, torch.randn(rows), values + torch.randn(rows), values)

    def step():
        update_step(run_args, copied, optimizer, minibatch)

    step()
    with torch.profiler.profile() as profile:
        step()
    events = profile.events()
    calls = (sum(event.cpu_parent is None for event in events), len(events))
    return best_us(step, args.number // 10, args.repeat), calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=3000, help="calls per timing (Adam: a tenth; the CNN: 5)")
    parser.add_argument("--repeat", type=int, default=5, help="timings, of which the best is kept")
    parser.add_argument("--cnn-batch", type=int, default=256, help="frames per CNN forward and backward (0: skip)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"{cpu()}, torch {torch.__version__}, one thread")

    run_args = ppo.Args(env_id="CartPole-v1", run_dir="microbench")
    run_args.batch_size = run_args.num_envs * run_args.num_steps
    envs = ppo.make_vector_env(run_args, run_args.num_envs, 0)
    next_obs, _ = envs.reset(seed=1)
    agent = ppo.Agent(envs)
    x = torch.as_tensor(next_obs, dtype=torch.float32)
    actions = np.zeros(run_args.num_envs, dtype=np.int64)

    def policy():
        with torch.inference_mode():
            agent.get_action_and_value(x)

    def env_step():
        envs.step(actions)

    def policy_no_entropy():
        with torch.inference_mode():
            policy_without_entropy(agent, x)

    rows = [
        ("rollout policy step, get_action_and_value", best_us(policy, args.number, args.repeat)),
        ("rollout policy step, without the entropy", best_us(policy_no_entropy, args.number, args.repeat)),
        (f"SyncVectorEnv step, {run_args.num_envs} CartPoles", best_us(env_step, args.number, args.repeat)),
    ]
    for param in agent.parameters():
        param.grad = torch.randn_like(param)
    for foreach in (False, True):

        def clip(foreach=foreach):
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5, foreach=foreach)

        rows.append((f"clip_grad_norm_, foreach={foreach}", best_us(clip, args.number, args.repeat)))
    mb_rows = run_args.batch_size // run_args.num_minibatches
    step_us, (top, ops) = minibatch_us(agent, run_args, mb_rows, args)
    rows.append((f"update_minibatch, {mb_rows} rows ({top} calls, {ops} operations in all, by torch.profiler)", step_us))
    adam = adam_variants(agent, args.number, args.repeat)
    for name, (us, flat) in adam.items():
        gap = (flat - adam["foreach"][1]).abs().max().item()
        rows.append((f"Adam step, {name} (largest parameter difference to foreach's after 300 steps: {gap:.1e})", us))
    if args.cnn_batch:
        # ppo_atari.py's Nature CNN trunk as its Agent builds it (channels-last), on frames already scaled to [0, 1]
        net = load("ppo_atari.py").Agent(SimpleNamespace(single_action_space=gym.spaces.Discrete(4))).network
        frames = torch.rand(args.cnn_batch, 4, 84, 84).to(memory_format=torch.channels_last)
        for bf16 in (False, True):

            def forward_backward(bf16=bf16):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    out = net(frames).float()
                out.sum().backward()

            forward_backward()
            name = "bfloat16 autocast" if bf16 else "float32"
            rows.append((f"Nature CNN forward and backward, {args.cnn_batch} frames, {name}", best_us(forward_backward, 5, 2)))
    print("| measured | µs per call |\n|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:,.1f} |")


if __name__ == "__main__":
    main()
