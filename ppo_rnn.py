"""Recurrent PPO (LSTM or GRU) for discrete actions and vector observations, on gymnasium 1.x.

    python ppo_rnn.py                           # CartPoleNoVel-v1: CartPole without velocities
    python ppo_rnn.py --env-id AcrobotNoVel-v1 --seed 2 --save-model
    python ppo_rnn.py --env-id MemoryL30K2-v0 --cell gru   # recall a cue shown 30 steps earlier

`diff ppo.py ppo_rnn.py` is what memory adds. The defaults (lr 1e-3, one minibatch, 10 epochs,
no entropy bonus, rewards x 0.1) were tuned on CartPoleNoVel-v1: docs/recurrent.md.

Schulman et al. 2017 (arXiv:1707.06347) with the details of "The 32 Implementation Details of
PPO" (Huang and Dossa, 2020), on gymnasium 1.x, where a time-limit truncation bootstraps
gamma * V(final_obs). Read down to `evaluate`, then `__main__`: the run management between them
can be skipped. Checkpoints are pickles: load only those you trust.
"""

import contextlib
import errno
import functools
import glob
import importlib
import io
import itertools
import math
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal, NoReturn, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.utils.tensorboard import SummaryWriter


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be used where available"""
    cuda_graphs: bool = False
    """on CUDA, replay the policy's forward and the minibatch step from CUDA graphs (fused Adam)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """save `{run_dir}/{exp_name}.pt` to resume and `.cleanrl_model` to share"""
    upload_model: bool = False
    """push the model, its evaluation and a model card to the HF Hub"""
    hf_entity: str = ""
    """the Hub user or organization to push to"""
    save_every: float = 10.0
    """with --save-model, also save every this many minutes (0: after every iteration)"""
    run_dir: Optional[str] = None
    """where the TensorBoard log and checkpoint go (None: runs/ENV__EXP__SEED__TIME)"""
    resume: Optional[str] = None
    """a checkpoint or its run dir to continue, with its settings (`auto`: --run-dir's)"""
    eval_checkpoint: Optional[str] = None
    """a .cleanrl_model (or .pt) to evaluate instead of training"""
    eval_episodes: int = 10
    """the number of episodes to play with `--eval-checkpoint`"""
    eval_greedy: bool = False
    """if toggled, evaluation takes the most likely action instead of sampling"""

    env_id: str = "CartPoleNoVel-v1"
    """the id of the environment"""
    total_timesteps: int = 500000
    """total timesteps of the experiments (a larger value on --resume trains further)"""
    learning_rate: float = 1e-3
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: int = 1
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as baselines' ppo2"""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold"""
    bootstrap_truncation: bool = True
    """bootstrap gamma * V(final_obs) at time-limit truncations (off: treat them as termination)"""
    reward_scale: float = 0.1
    """rewards are scaled by it for learning, not in the logged returns"""
    cell: Literal["lstm", "gru"] = "lstm"
    """lstm (state h and c) or gru (state h)"""
    forget_bias: float = 0.0
    """LSTM only: the forget gate's initial bias (0, as CleanRL's)"""

    batch_size: tyro.conf.Suppress[int] = 0
    """the batch size (computed in runtime, not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """the mini-batch size (computed in runtime, not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """the number of iterations (computed in runtime, not a flag)"""


class MaskVelocity(gym.ObservationWrapper):
    """Only the observation's entries in `keep`: the positions, not the velocities."""

    def __init__(self, env: gym.Env, keep: list):
        super().__init__(env)
        self.keep = np.array(keep)
        space = env.observation_space
        low, high = space.low[self.keep], space.high[self.keep]
        self.observation_space = gym.spaces.Box(low, high, dtype=space.dtype)

    def observation(self, observation):
        return observation[self.keep]


def make_masked(env_id: str, keep: list, **kwargs) -> gym.Env:
    return MaskVelocity(gym.make(env_id, **kwargs), keep)


# positions only (CartPole: x, angle; Acrobot: cos, sin of both joints)
MASKED = {
    "CartPoleNoVel-v1": ("CartPole-v1", [0, 2]),
    "AcrobotNoVel-v1": ("Acrobot-v1", [0, 1, 2, 3]),
}
for masked_id, (full_id, keep) in MASKED.items():
    # anew at each %run: envs of the last run's classes do not pickle
    gym.registry.pop(masked_id, None)
    gym.register(masked_id, entry_point=make_masked, kwargs=dict(env_id=full_id, keep=keep))


class MemoryCue(gym.Env):
    """A cue (one-hot) in the first observation, `length - 1` blank ones, then the question (last
    entry 1): +1 for the cue's index, else -1, then the end. Guessing earns 2 / num_cues - 1."""

    def __init__(self, length: int = 10, num_cues: int = 2):
        if length < 1 or num_cues < 2:
            got = f"got {length} and {num_cues}"
            raise ValueError(f"MemoryCue needs length >= 1 and num_cues >= 2, {got}")
        self.length = length
        self.num_cues = num_cues
        self.observation_space = gym.spaces.Box(0.0, 1.0, (num_cues + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(num_cues)

    def observe(self) -> np.ndarray:
        obs = np.zeros(self.num_cues + 1, dtype=np.float32)
        if self.t == 0:
            obs[self.cue] = 1.0
        if self.t == self.length:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self.cue = int(self.np_random.integers(self.num_cues))
        self.t = 0
        return self.observe(), {}

    def step(self, action):
        asked = self.t == self.length
        self.t += 1
        reward = (1.0 if int(action) == self.cue else -1.0) if asked else 0.0
        return self.observe(), reward, asked, False, {}


# other lengths and cues: gym.make("MemoryL10K2-v0", length=L, num_cues=k)
for length in (1, 3, 10, 30, 100, 300):
    for num_cues in (2, 4):
        memory_id = f"MemoryL{length}K{num_cues}-v0"
        gym.registry.pop(memory_id, None)
        gym.register(
            memory_id, entry_point=MemoryCue, kwargs=dict(length=length, num_cues=num_cues)
        )


def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env

    return thunk


def make_vector_env(args: Args, num_envs: int, rank: int) -> gym.vector.VectorEnv:
    """SAME_STEP autoreset: a last step returns the next episode's first observation (the real
    last one in infos["final_obs"]), and no step is spent on a reset."""
    video = args.capture_video and rank == 0
    run_name = os.path.basename(args.run_dir)
    thunks = [make_env(args.env_id, i, video, run_name) for i in range(num_envs)]
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def check_env(args: Args):
    """Fail, before anything is written, on this script's settings or an env of another kind."""
    if args.forget_bias != 0 and args.cell != "lstm":
        fail("--forget-bias is an LSTM setting: the GRU has no forget gate; drop it")
    num_envs = args.num_envs // WORLD_SIZE  # per process
    if num_envs % args.num_minibatches:
        envs = plural(num_envs, "env") + (" a process" if WORLD_SIZE > 1 else "")
        fits = " or ".join(map(str, divisors_near(num_envs, args.num_minibatches, 1)))
        fail(f"{envs} cannot split into --num-minibatches {args.num_minibatches}; try {fits}")
    env_id = args.env_id
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:
        if "NoFrameskip" in env_id or env_id.startswith("ALE/"):
            fail(f"{env_id} is an Atari game; use ppo_atari.py for it")
        fail(f"unknown env id {env_id!r} ({e}); see gymnasium.pprint_registry()")
    except ImportError as e:
        fail(f"the module of env id {env_id!r} does not import ({e.__cause__ or e})")
    env.close()
    actions, observations = env.action_space, env.observation_space
    if isinstance(actions, gym.spaces.Box):
        fail(f"{env_id} has continuous (Box) actions; use ppo_continuous_action.py for it")
    if not isinstance(actions, gym.spaces.Discrete):
        fail(f"{env_id} has {type(actions).__name__} actions; this script needs Discrete ones")
    if not isinstance(observations, gym.spaces.Box) or len(observations.shape) != 1:
        fail(f"{env_id} observes {observations}, not a flat Box (images: use ppo_atari.py)")


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs: gym.vector.VectorEnv, args: Args):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        self.network = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
        )
        self.rnn = nn.LSTM(64, 128) if args.cell == "lstm" else nn.GRU(64, 128)
        for name, param in self.rnn.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0)
            elif "weight" in name:
                nn.init.orthogonal_(param, 1.0)
        if args.cell == "lstm":  # gates: input, forget, cell, output
            forget_gate = slice(self.rnn.hidden_size, 2 * self.rnn.hidden_size)
            nn.init.constant_(self.rnn.bias_ih_l0[forget_gate], args.forget_bias)
        self.actor = layer_init(nn.Linear(128, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1.0)

    def initial_state(self, num_envs: int, device: torch.device) -> tuple:
        """Zeros: (h, c) for an LSTM, (h,) for a GRU, each (1, num_envs, H)."""
        parts = 2 if isinstance(self.rnn, nn.LSTM) else 1
        shape = (1, num_envs, self.rnn.hidden_size)
        return tuple(torch.zeros(shape, device=device) for _ in range(parts))

    def run_cell(self, x: torch.Tensor, rnn_state: tuple) -> tuple:
        """nn.LSTM's state is (h, c), nn.GRU's h alone: here both are tuples."""
        if isinstance(self.rnn, nn.LSTM):
            return self.rnn(x, rnn_state)
        h, state = self.rnn(x, rnn_state[0])
        return h, (state,)

    def get_states(self, x: torch.Tensor, rnn_state: tuple, done: torch.Tensor):
        """The cell over time-major x (T * B, *obs), env b's state zeroed where done[t, b] = 1."""
        num_envs = rnn_state[0].shape[1]
        hidden = self.network(x).reshape((-1, num_envs, self.rnn.input_size))  # (T, B, 64)
        done = done.reshape((-1, num_envs))  # (T, B)
        new_hidden = []
        for begin, end in stretches(done):
            keep = (1.0 - done[begin]).view(1, -1, 1)  # 0 where an episode starts
            rnn_state = tuple(keep * s for s in rnn_state)
            h, rnn_state = self.run_cell(hidden[begin:end], rnn_state)
            new_hidden.append(h)
        return torch.cat(new_hidden).flatten(0, 1), rnn_state  # (T * B, H), each (1, B, H)

    def get_value(self, x: torch.Tensor, rnn_state: tuple, done: Optional[torch.Tensor] = None):
        if done is None:  # no episode starts in x
            done = torch.zeros(len(x), device=x.device)
        hidden, _ = self.get_states(x, rnn_state, done)
        return self.critic(hidden).squeeze(-1)  # (T * B,)

    def get_action_and_value(self, x, rnn_state: tuple, done: torch.Tensor, action=None):
        hidden, rnn_state = self.get_states(x, rnn_state, done)
        # Categorical's sample, log_prob and entropy written out: the same numbers, faster
        logits = self.actor(hidden)  # (T * B, n_actions)
        log_probs = logits - logits.logsumexp(-1, keepdim=True)
        if action is None:
            action = torch.multinomial(log_probs.softmax(-1), 1, replacement=True).squeeze(-1)
        logprob = log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        # clamped: 0 * log(0) is 0, but 0 * -inf is nan
        finite_log_probs = log_probs.clamp(min=torch.finfo(log_probs.dtype).min)
        entropy = -(finite_log_probs * log_probs.softmax(-1)).sum(-1)
        # (T * B,) action, log-prob, entropy, value; the state after x
        return action, logprob, entropy, self.critic(hidden).squeeze(-1), rnn_state


def stretches(done: torch.Tensor) -> list:
    """(begin, end) of each stretch of a (T, B) rollout with no episode start after its first step:
    one cell call per stretch, equal to a call per step up to rounding (a CUDA graph: per step)."""
    if done.is_cuda and torch.cuda.is_current_stream_capturing():
        starts = list(range(len(done) + 1))
    else:
        starts = [0] + (torch.nonzero(done[1:].any(dim=1)).flatten() + 1).tolist() + [len(done)]
    return list(zip(starts[:-1], starts[1:], strict=True))


def compute_gae(rewards, values, dones, next_value, next_done, gamma: float, gae_lambda: float):
    """GAE over a (num_steps, num_envs) rollout: (advantages, returns). dones[t] = 1 cuts the trace
    between t-1 and t; next_* belong to the observation after the rollout."""
    rewards, dones = rewards.to(values.device), dones.to(values.device)  # from the host
    next_done = next_done.to(values.device)
    # row t: what follows step t (row t + 1; after the last step, next_*)
    nextnonterminal = 1.0 - torch.cat((dones[1:], next_done[None]))  # (num_steps, num_envs)
    nextvalues = torch.cat((values[1:], next_value[None]))
    deltas = rewards + gamma * nextvalues * nextnonterminal - values
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        lastgaelam = deltas[t] + gamma * gae_lambda * nextnonterminal[t] * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def bootstrap_truncation(
    args: Args, agent: Agent, reward, terminations, truncations, infos, rnn_state=None
):
    """The reward plus gamma * V(final_obs) where a time limit cut an episode short: the MDP goes
    on (Pardo et al. 2018, arXiv:1712.00378). A termination gets nothing."""
    trunc = np.flatnonzero(truncations & ~terminations)
    if not args.bootstrap_truncation or len(trunc) == 0:
        return reward
    device = next(agent.parameters()).device
    final_obs = torch.tensor(
        np.stack(infos["final_obs"][trunc]), dtype=torch.float32, device=device
    )
    with torch.inference_mode():
        if rnn_state is None:
            final_value = agent.get_value(final_obs)
        else:  # ppo_rnn.py: from the recurrent state of each cut episode
            final_value = agent.get_value(final_obs, tuple(s[:, trunc] for s in rnn_state))
        reward[trunc] += args.gamma * final_value.cpu().numpy()
    return reward


def policy_loss(advantages: torch.Tensor, ratio: torch.Tensor, clip_coef: float) -> torch.Tensor:
    """The clipped surrogate, negated for minimization (Schulman et al. 2017, eq. 7)."""
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    return torch.max(pg_loss1, pg_loss2).mean()


def value_loss(newvalue, values, returns, clip_coef: Optional[float]) -> torch.Tensor:
    """0.5 * the mean of the squared error to the returns or, with clip_coef (--clip-vloss, as
    ppo2), of the larger of it and that of the value clipped within clip_coef of the old one."""
    v_loss_unclipped = (newvalue - returns) ** 2
    if clip_coef is None:
        return 0.5 * v_loss_unclipped.mean()
    v_clipped = values + torch.clamp(newvalue - values, -clip_coef, clip_coef)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()


def update_minibatch(args: Args, agent: Agent, optimizer: optim.Optimizer, minibatch: tuple):
    """One gradient step on some envs' whole sequences, from their state at the rollout's start:
    its statistics by name, or None, without a step, past --target-kl. all_mean, whole_mean_std
    and average_gradients pool over torchrun's processes, if any."""
    mb_obs, mb_logprobs, mb_actions, mb_advantages, mb_returns, mb_values, mb_dones, mb_state = (
        minibatch
    )
    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
        mb_obs, mb_state, mb_dones, mb_actions
    )
    assert newlogprob.shape == newvalue.shape == mb_returns.shape  # (minibatch,): no broadcasting
    logratio = newlogprob - mb_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = all_mean((-logratio).mean())
        approx_kl = all_mean(((ratio - 1) - logratio).mean())
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()
    # checked before each step (CleanRL: after each epoch); a branch CUDA graphs cannot record
    if args.target_kl is not None and approx_kl > args.target_kl:
        return None

    if args.norm_adv:
        mb_mean, mb_std = whole_mean_std(mb_advantages)
        mb_advantages = (mb_advantages - mb_mean) / (mb_std + 1e-8)

    pg_loss = policy_loss(mb_advantages, ratio, args.clip_coef)
    v_clip = args.clip_coef if args.clip_vloss else None
    v_loss = value_loss(newvalue, mb_values, mb_returns, v_clip)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

    optimizer.zero_grad()
    loss.backward()
    average_gradients(agent)
    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    optimizer.step()
    stats = dict(policy_loss=pg_loss, value_loss=v_loss, entropy=entropy_loss, loss=loss)
    stats.update(old_approx_kl=old_approx_kl, approx_kl=approx_kl, clipfrac=clipfrac)
    stats.update(grad_norm=grad_norm)
    return {name: value.detach() for name, value in stats.items()}


def evaluate(args: Args, agent: Agent, envs, ckpt: dict, device: torch.device):
    """Play --eval-episodes episodes with the saved agent (--eval-greedy: its likeliest action)."""
    if RANK == 0:
        load_agent(agent, envs, ckpt, args.eval_checkpoint)
        torch.manual_seed(args.seed)  # the same seed plays the same episodes
        obs, _ = envs.reset(seed=args.seed)
        rnn_state = agent.initial_state(1, device)
        done = torch.zeros(1, device=device)
        returns = []
        while len(returns) < args.eval_episodes:
            with torch.inference_mode():
                x = torch.as_tensor(obs, dtype=torch.float32, device=device)
                if args.eval_greedy:
                    hidden, rnn_state = agent.get_states(x, rnn_state, done)
                    action = agent.actor(hidden).argmax(1)
                else:
                    action, _, _, _, rnn_state = agent.get_action_and_value(x, rnn_state, done)
            obs, _, terminations, truncations, infos = envs.step(action.cpu().numpy())
            done = torch.as_tensor(terminations | truncations, dtype=torch.float32, device=device)
            for _, episode_return, _ in ended_episodes(infos, global_step=0):
                returns.append(episode_return)
                print(f"eval episode {len(returns)}: return {episode_return:.2f}")
        print(eval_summary(args, envs, returns))
    envs.close()
    raise SystemExit(0)


# ==================================================================================================
# RUN MANAGEMENT: checks, checkpoints, logging, signals, torchrun and CUDA graphs. Identical in all
# four scripts (tests/test_drift.py pins it), no part of the algorithm: a first reading can skip it.
# ==================================================================================================

CHECKPOINT_FORMAT = 4  # raised whenever what a checkpoint holds changes
# how a run runs and is recorded: what --resume and --eval-checkpoint may change
MAY_CHANGE_ON_RESUME = (
    "exp_name seed torch_deterministic cuda track wandb_project_name wandb_entity capture_video "
    "save_model upload_model hf_entity save_every run_dir resume eval_checkpoint eval_episodes "
    "eval_greedy env_groups"
).split()
SCRIPT = os.path.basename(__file__)
# torchrun's (a plain run: rank 0 of 1)
RANK = int(os.environ.get("RANK", 0))
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", 1))


def fail(message: str) -> NoReturn:
    """Stop with a one-line error; under torchrun every process stops, and rank 0 says why."""
    says = os.environ.get("RANK" if dist.is_initialized() else "LOCAL_RANK", "0") == "0"
    if dist.is_initialized():
        dist.destroy_process_group()  # now, not during interpreter shutdown
    raise SystemExit(f"error: {message}" if says else 1)


def check_args(args: Args):
    positive = (
        "total_timesteps num_envs num_steps num_minibatches update_epochs eval_episodes "
        "learning_rate clip_coef max_grad_norm target_kl reward_scale"  # the last: ppo_rnn.py's
    ).split()
    for name, value in vars(args).items():
        flag = f"--{name.replace('_', '-')}"
        if name in positive and value is not None and not value > 0:
            fail(f"{flag} must be positive, got {value}")
        if name in ("ent_coef", "vf_coef", "save_every") and not value >= 0:
            fail(f"{flag} must be non-negative, got {value}")
        if name in ("gamma", "gae_lambda") and not 0 <= value <= 1:
            fail(f"{flag} must be in [0, 1], got {value}")
    if args.capture_video:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # no display: no XDG_RUNTIME_DIR error
        need("moviepy", "--capture-video")
    if args.upload_model and not args.save_model:
        fail("--upload-model pushes what --save-model saves; add --save-model")
    if args.upload_model:
        need("huggingface_hub", "--upload-model")
    check_env(args)
    batch_size = args.num_envs * args.num_steps
    batch = f"num_envs * num_steps = {batch_size}"
    minibatches = args.num_minibatches
    if batch_size % minibatches:
        fits = " or ".join(map(str, divisors_near(batch_size, minibatches)))
        fail(f"{batch} is not divisible by --num-minibatches {minibatches}; try {fits} of them")
    if args.norm_adv and batch_size // minibatches < 2:
        fail("a minibatch of 1 sample cannot normalize advantages; use fewer --num-minibatches")
    steps = args.total_timesteps
    if args.eval_checkpoint is None and steps < batch_size:
        fail(f"--total-timesteps {steps} is less than one batch ({batch})")
    if steps % batch_size and not (args.eval_checkpoint or args.resume):
        whole = steps - steps % batch_size
        rounded = f"not a multiple of the batch ({batch}): {whole} steps are trained"
        notice(f"--total-timesteps {steps} is {rounded}")
    if args.num_envs % WORLD_SIZE or batch_size // WORLD_SIZE % minibatches:  # each steps a share
        split = f"{WORLD_SIZE} processes of whole minibatches"
        unit = WORLD_SIZE * minibatches // math.gcd(minibatches, args.num_steps)  # of --num-envs
        below = args.num_envs // unit * unit
        fits = f"{below} or {below + unit}" if below else f"{unit}"
        fail(f"--num-envs {args.num_envs} does not split into {split}; try --num-envs {fits}")
    if args.cuda_graphs and (args.target_kl is not None or WORLD_SIZE > 1):
        fail("--cuda-graphs records the whole minibatch step: no --target-kl, no torchrun")


def notice(message: str):
    if RANK == 0:
        print(f"notice: {message}")


def need(package: str, flag: str):
    try:
        importlib.import_module(package)
    except ImportError as e:
        fail(f"{flag} needs {package} ({e}); pip install {package}")


def divisors_near(n: int, to: int, min_part: int = 2) -> list:
    fits = [d for d in range(1, n // min_part + 1) if n % d == 0] or [1]
    return [d for d in fits if d < to][-1:] + [d for d in fits if d > to][:1]


def start_up(args: Args) -> tuple:
    """Checks, the checkpoint's settings into args, torchrun: (rank, world_size, device, ckpt).
    A finished run stops here (with --upload-model: pushed first)."""
    ckpt = None
    error = None
    try:
        ckpt = from_checkpoint(args)
        check_args(args)
    except SystemExit as stop:
        error = stop.code
    if error is None and args.resume:
        batch_size = args.num_envs * args.num_steps
        last = args.total_timesteps // batch_size
        trained = ckpt["iteration"]
        if trained >= last:
            further = f"--total-timesteps {(last + 1) * batch_size} or more trains it further"
            if RANK == 0:
                print(f"{args.resume} is finished (iteration {trained} of {last}); {further}")
                if args.upload_model:  # pushed again: the last push may have failed
                    upload(args)
            raise SystemExit(0)
    cuda = args.cuda and torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    if cuda and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) > gpus:  # the group could not start
        fail(f"more processes than the {gpus} GPU(s); lower --nproc-per-node or pass --no-cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if WORLD_SIZE > 1:
        error = start_process_group(args, cuda, error)
    if error is not None:
        fail(str(error).removeprefix("error: "))
    if cuda:
        torch.cuda.set_device(device)
    elif args.cuda:
        notice("CUDA is not available, running on CPU")
    if args.run_dir is None:
        env_name = args.env_id.replace("/", "_")
        args.run_dir = f"runs/{env_name}__{args.exp_name}__{args.seed}__{int(time.time())}"
        if RANK == 0:
            args.run_dir = new_directory(args.run_dir)
    return RANK, WORLD_SIZE, device, ckpt


def new_directory(path: str) -> str:
    """path, else path-2, path-3...: the first that did not exist, made now (runs of one second)."""
    for n in itertools.count(1):
        name = path if n == 1 else f"{path}-{n}"
        try:
            os.makedirs(name)
            return name
        except FileExistsError:
            continue
        except OSError:
            return name  # start_run says why it cannot be written


def start_process_group(args: Args, cuda: bool, error) -> Optional[str]:
    """torchrun's group; the first error of any process, or arguments that differ."""
    importlib.import_module("torch._dynamo")  # else torch.optim imports it later, holding the group
    # torchrun --max-restarts keeps its store: this attempt's keys apart from the dead attempts'
    attempt = f"restart{os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)}"
    store = dist.PrefixStore(attempt, next(dist.rendezvous("env://"))[0])
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    dist.init_process_group(backend, store=store, rank=RANK, world_size=WORLD_SIZE)
    everyone = [None] * WORLD_SIZE
    dist.all_gather_object(everyone, (asdict(args), error))
    first, _ = everyone[0]
    differ = [name for name, value in first.items() if any(a[name] != value for a, _ in everyone)]
    reasons = [e for _, e in everyone if isinstance(e, str)]  # each machine's first process has one
    if differ:
        reasons.append(f"the processes were started with different arguments ({', '.join(differ)})")
    return reasons[0] if reasons else error


def from_checkpoint(args: Args) -> Optional[dict]:
    """The checkpoint of --resume or --eval-checkpoint (or None); its settings into args."""
    restart = args.resume == "auto"  # a restart of the same command line: its checkpoint, if any
    if restart and (args.run_dir is None or not args.save_model):
        fix = "pass --run-dir DIR and --save-model"
        fail(f"--resume auto continues the checkpoint in --run-dir: {fix}")
    if restart:
        model_path = f"{args.run_dir}/{args.exp_name}.pt"
        args.resume = model_path if os.path.exists(model_path) else None
    if args.resume is None and args.eval_checkpoint is None:
        check_run_dir(args, restart)
        return None
    if args.resume and os.path.isdir(args.resume) and not args.resume.endswith(".pt"):
        found = sorted(glob.glob(os.path.join(glob.escape(args.resume), "*.pt")))
        if len(found) != 1:
            which = ", ".join(os.path.basename(f) for f in found) or "no checkpoint (*.pt)"
            fail(f"--resume {args.resume!r} is a directory of {which}; pass the one to continue")
        args.resume = found[0]
    path = args.eval_checkpoint or args.resume
    if not os.path.isfile(path):
        fail(f"checkpoint {path!r} is not a file; pass one that --save-model wrote")
    model_file = path.endswith(".cleanrl_model")  # tensors and plain values: safe from anyone
    if args.eval_checkpoint and not model_file:  # before loading it
        safe = "the .cleanrl_model saved beside it cannot"
        notice(f"a .pt checkpoint is a pickle, which can run code as it loads; {safe}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=model_file)
    except Exception as e:
        fail(f"checkpoint {path!r} could not be read ({type(e).__name__}); it is corrupt")
    if isinstance(ckpt, dict) and ckpt.get("script", SCRIPT) != SCRIPT:
        fail(f"{path!r} was saved by {ckpt['script']}, not {SCRIPT}; run it with {ckpt['script']}")
    if args.resume and model_file:
        fail(f"{path!r} holds the model only; --resume continues the .pt checkpoint beside it")
    parts = {"format", "args", "agent", "ranks"}
    if not model_file:
        parts |= {"optimizer", "global_step", "iteration"}
    whole = isinstance(ckpt, dict) and parts <= ckpt.keys()
    if not whole or ckpt["format"] != CHECKPOINT_FORMAT:
        fail(f"{path!r} is not a whole checkpoint of this {SCRIPT}; pass one --save-model wrote")
    if args.resume and len(ckpt["ranks"]) != WORLD_SIZE:
        saved_by = len(ckpt["ranks"])
        fail(f"{path!r} was saved by {saved_by} process(es), not {WORLD_SIZE}; start as many")
    saved = {**ckpt["args"], "run_dir": os.path.dirname(path) or "."}
    if args.eval_checkpoint:  # how it runs and is recorded: from its command line, not training's
        defaults = asdict(Args())
        saved.update({n: defaults[n] for n in MAY_CHANGE_ON_RESUME if n in defaults})
        saved["run_dir"] = f"{ckpt['args']['run_dir']}-eval"  # its videos apart from training's
    given = tyro.cli(Args, default=Args(**saved))  # the command line again, over the saved settings
    differ = [n for n in saved if n not in MAY_CHANGE_ON_RESUME and getattr(given, n) != saved[n]]
    if args.resume and given.total_timesteps > saved["total_timesteps"]:
        differ.remove("total_timesteps")  # trained further
    if differ:
        settings = ", ".join(f"{n}={saved[n]!r} (not {getattr(given, n)!r})" for n in differ)
        fail(f"{path!r} keeps the settings it was trained with: {settings}; drop those flags")
    vars(args).update(vars(given), resume=args.resume)
    return ckpt


def check_run_dir(args: Args, restart: bool):
    """A new run's --run-dir holds no other run (a restart by --resume auto: its own events)."""
    if args.run_dir is None or not os.path.isdir(args.run_dir):
        return
    names = sorted(os.listdir(args.run_dir))
    if f"{args.exp_name}.pt" in names:
        fix = "continue it with --resume auto, or pass another --run-dir"
        fail(f"--run-dir {args.run_dir!r} holds {args.exp_name}.pt: {fix}")
    others = [name for name in names if name.endswith((".pt", ".cleanrl_model"))]
    if not restart:
        others += [name for name in names if name.startswith("events.out.tfevents.")]
    if others:
        fail(f"--run-dir {args.run_dir!r} holds another run's {others[0]}; pass another --run-dir")


def load_agent(agent: nn.Module, envs, ckpt: dict, path: str):
    """The saved agent, and the state of its vector wrapper (the continuous script's statistics)."""
    try:
        agent.load_state_dict(ckpt["agent"])
    except RuntimeError as e:  # missing, unexpected or reshaped: torch's 2nd line names the first
        first = str(e).splitlines()[1].strip()
        fail(f"{path!r} does not fit this Agent ({first}); an edited Agent, or another version's")
    saved = ckpt["ranks"][RANK]["wrapper"]
    for name in set(saved) & set(getattr(envs, "checkpointed", ())):  # nothing else a file may set
        setattr(envs, name, unplain(saved[name], getattr(envs, name)))


def plain(value):
    """value as torch.load(weights_only=True) reads it: CPU tensors, dicts for objects."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if hasattr(value, "__dict__"):  # gymnasium's RunningMeanStd
        return plain(vars(value))
    return value


def unplain(value, like):
    """plain's inverse, into like's types: tensors to arrays, dicts into like's attributes."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        vars(like).update({key: unplain(item, getattr(like, key)) for key, item in value.items()})
        return like
    return value


def eval_summary(args: Args, envs, returns: list) -> str:
    """An evaluation's line (gymnasium's recorder stopped first: no partial video)."""
    how = "greedy" if args.eval_greedy else "sampled"
    episodes = plural(len(returns), "episode")
    summary = f"eval: {episodes} ({how}), return {np.mean(returns):.2f} ± {np.std(returns):.2f}"
    if not args.capture_video:
        return summary
    if hasattr(envs, "envs"):
        envs.envs[0].set_wrapper_attr("recording", False)
        envs.envs[0].set_wrapper_attr("recorded_frames", [])
    return f"{summary}; videos in videos/{os.path.basename(args.run_dir)}/"


def save_checkpoint(args: Args, run, agent, optimizer, envs, step: int, iteration: int, carry):
    """Write what continuing after `iteration` needs (carry: what the loop carries), atomically."""
    try:
        env_state = pickle.dumps(envs.envs)  # the sub-envs mid-episode, with their RNGs
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        env_state = None  # no sub-envs (a C++ vector env), a video recorder, a lambda in an env
        if run.saved is None:
            notice(f"the envs do not pickle ({e}): a resume starts new episodes")
    rng = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    rng["cuda"] = torch.cuda.get_rng_state() if next(agent.parameters()).is_cuda else None
    wrapper = {name: getattr(envs, name) for name in getattr(envs, "checkpointed", ())}
    own = dict(envs=env_state, wrapper=wrapper, carry=walk(torch.Tensor.cpu, carry), rng=rng)
    ranks = gather(own)
    if RANK > 0:
        return
    checkpoint = dict(format=CHECKPOINT_FORMAT, script=SCRIPT, ranks=ranks)
    checkpoint.update(args=asdict(args), agent=agent.state_dict(), optimizer=optimizer.state_dict())
    checkpoint.update(global_step=step, iteration=iteration)
    checkpoint["recent_returns"] = list(run.recent_returns)
    write_file(f"{args.run_dir}/{args.exp_name}.pt", checkpoint, iteration)
    run.saved = iteration
    # the model to share: loads with torch.load(weights_only=True), runs no code
    model = {key: checkpoint[key] for key in ("format", "script", "args", "global_step")}
    model["agent"] = plain(checkpoint["agent"])
    model["ranks"] = [dict(wrapper=plain(ranks[0]["wrapper"]))]
    write_file(f"{args.run_dir}/{args.exp_name}.cleanrl_model", model, iteration)


def write_file(path: str, obj, iteration: int):
    """torch.save(obj) to path, atomically: the old file stays until the new one is whole."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)  # in memory first: a failed write below is the disk's
    try:
        with open(f"{path}.tmp", "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())  # on the disk before it replaces the last one
        os.replace(f"{path}.tmp", path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(f"{path}.tmp")  # no partial file left to fill the disk
        what = f"the checkpoint of iteration {iteration} could not be written ({e.strerror})"
        raise OSError(e.errno, what, path) from None


def restore(args: Args, ckpt: Optional[dict], agent, optimizer, envs, carry: dict):
    """(global_step, first iteration, carry) as saved, or (0, 1, carry) and rank 0's weights."""
    if ckpt is None:
        if dist.is_initialized():
            for param in agent.parameters():
                dist.broadcast(param.data, src=0)
        return 0, 1, carry
    own = ckpt["ranks"][RANK]
    load_agent(agent, envs, ckpt, args.resume)
    load_optimizer(optimizer, ckpt["optimizer"])
    if own["envs"] is not None:
        envs.envs[:] = pickle.loads(own["envs"])
        carry = walk(torch.Tensor.to, own["carry"], carry)
    else:  # seeds this run has not played
        obs, _ = envs.reset(seed=args.seed + ckpt["global_step"] + RANK * envs.num_envs)
        carry["next_obs"] = torch.as_tensor(obs).to(carry["next_obs"])
        notice("the checkpoint holds no env state: new episodes start")
    rng = own["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and next(agent.parameters()).is_cuda:
        torch.cuda.set_rng_state(rng["cuda"])
    return ckpt["global_step"], ckpt["iteration"] + 1, carry


def start_run(args: Args, device: torch.device, ckpt: Optional[dict]) -> tuple:
    """Rank 0 locks --run-dir, opens TensorBoard and prints the sizes; signals are caught."""
    run = types.SimpleNamespace(lock=None, signals=[], saved=None, saved_at=time.time())
    run.start_time = run.saved_at
    run.first_step = ckpt["global_step"] if ckpt else 0
    run.recent_returns = deque(ckpt["recent_returns"] if ckpt else [], maxlen=100)
    try:
        if RANK == 0:
            os.makedirs(args.run_dir, exist_ok=True)
            run.lock = open(f"{args.run_dir}/.lock", "a+")  # held until the run closes
            if os.name == "posix":  # an fcntl lock dies with its process: a killed run leaves none
                fcntl = importlib.import_module("fcntl")
                fcntl.lockf(run.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print(os.getpid(), file=run.lock, flush=True)
    except OSError as e:
        if run.lock is not None and e.errno in (errno.EACCES, errno.EAGAIN):
            fix = "let it finish (or stop it), or pass another --run-dir"
            fail(f"--run-dir {args.run_dir!r} is in use by another run; {fix}")
        fix = "pass one this user can write, on a disk with space"
        fail(f"cannot write to --run-dir {args.run_dir!r} ({e.strerror}); {fix}")
    signal.signal(signal.SIGTERM, functools.partial(stop_signal, run))
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # `&` in a script: ignored
        signal.signal(signal.SIGINT, functools.partial(stop_signal, run))
    run.excepthook = threading.excepthook
    if RANK > 0:
        return None, run
    resumed = f", resumed from {args.resume} at iteration {ckpt['iteration']}" if ckpt else ""
    print(f"run dir {args.run_dir}{resumed}")
    sizes = f"batch {args.batch_size}, minibatch {args.minibatch_size}"
    sizes += f", {plural(args.num_iterations, 'iteration')}, {device}"
    if WORLD_SIZE > 1:
        sizes += f", {WORLD_SIZE} processes of {args.num_envs // WORLD_SIZE} envs"
    print(sizes)
    if args.track:
        wandb = importlib.import_module("wandb")
        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
        )
    # a full disk kills TensorBoard's thread: quietly here, the next write says it in one line
    threading.excepthook = functools.partial(quiet_writer_thread, run.excepthook)
    # a resumed run logs on in its directory: TensorBoard hides what came after the checkpoint
    purge_step = ckpt["global_step"] + 1 if ckpt else None
    if ckpt is None and glob.glob(f"{glob.escape(args.run_dir)}/events.out.tfevents.*"):
        purge_step = 0  # --resume auto restarting before a checkpoint: all its dead run logged
    writer = SummaryWriter(args.run_dir, purge_step=purge_step)
    table = "\n".join(f"|{key}|{value}|" for key, value in vars(args).items())
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + table)
    return writer, run


def quiet_writer_thread(excepthook: Callable, hook):
    if not type(hook.thread).__module__.startswith("tensorboard."):
        excepthook(hook)


def stop_signal(run, signum, frame):
    """Stop after this iteration; a second Ctrl-C stops now, a second SIGTERM kills."""
    if signum == signal.SIGINT and run.signals:
        raise KeyboardInterrupt
    run.signals.append(signum)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def gather(obj) -> Optional[list]:
    """Every process's obj in rank order, on rank 0 (None elsewhere)."""
    if not dist.is_initialized():
        return [obj]
    objs = [None] * WORLD_SIZE if RANK == 0 else None
    dist.gather_object(obj, objs)
    return objs


def ended_episodes(infos: dict, global_step: int) -> list:
    """(global_step, return, length) of each episode that ended in this step (SAME_STEP mode)."""
    if "final_info" not in infos or "episode" not in infos["final_info"]:
        return []
    episodes = infos["final_info"]["episode"]
    ended = np.flatnonzero(infos["final_info"]["_episode"])
    return [(global_step, float(episodes["r"][i]), int(episodes["l"][i])) for i in ended]


def log_episodes(writer: Optional[SummaryWriter], finished: list) -> list:
    """Every process's `finished` episodes to TensorBoard, in order; returns their returns."""
    everywhere = gather(finished.copy())
    finished.clear()
    if writer is None:
        return []
    episodes = sorted(sum(everywhere, []), key=lambda episode: episode[0])
    for episode_step, episode_return, episode_length in episodes:
        writer.add_scalar("charts/episodic_return", episode_return, episode_step)
        writer.add_scalar("charts/episodic_length", episode_length, episode_step)
    return [episode_return for _, episode_return, _ in episodes]


def means(totals: dict, count: int) -> dict:
    if count == 0:
        return {}
    values = all_mean(torch.stack(list(totals.values())) / count)
    return dict(zip(totals, values.tolist(), strict=True))


def log_iteration(
    args: Args, run, writer, optimizer, stats: dict, finished: list, step: int, i: int
):
    """Every process's episodes; on rank 0 the iteration's charts/ and losses/, and its progress."""
    run.recent_returns.extend(log_episodes(writer, finished))
    if writer is None:
        return
    sps = int((step - run.first_step) / (time.time() - run.start_time))
    writer.add_scalar("charts/learning_rate", float(optimizer.param_groups[0]["lr"]), step)
    for name, value in stats.items():
        if name not in ("loss", "grad_norm"):  # CleanRL's tags; these name a divergence
            writer.add_scalar(f"losses/{name}", value, step)
    writer.add_scalar("charts/SPS", sps, step)
    recent = "n/a"
    if run.recent_returns:
        episodes = plural(len(run.recent_returns), "episode")
        recent = f"{np.mean(run.recent_returns):.2f} ({episodes})"
    eta = (args.num_iterations - i) * args.batch_size / max(sps, 1)
    eta = f"{eta:.0f} s" if eta < 60 else f"{eta / 60:.1f} min"
    print(f"iter {i}/{args.num_iterations} step {step} SPS {sps} return {recent} ETA {eta}")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def divergence_error(args: Args, run, stats: dict, iteration: int) -> str:
    loss = stats["loss"]
    error = f"the loss became {loss} (gradient norm {stats['grad_norm']}) at iteration {iteration}"
    if run.saved is None:
        return error
    return f"{error}; {args.run_dir}/{args.exp_name}.pt keeps iteration {run.saved}"


def end_of_iteration(args: Args, run, agent, optimizer, envs, step: int, i: int, carry) -> bool:
    """Save (--save-model) when due, at the end, or at a stop signal; True at a stop signal."""
    signum = run.signals[0] if run.signals else 0
    save_due = time.time() - run.saved_at >= 60 * args.save_every
    if dist.is_initialized():  # every process stops and saves where any one does
        due = torch.tensor([signum, save_due])
        dist.all_reduce(due, op=dist.ReduceOp.MAX)  # a CPU tensor: gloo, no device sync
        signum, save_due = due.tolist()
    last = i == args.num_iterations
    saved = f", saved to {args.run_dir}/{args.exp_name}.pt" if args.save_model else ""
    if args.save_model and (signum or save_due or last):
        save_checkpoint(args, run, agent, optimizer, envs, step, i, carry)
        run.saved_at = time.time()
    if RANK == 0 and (signum or last):
        end = f"stopped by {signal.Signals(signum).name}" if signum else "finished"
        print(f"{end} after iteration {i}{saved}")
    return signum != 0


def stop_reason(args: Args, run, exception: BaseException) -> Optional[str]:
    """A failed write's error; none for a second Ctrl-C (its exit status says it)."""
    if isinstance(exception, KeyboardInterrupt):
        if RANK == 0:
            kept = f"; the checkpoint keeps iteration {run.saved}" if run.saved else ""
            print(f"interrupted mid-iteration{kept}")
        return None
    path = f"{args.run_dir}/{args.exp_name}.pt"
    then = f"--resume {path} continues after iteration {run.saved}" if run.saved else "run again"
    where = exception.filename or args.run_dir
    return f"{where!r}: {exception.strerror}; free space there, or make it writable; then {then}"


def close_run(args: Args, run, writer, envs, finished: list, error: Optional[str]):
    """Close everything; exit 0 only for a finished run (a stop signal: 128 + its number)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    envs.close()
    try:
        log_episodes(writer, finished)
        if writer is not None:
            writer.close()
    except OSError as e:  # the log of a full or read-only disk: as far as it got
        error = error or stop_reason(args, run, e)
    threading.excepthook = run.excepthook
    if writer is not None and args.track:
        importlib.import_module("wandb").finish()
    if run.lock is not None:
        run.lock.close()
    if dist.is_initialized():
        dist.barrier()  # none exits before rank 0 has saved and closed (torchrun stops the rest)
    if error is not None:
        fail(error)
    if dist.is_initialized():
        dist.destroy_process_group()
    if run.signals:
        raise SystemExit(128 + run.signals[0])
    if writer is not None and args.upload_model:  # rank 0, the group gone: none waits on it
        upload(args)


def upload(args: Args):
    """--upload-model: {run_dir}/hub (model file, evaluation, log, card) pushed to the Hub."""
    name = f"{args.env_id.replace('/', '-')}-{args.exp_name}-seed{args.seed}"
    repo_id = f"{args.hf_entity}/{name}" if args.hf_entity else name  # else the login's namespace
    model = f"{args.run_dir}/{args.exp_name}.cleanrl_model"
    command = [sys.executable, __file__, "--eval-checkpoint", model, "--seed", str(args.seed)]
    command += ["--eval-episodes", str(args.eval_episodes)]
    command += ["--capture-video"] if args.capture_video else []
    command += [] if args.cuda else ["--no-cuda"]
    torchrun = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    alone = {k: v for k, v in os.environ.items() if k not in torchrun}
    print(f"evaluating {model} for the Hub: {' '.join(command[1:])}")
    played = subprocess.run(command, capture_output=True, text=True, env=alone)
    summary = [line for line in played.stdout.splitlines() if line.startswith("eval: ")]
    if played.returncode or not summary:
        last_line = (played.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"the evaluation for --upload-model failed: {last_line}")
    folder = f"{args.run_dir}/hub"
    os.makedirs(folder, exist_ok=True)
    shutil.copy(model, folder)
    for events in glob.glob(f"{glob.escape(args.run_dir)}/events.out.tfevents.*"):
        shutil.copy(events, folder)
    videos = f"videos/{os.path.basename(args.run_dir)}-eval"
    if args.capture_video and os.path.isdir(videos):
        shutil.copytree(videos, f"{folder}/videos", dirs_exist_ok=True)
    card = ["---", f"tags: [reinforcement-learning, ppo, {args.env_id}]", "---"]
    card += [f"# PPO on {args.env_id}: `{SCRIPT}`, seed {args.seed}", ""]
    evaluates = f"`python {SCRIPT} --eval-checkpoint {args.exp_name}.cleanrl_model` evaluates it"
    loads = "`torch.load(path, weights_only=True)` loads it"
    card += [summary[0], "", f"{evaluates} ({loads}).", ""]
    card += ["| setting | value |", "|-|-|", *[f"| {k} | {v} |" for k, v in vars(args).items()]]
    with open(f"{folder}/README.md", "w") as f:
        print("\n".join(card), file=f)
    hub = importlib.import_module("huggingface_hub")
    try:
        repo_id = hub.HfApi().create_repo(repo_id, exist_ok=True).repo_id  # with its namespace
        hub.HfApi().upload_folder(repo_id=repo_id, folder_path=folder)
    except Exception as e:  # no network, no login, no permission
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        again = f"the same command with --resume {args.run_dir} pushes it"
        fail(f"the upload to {repo_id} failed ({why}); {folder} holds what it would push; {again}")
    print(f"uploaded to https://huggingface.co/{repo_id}")


def all_mean(x: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        x = x.clone()
        dist.all_reduce(x)
        x /= WORLD_SIZE
    return x


def whole_mean_std(x: torch.Tensor) -> tuple:
    if not dist.is_initialized():
        return x.mean(), x.std()
    mean = all_mean(x.mean())
    count = x.numel() * WORLD_SIZE
    sum_of_squares = all_mean(((x - mean) ** 2).sum()) * WORLD_SIZE
    return mean, (sum_of_squares / (count - 1)).sqrt()


def average_gradients(agent: nn.Module):
    """Every gradient averaged over torchrun's processes, in one collective: one step for all."""
    if dist.is_initialized():
        grads = [p.grad for p in agent.parameters()]
        flat = torch.cat([g.flatten() for g in grads])
        means = all_mean(flat).split([g.numel() for g in grads])
        for grad, mean in zip(grads, means, strict=True):
            grad.copy_(mean.view_as(grad))


def make_optimizer(args: Args, agent: nn.Module, device: torch.device) -> optim.Optimizer:
    """Adam (eps 1e-5, as ppo2); --cuda-graphs: fused, capturable, its learning rate a tensor."""
    graphs = args.cuda_graphs and device.type == "cuda"
    if args.cuda_graphs and not graphs:
        notice("--cuda-graphs needs CUDA; on the CPU everything runs eagerly")
    if device.type == "cuda" and not (graphs or args.target_kl or dist.is_initialized()):
        notice("eager CUDA ran 1.7-4.0x slower than --cuda-graphs on an H200")
    if not graphs:
        return optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, foreach=True)
    lr = torch.tensor(args.learning_rate, device=device)
    return optim.Adam(agent.parameters(), lr=lr, eps=1e-5, fused=True, capturable=True)


def cuda_graph(args: Args, device: torch.device, fn: Callable) -> Callable:
    return CudaGraph(fn) if args.cuda_graphs and device.type == "cuda" else fn


def set_learning_rate(optimizer: optim.Optimizer, lr: float):
    """The learning rate of the next steps: in place where a recorded step reads a tensor."""
    if isinstance(optimizer.param_groups[0]["lr"], torch.Tensor):
        optimizer.param_groups[0]["lr"].fill_(lr)
    else:
        optimizer.param_groups[0]["lr"] = lr


def load_optimizer(optimizer: optim.Optimizer, saved: dict):
    """A saved Adam state, the optimizer keeping its own options and learning rate's place."""
    mine = {key: optimizer.param_groups[0][key] for key in ("foreach", "fused", "capturable", "lr")}
    groups = [{**group, **mine} for group in saved["param_groups"]]
    optimizer.load_state_dict({**saved, "param_groups": groups})
    optimizer.param_groups[0]["lr"] = mine["lr"]  # the very tensor: load_state_dict copied it
    set_learning_rate(optimizer, float(saved["param_groups"][0]["lr"]))


def walk(fn: Callable, item, *like):
    """fn(tensor, *its counterparts in like) for each tensor in nested tuples and dicts."""
    if isinstance(item, dict):
        return {key: walk(fn, item[key], *(other[key] for other in like)) for key in item}
    if isinstance(item, tuple):
        return tuple(walk(fn, *parts) for parts in zip(item, *like, strict=True))
    return fn(item, *like) if isinstance(item, torch.Tensor) else item


class CudaGraph:
    """fn(*args) recorded once in a CUDA graph, then replayed on each call's tensors copied in:
    one launch, not one per kernel. Outputs are overwritten by the next call; fn may not branch on
    a tensor's value."""

    def __init__(self, fn: Callable, warmup: int = 3):
        self.fn = fn
        self.warmup = warmup
        self.graph = None

    def __call__(self, *args):
        if self.warmup > 0:  # eager calls on a side stream first, as torch's docs ask
            self.warmup -= 1
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                out = self.fn(*args)
            torch.cuda.current_stream().wait_stream(stream)
            return out
        if self.graph is None:
            self.inputs = walk(torch.clone, args)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = self.fn(*self.inputs)
        walk(torch.Tensor.copy_, self.inputs, args)
        self.graph.replay()
        return self.outputs


if __name__ == "__main__":
    # ARGUMENTS AND START-UP
    args = tyro.cli(Args)
    torch.set_num_threads(1)  # small networks: one thread is the fastest
    # checks, torchrun; --resume and --eval-checkpoint: the checkpoint's settings
    rank, world_size, device, ckpt = start_up(args)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    # this process's share (under torchrun): sizes without `args.`
    num_envs = args.num_envs // world_size
    batch_size = args.batch_size // world_size

    # SEEDING
    random.seed(args.seed + rank)  # rank 0's streams are a plain run's
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # ENVS
    envs = make_vector_env(args, 1 if args.eval_checkpoint else num_envs, rank)

    # AGENT AND OPTIMIZER
    agent = Agent(envs, args).to(device)
    if args.eval_checkpoint is not None:
        evaluate(args, agent, envs, ckpt, device)  # plays the saved agent instead, and exits
    optimizer = make_optimizer(args, agent, device)  # Adam, eps 1e-5
    # --cuda-graphs on CUDA: each recorded once, then replayed (outputs overwritten by the next)
    get_action_and_value = cuda_graph(args, device, agent.get_action_and_value)
    update_minibatch = cuda_graph(args, device, update_minibatch)

    # STORAGE
    # dones[t] = 1 where obs[t] is the first observation of a new episode (step t-1 ended one).
    # rewards and dones stay on the host, where the envs put them
    storage_shape = (args.num_steps, num_envs)
    pinned = device.type == "cuda"
    obs_shape = envs.single_observation_space.shape
    obs = torch.zeros(storage_shape + obs_shape, device=device)  # (num_steps, num_envs, *obs_shape)
    actions = torch.zeros(storage_shape, dtype=torch.long, device=device)  # (num_steps, num_envs)
    logprobs = torch.zeros(storage_shape, device=device)  # (num_steps, num_envs)
    rewards = torch.zeros(storage_shape, pin_memory=pinned)  # (num_steps, num_envs)
    dones = torch.zeros(storage_shape, pin_memory=pinned)  # (num_steps, num_envs)
    values = torch.zeros(storage_shape, device=device)  # (num_steps, num_envs)

    # env i is seeded seed + i: rank r's envs take the seeds after those of ranks below r
    next_obs, _ = envs.reset(seed=args.seed + rank * num_envs)
    envs.action_space.seed(args.seed + rank)
    next_obs = torch.as_tensor(next_obs, dtype=obs.dtype, device=device)  # (num_envs, *obs_shape)
    next_done = torch.zeros(num_envs)  # (num_envs,), on the host
    next_rnn_state = agent.initial_state(num_envs, device)
    # what one iteration hands the next (--resume: the checkpoint's)
    carry = dict(next_obs=next_obs, next_done=next_done, next_rnn_state=next_rnn_state)
    global_step, start_iteration, carry = restore(args, ckpt, agent, optimizer, envs, carry)
    next_obs = carry["next_obs"]
    next_done = carry["next_done"]
    next_rnn_state = carry["next_rnn_state"]

    # LOGGING
    writer, run = start_run(args, device, ckpt)  # rank 0: --run-dir, TensorBoard (or None)
    finished = []  # (global_step, return, length) of this process's episodes to log
    error = None  # why the run stopped early
    try:
        for iteration in range(start_iteration, args.num_iterations + 1):
            # LEARNING-RATE ANNEALING
            if args.anneal_lr:  # in place: a recorded step reads the rate from a tensor
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                set_learning_rate(optimizer, frac * args.learning_rate)

            # ROLLOUT
            # copied: a CUDA graph's next call overwrites the state it returned
            initial_rnn_state = tuple(s.clone() for s in next_rnn_state)
            for step in range(0, args.num_steps):
                global_step += args.num_envs
                obs[step] = next_obs
                dones[step] = next_done
                with torch.inference_mode():
                    action, logprob, _, value, next_rnn_state = get_action_and_value(
                        next_obs, next_rnn_state, next_done.to(device)
                    )
                values[step] = value
                actions[step] = action
                logprobs[step] = logprob

                next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
                reward = reward * args.reward_scale
                reward = bootstrap_truncation(
                    args, agent, reward, terminations, truncations, infos, next_rnn_state
                )
                rewards[step] = torch.as_tensor(reward)
                next_obs = torch.as_tensor(next_obs, dtype=obs.dtype, device=device)
                next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
                finished.extend(ended_episodes(infos, global_step))

            # ADVANTAGES
            with torch.inference_mode():
                next_value = agent.get_value(next_obs, next_rnn_state, next_done.to(device))
            advantages, returns = compute_gae(
                rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda
            )

            # FLATTEN
            b_obs = obs.reshape((-1,) + obs_shape)  # (batch, *obs_shape)
            b_logprobs = logprobs.reshape(-1)  # (batch,)
            b_actions = actions.reshape((-1,) + envs.single_action_space.shape)  # (batch, *act)
            b_advantages = advantages.reshape(-1)  # (batch,)
            b_returns = returns.reshape(-1)  # (batch,)
            b_values = values.reshape(-1)  # (batch,)
            b_dones = dones.to(device).reshape(-1)  # (batch,)

            # UPDATE
            batch = (b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values, b_dones)
            # minibatches of whole env sequences
            envsperbatch = num_envs // args.num_minibatches
            envinds = np.arange(num_envs)
            flatinds = torch.arange(batch_size, device=device).reshape(args.num_steps, num_envs)
            totals = {}  # each statistic, summed over the update's steps
            num_updates = 0
            for _epoch in range(args.update_epochs):
                np.random.shuffle(envinds)
                epoch_envinds = torch.as_tensor(envinds, device=device)
                for start in range(0, num_envs, envsperbatch):
                    mbenvinds = epoch_envinds[start : start + envsperbatch]
                    mb_inds = flatinds[:, mbenvinds].flatten()  # their sequences, time-major
                    mb_state = tuple(s[:, mbenvinds] for s in initial_rnn_state)
                    minibatch = (*(b[mb_inds] for b in batch), mb_state)
                    stats = update_minibatch(args, agent, optimizer, minibatch)
                    if stats is None:  # past --target-kl: the rest of the update is skipped
                        break
                    for name, value in stats.items():
                        totals[name] = totals.get(name, 0.0) + value
                    num_updates += 1
                if stats is None:
                    break

            # LOGGING
            stats = means(totals, num_updates)  # over the update's steps (and torchrun's processes)
            if not all(np.isfinite(value) for value in stats.values()):
                error = divergence_error(args, run, stats, iteration)
                break
            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
            stats["explained_variance"] = explained_var
            log_iteration(args, run, writer, optimizer, stats, finished, global_step, iteration)
            carry = dict(next_obs=next_obs, next_done=next_done, next_rnn_state=next_rnn_state)
            if end_of_iteration(args, run, agent, optimizer, envs, global_step, iteration, carry):
                break  # a stop signal (saved with --save-model)
    except (KeyboardInterrupt, OSError) as e:  # a second Ctrl-C, a failed write
        error = stop_reason(args, run, e)

    # CLOSE
    close_run(args, run, writer, envs, finished, error)  # exit status 0 only for a finished run
