"""Recurrent PPO (LSTM or GRU) for discrete actions and vector observations, on gymnasium 1.x.

    python ppo_rnn.py                               # CartPoleNoVel-v1: CartPole without its velocities
    python ppo_rnn.py --env-id AcrobotNoVel-v1 --seed 2 --save-model
    python ppo_rnn.py --env-id MemoryL30K2-v0 --cell gru   # recall one of 2 cues shown 30 steps earlier
    python ppo_rnn.py --eval-checkpoint runs/<run>/ppo_rnn.pt --eval-greedy
    python ppo.py --env-id ppo_rnn:CartPoleNoVel-v1 # the same masked task for the memoryless ppo.py

`diff ppo.py ppo_rnn.py` is what memory adds: a recurrent state (LSTM: h and c; GRU: h) zeroed at
episode starts and carried across rollouts; minibatches of whole env sequences, replayed from the
rollout's initial state; the memory tasks (velocity-masked classic control, a cue to recall).

Follows Schulman et al. 2017 (arXiv:1707.06347) and openai/baselines' ppo2 with every detail of
"The 32 Implementation Details of PPO" (Huang and Dossa, 2020), corrected for gymnasium 1.x: no
transition from an autoreset reaches the batch, and a time-limit truncation bootstraps
gamma * V(final_obs) instead of being treated as termination (`--no-bootstrap-truncation` restores
the old behaviour). `%run` in IPython leaves `agent`, the storage and `b_*` in the namespace.
Checkpoints are pickles (optimizer, RNG and env state): load only checkpoints you trust.

Read the research layer (down to `eval_action`) and `__main__`: the run-management layer between them
is the same in all four scripts and can be skipped on a first reading.
"""

import contextlib
import copy
import errno
import io
import os
import pickle
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical
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
    """if toggled, cuda will be used when available (CPU otherwise, with a notice)"""
    cuda_graphs: bool = False
    """on CUDA, record the rollout's policy forward and the update's minibatch step in CUDA graphs and replay them (no kernel launch overhead; fused Adam: other numbers than without)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """whether to save a checkpoint to `{run_dir}/{exp_name}.pt` (at the end, on Ctrl-C, SIGTERM or NaN)"""
    save_every: float = 10.0
    """with --save-model, also write the checkpoint every this many minutes of wall time (0: after every iteration)"""
    run_dir: Optional[str] = None
    """the run's directory, for its TensorBoard log and checkpoint (default: `runs/{run_name}`, new for every run)"""
    resume: Optional[str] = None
    """path of a checkpoint to continue training from, with the env and algorithm settings it was trained with; `auto`:
    the one in --run-dir if there is one (a restarted command continues its run), else start"""
    eval_checkpoint: Optional[str] = None
    """path of a checkpoint to evaluate instead of training"""
    eval_episodes: int = 10
    """the number of episodes to play with `--eval-checkpoint`"""
    eval_greedy: bool = False
    """if toggled, evaluation takes the most likely action instead of sampling"""

    env_id: str = "CartPoleNoVel-v1"
    """the id of the environment"""
    total_timesteps: int = 500000
    """total timesteps of the experiments"""
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
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 1
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """stop the update of an iteration before the first minibatch whose approx KL exceeds it"""
    bootstrap_truncation: bool = True
    """bootstrap gamma * V(final_obs) at time-limit truncations (off: treat them as termination)"""
    reward_scale: float = 0.1
    """rewards are multiplied by it for learning (logged returns are not): keeps the value loss from drowning the policy in the shared trunk"""
    cell: Literal["lstm", "gru"] = "lstm"
    """the recurrent cell: lstm (state h and c) or gru (state h alone: three gates instead of four, fewer parameters)"""
    forget_bias: float = 0.0
    """LSTM only: the forget gate's initial bias (0: all biases zero, as CleanRL; 3 carries a cue across 30 blank steps: docs/recurrent.md)"""

    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


class MaskVelocity(gym.ObservationWrapper):
    """Keep only the observation entries in `keep` (positions), hiding the velocities."""

    def __init__(self, env: gym.Env, keep: list):
        super().__init__(env)
        self.keep = np.array(keep)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=space.dtype)

    def observation(self, observation):
        return observation[self.keep]


def make_masked(env_id: str, keep: list, **kwargs) -> gym.Env:
    return MaskVelocity(gym.make(env_id, **kwargs), keep)


# partially observable tasks: positions only (CartPole's x and pole angle, Acrobot's cos/sin of both joints)
for masked_id, env_id, keep in [("CartPoleNoVel-v1", "CartPole-v1", [0, 2]), ("AcrobotNoVel-v1", "Acrobot-v1", [0, 1, 2, 3])]:
    gym.registry.pop(masked_id, None)  # a second %run registers its own classes, so that checkpoints pickle them
    gym.register(masked_id, entry_point=make_masked, kwargs={"env_id": env_id, "keep": keep})


class MemoryCue(gym.Env):
    """How far back can the policy remember? The first observation shows one of `num_cues` cues (one-hot), the next
    `length - 1` are blank, and the one after those asks (its last entry is 1): the action taken there earns +1 if it
    is the cue's index, -1 otherwise, and ends the episode, which so lasts length + 1 steps (its time limit). Every
    earlier action is ignored (reward 0). A memoryless policy sees the same question whatever the cue: mean return 0."""

    def __init__(self, length: int = 10, num_cues: int = 2):
        if length < 1 or num_cues < 2:
            raise ValueError(f"MemoryCue needs length >= 1 and num_cues >= 2, got {length} and {num_cues}")
        self.length, self.num_cues = length, num_cues
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
        self.cue, self.t = int(self.np_random.integers(self.num_cues)), 0
        return self.observe(), {}

    def step(self, action):
        asked = self.t == self.length
        self.t += 1
        reward = (1.0 if int(action) == self.cue else -1.0) if asked else 0.0
        return self.observe(), reward, asked, False, {}


# MemoryL{length}K{num_cues}-v0; gym.make("MemoryL10K2-v0", length=L, num_cues=k) for any other L and k
for length in (1, 3, 10, 30, 100, 300):
    for num_cues in (2, 4):
        gym.registry.pop(f"MemoryL{length}K{num_cues}-v0", None)
        gym.register(f"MemoryL{length}K{num_cues}-v0", entry_point=MemoryCue, kwargs={"length": length, "num_cues": num_cues})


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


def make_envs(args: Args, num_envs: int, run_name: str, rank: int) -> gym.vector.VectorEnv:
    """The vector env in SAME_STEP autoreset mode: an episode's last step returns the next episode's first observation
    and puts the real last one in infos["final_obs"], so every step is a real transition. The default NEXT_STEP mode
    would spend one step per episode on a reset whose action is ignored."""
    thunks = [make_env(args.env_id, i, args.capture_video and rank == 0, run_name) for i in range(num_envs)]
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def check_env(args: Args):
    """Fail early, before anything is written, if the env is unknown or not of this script's kind."""
    # what this script adds to check_args: its own coefficient, and minibatches of whole env sequences
    if not args.reward_scale > 0:
        fail(f"--reward-scale must be positive, got {args.reward_scale}")
    if args.forget_bias != 0 and args.cell != "lstm":
        fail(f"--forget-bias {args.forget_bias} is an LSTM setting and the {args.cell} has no forget gate; drop it or use --cell lstm")
    if args.num_envs % args.num_minibatches:
        fail(
            f"--num-envs {args.num_envs} is not divisible by --num-minibatches {args.num_minibatches} "
            "(a minibatch holds whole env sequences); pick a divisor of num_envs"
        )
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if (args.num_envs // world_size) % args.num_minibatches:
        fail(
            f"each of the {world_size} processes holds {args.num_envs // world_size} envs, not divisible by --num-minibatches {args.num_minibatches}"
        )
    env_id = args.env_id
    try:
        env = gym.make(env_id)
    except gym.error.Error as e:
        if "NoFrameskip" in env_id or env_id.startswith("ALE/"):
            fail(f"{env_id} is an Atari game; use ppo_atari.py for it")
        fail(f"unknown env id {env_id!r} ({e}); list the ids with `python -c 'import gymnasium; gymnasium.pprint_registry()'`")
    except ImportError as e:
        fail(f"the module of env id {env_id!r} does not import ({e.__cause__ or e}); check the name before ':' or install it")
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if isinstance(act_space, gym.spaces.Box):
        fail(f"{env_id} has continuous (Box) actions; use ppo_continuous_action.py for it")
    if not isinstance(act_space, gym.spaces.Discrete):
        fail(f"{env_id} has a {type(act_space).__name__} action space; {os.path.basename(__file__)} needs Discrete actions")
    if isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) in (2, 3):
        fail(f"{env_id} has image observations of shape {obs_space.shape}; use ppo_atari.py for images")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        fail(f"{env_id} observations are {obs_space}, not a flat Box; wrap the env in gymnasium.wrappers.FlattenObservation")


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
        if args.cell == "lstm":  # gates in the order input, forget, cell, output; one of the forget gate's two biases
            nn.init.constant_(self.rnn.bias_ih_l0[self.rnn.hidden_size : 2 * self.rnn.hidden_size], args.forget_bias)
        self.actor = layer_init(nn.Linear(128, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(128, 1), std=1.0)

    def initial_state(self, num_envs: int, device: torch.device) -> tuple:
        """The state of a new episode: (h, c) for an LSTM, (h,) for a GRU, each zeros of shape (1, num_envs, H)."""
        return (torch.zeros(1, num_envs, self.rnn.hidden_size, device=device),) * (2 if isinstance(self.rnn, nn.LSTM) else 1)

    def get_states(self, x: torch.Tensor, rnn_state: tuple, done: torch.Tensor):
        """Run the recurrent cell over time-major x of shape (T * B, *obs_shape) from rnn_state (each (1, B, H)),
        zeroing the state of env b before step t where done[t, b] = 1 (a new episode starts)."""
        batch_size = rnn_state[0].shape[1]
        hidden = self.network(x).reshape((-1, batch_size, self.rnn.input_size))  # (T, B, 64)
        done = done.reshape((-1, batch_size))  # (T, B)
        # one nn.LSTM/nn.GRU call per stretch with no episode start inside it: same result as stepping one step at a time,
        # but the replay of a 128-step sequence costs a few calls, not 128 (a CUDA graph, recorded once, steps one at a time)
        if done.is_cuda and torch.cuda.is_current_stream_capturing():
            starts = list(range(len(done) + 1))
        else:
            starts = [0] + (torch.nonzero(done[1:].any(dim=1)).flatten() + 1).tolist() + [len(done)]
        new_hidden = []
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            keep = (1.0 - done[begin]).view(1, -1, 1)
            rnn_state = tuple(keep * s for s in rnn_state)
            h, rnn_state = self.rnn(hidden[begin:end], rnn_state if len(rnn_state) == 2 else rnn_state[0])
            rnn_state = rnn_state if isinstance(rnn_state, tuple) else (rnn_state,)  # nn.GRU's state is one tensor
            new_hidden.append(h)
        return torch.cat(new_hidden).flatten(0, 1), rnn_state  # (T * B, H), ((1, B, H),) * (2 or 1)

    def get_value(self, x: torch.Tensor, rnn_state: tuple, done: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.get_states(x, rnn_state, done)
        return self.critic(hidden).squeeze(-1)  # (T * B,)

    def get_action_and_value(self, x: torch.Tensor, rnn_state: tuple, done: torch.Tensor, action: Optional[torch.Tensor] = None):
        hidden, rnn_state = self.get_states(x, rnn_state, done)
        logits = self.actor(hidden)  # (T * B, n_actions)
        probs = Categorical(logits=logits, validate_args=False)
        if action is None:
            action = probs.sample()
        # (T * B,) action, (T * B,) log-prob, (T * B,) entropy, (T * B,) value, the state after x
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden).squeeze(-1), rnn_state


def compute_gae(rewards, values, dones, next_value, next_done, gamma: float, gae_lambda: float):
    """GAE(gamma, lambda) over a (num_steps, num_envs) rollout; returns (advantages, returns).

    dones[t] = 1 when obs[t] is the first observation of a new episode (the step before ended one),
    so the trace is cut between t-1 and t. next_value/next_done belong to the observation after the
    rollout. Truncations arrive here as dones with gamma * V(final_obs) already in the reward.
    """
    nextnonterminal = 1.0 - torch.cat((dones[1:], next_done[None]))  # (num_steps, num_envs)
    nextvalues = torch.cat((values[1:], next_value[None]))
    deltas = rewards + gamma * nextvalues * nextnonterminal - values
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        advantages[t] = lastgaelam = deltas[t] + gamma * gae_lambda * nextnonterminal[t] * lastgaelam
    return advantages, advantages + values


def policy_loss(advantages: torch.Tensor, ratio: torch.Tensor, clip_coef: float) -> torch.Tensor:
    """The clipped surrogate, negated for minimization (Schulman et al. 2017, eq. 7)."""
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    return torch.max(pg_loss1, pg_loss2).mean()


def value_loss(newvalue: torch.Tensor, values: torch.Tensor, returns: torch.Tensor, clip_coef: Optional[float]) -> torch.Tensor:
    """0.5 * the mean squared error of the new values to the returns; with clip_coef (--clip-vloss, as baselines' ppo2),
    of each row the larger of that error and the one of the new value moved at most clip_coef from the rollout's."""
    v_loss_unclipped = (newvalue - returns) ** 2
    if clip_coef is None:
        return 0.5 * v_loss_unclipped.mean()
    v_clipped = values + torch.clamp(newvalue - values, -clip_coef, clip_coef)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()


STATS = ("policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac", "loss", "grad_norm")


def update_minibatch(args: Args, agent: Agent, optimizer: optim.Optimizer, minibatch: tuple) -> Optional[torch.Tensor]:
    """One gradient step on minibatch = (obs, logprobs, actions, advantages, returns, values, dones, state), whole sequences
    of some envs replayed from `state`, theirs at the rollout's start, with their dones; the rows mb_inds of the b_*
    tensors: the clipped surrogate, the value loss and the entropy bonus. Returns the step's statistics (STATS, in that
    order) in one tensor, or None, without a step, where the approximate KL has passed args.target_kl. A function of
    tensors and nothing else, so that --cuda-graphs can record it once and replay it."""
    mb_obs, mb_logprobs, mb_actions, mb_advantages, mb_returns, mb_values, mb_dones, mb_state = minibatch
    _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(mb_obs, mb_state, mb_dones, mb_actions)
    assert newlogprob.shape == newvalue.shape == mb_returns.shape  # (minibatch,): no broadcasting below
    logratio = newlogprob - mb_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl, approx_kl = all_mean(torch.stack(((-logratio).mean(), ((ratio - 1) - logratio).mean())))
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()
    if args.target_kl is not None and approx_kl > args.target_kl:
        return None  # no further minibatch or epoch

    if args.norm_adv:  # by the statistics of the whole minibatch, every process's share of it
        mb_mean, mb_std = whole_mean_std(mb_advantages)
        mb_advantages = (mb_advantages - mb_mean) / (mb_std + 1e-8)

    pg_loss = policy_loss(mb_advantages, ratio, args.clip_coef)
    v_loss = value_loss(newvalue, mb_values, mb_returns, args.clip_coef if args.clip_vloss else None)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

    optimizer.zero_grad()
    loss.backward()
    average_gradients(agent)
    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    optimizer.step()
    return torch.stack((pg_loss, v_loss, entropy_loss, old_approx_kl, approx_kl, clipfrac, loss, grad_norm)).detach()


def eval_action(agent: Agent, x: torch.Tensor, done: torch.Tensor, greedy: bool, memory=None) -> tuple:
    """The action an evaluation plays, the most likely one (greedy) or a sample, and what the policy remembers for the
    next step (ppo_rnn.py: the recurrent state, reset where done = 1; None for a memoryless policy)."""
    if memory is None:
        memory = agent.initial_state(len(x), x.device)
    hidden, memory = agent.get_states(x, memory, done)
    return (agent.actor(hidden).argmax(dim=1) if greedy else Categorical(logits=agent.actor(hidden)).sample()), memory


# ==================================================================================================================
# RUN MANAGEMENT: start-up checks and one-line errors, the checkpoint (save and restore side by side), evaluation,
# the optimizer and CUDA graphs, logging helpers, torchrun. Identical in all four scripts (tests/test_drift.py pins
# it), and no part of the algorithm: a first reading can skip to `if __name__ == "__main__":`, where each piece is
# called in one line.
# ==================================================================================================================

RUN_DIR_LOCK = []  # the open lock file of the run's directory (claim_run_dir), on rank 0
CHECKPOINT_FORMAT = 2  # raised whenever what a checkpoint holds changes; another format gets a one-line error
# the Args fields a resumed run may change (how it runs and is recorded); every other field must equal the checkpoint's
MAY_CHANGE_ON_RESUME = (
    *("exp_name", "seed", "torch_deterministic", "cuda", "track", "wandb_project_name", "wandb_entity", "capture_video"),
    *("save_model", "save_every", "run_dir", "resume", "eval_checkpoint", "eval_episodes", "eval_greedy", "env_threads", "env_groups"),
    *("batch_size", "minibatch_size", "num_iterations"),
)


def fail(message: str):
    """Stop with a one-line error instead of a traceback. Under torchrun every process stops and one says why: rank 0
    once the processes have met, before that the first process of each machine (init_distributed passes it on)."""
    says = os.environ.get("RANK" if dist.is_initialized() else "LOCAL_RANK", "0") == "0"
    if dist.is_initialized():
        dist.destroy_process_group()  # now, not during interpreter shutdown (see init_distributed)
    raise SystemExit(f"error: {message}" if says else 1)


def check_args(args: Args):
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes"):
        if getattr(args, name) <= 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("learning_rate", "clip_coef", "max_grad_norm", "target_kl"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("ent_coef", "vf_coef", "save_every"):
        if getattr(args, name) is not None and not getattr(args, name) >= 0:
            fail(f"--{name.replace('_', '-')} must be non-negative, got {getattr(args, name)}")
    for name in ("gamma", "gae_lambda"):
        if not 0 <= getattr(args, name) <= 1:
            fail(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    if args.capture_video:
        try:
            import moviepy  # noqa: F401  (gymnasium's RecordVideo writes with it)
        except ImportError:
            fail("--capture-video writes videos with moviepy, which does not import here; pip install moviepy, or drop --capture-video")
    check_env(args)  # the env's kind, and what this script's domain adds to these checks
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        fail(
            f"num_envs * num_steps = {batch_size} is not divisible by --num-minibatches {args.num_minibatches}; "
            f"pick a divisor of {batch_size}"
        )
    if args.norm_adv and batch_size // args.num_minibatches < 2:
        fail("a minibatch of 1 sample cannot normalize advantages; use fewer --num-minibatches or --no-norm-adv")
    if args.eval_checkpoint is None and args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one batch (num_envs * num_steps = {batch_size})")
    world_size = int(os.environ.get("WORLD_SIZE", 1))  # processes under torchrun, each stepping an equal share of the envs
    if args.num_envs % world_size:
        fail(f"--num-envs {args.num_envs} is not divisible by the {world_size} processes; pick a multiple of {world_size}")
    if (batch_size // world_size) % args.num_minibatches:
        fail(
            f"each of the {world_size} processes holds {batch_size // world_size} samples, not divisible by --num-minibatches {args.num_minibatches}"
        )
    if args.cuda_graphs and (args.target_kl is not None or world_size > 1):
        fail("--cuda-graphs records the whole minibatch step: it cannot stop at --target-kl or average over torchrun's processes; drop one")


def start_up(args: Args, run_name: str) -> tuple:
    """Run every check that can stop the run before the processes meet (under torchrun, init_distributed then stops them
    all with the reason if one failed); rank 0 alone reads --resume's checkpoint, and every process gets it. With
    --eval-checkpoint, evaluate and exit. Returns (rank, world_size, device, the checkpoint to resume or None)."""
    ckpt, error = None, None
    try:
        if args.resume == "auto":  # a restart of the same command line: its checkpoint, where it wrote one
            if args.run_dir is None or not args.save_model:
                fail("--resume auto continues the checkpoint in --run-dir: pass --run-dir DIR (the same at every restart) and --save-model")
            found = os.path.exists(f"{args.run_dir}/{args.exp_name}.pt")  # a directory there: load_checkpoint says so
            args.resume = f"{args.run_dir}/{args.exp_name}.pt" if found else None
        check_args(args)
        if args.resume is not None and args.eval_checkpoint is None and os.environ.get("RANK", "0") == "0":
            ckpt = load_checkpoint(args.resume, args)
            defaults = asdict(Args())
            for name, value in asdict(args).items():  # a resumed run is the same run
                trained = ckpt["args"].get(name, defaults[name])  # a field added to Args after the save: its default
                if name not in MAY_CHANGE_ON_RESUME and trained != value:
                    fail(f"{args.resume!r} was trained with {name}={trained!r}, not {value!r}; pass the same value")
            processes = int(os.environ.get("WORLD_SIZE", 1))  # torchrun's count; init_distributed comes below
            if len(ckpt["ranks"]) != processes:
                fail(f"{args.resume!r} was saved by {len(ckpt['ranks'])} process(es), not {processes}; resume it with as many")
            probe = make_envs(Args(**{**asdict(args), "capture_video": False}), 1, run_name, rank=0)
            load_agent(Agent(probe, args), ckpt, args.resume)  # parameters that do not fit: said before anything is written
            probe.close()
    except SystemExit as stop:
        error = stop.code
    rank, world_size, device, ckpt = init_distributed(args, error, ckpt)
    args.run_dir = args.run_dir or f"runs/{run_name}"  # after the processes compared their arguments: run_name has the time
    if args.eval_checkpoint is None:
        claim_run_dir(args, rank)  # created, locked, written to: before the first env step
    if args.eval_checkpoint is not None:
        if rank == 0:  # one process evaluates
            returns = evaluate(args, f"{run_name}-eval", device)
            greedy = "greedy" if args.eval_greedy else "sampled"
            print(f"eval: {len(returns)} episodes ({greedy}), return {np.mean(returns):.2f} ± {np.std(returns):.2f}")
        raise SystemExit(0)
    return rank, world_size, device, ckpt


def claim_run_dir(args: Args, rank: int):
    """Create the run's directory and make it this run's, before the first env step: a lock that another process opening
    the same directory gets a one-line error from (an fcntl lock, which dies with its process: a killed run leaves
    nothing locked) and a first small write, so that a read-only or full disk is said now, not after the first
    iterations. Rank 0 writes the directory for every process; under torchrun every process stops with its reason."""
    reason = lock_run_dir(args) if rank == 0 else None
    if dist.is_initialized():
        shared = [reason]
        dist.broadcast_object_list(shared, src=0)
        reason = shared[0]
    if reason is not None:
        fail(reason)


def lock_run_dir(args: Args) -> Optional[str]:
    """claim_run_dir's work on rank 0: None, holding the lock in RUN_DIR_LOCK, or why the directory cannot be this run's."""
    run_dir, model_path = args.run_dir, f"{args.run_dir}/{args.exp_name}.pt"
    cannot = "pass a directory this user can write, on a disk with free space"
    if args.save_model and os.path.isdir(model_path):
        return f"{model_path!r}, where --save-model writes the checkpoint, is a directory; move it away, or pass another --exp-name"
    try:
        os.makedirs(run_dir, exist_ok=True)
        lock = open(f"{run_dir}/.lock", "a+")
    except OSError as e:
        return f"cannot write to --run-dir {run_dir!r} ({e.strerror}); {cannot}"
    try:
        import fcntl  # POSIX; elsewhere (Windows) the directory is not locked

        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        pass
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        return f"--run-dir {run_dir!r} is in use by the run of process {holder}; let it finish (or stop it), or pass another --run-dir"
    try:
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        os.fsync(lock.fileno())
    except OSError as e:
        lock.close()
        return f"cannot write to --run-dir {run_dir!r} ({e.strerror}); {cannot}"
    RUN_DIR_LOCK[:] = [lock]  # held until close_run (or the process ends)
    return None


def load_checkpoint(path: str, args: Args) -> dict:
    """Load a checkpoint of this script, this format and this env, or fail with the reason."""
    if os.path.isdir(path):
        fail(f"checkpoint {path!r} is a directory, not a file saved with --save-model; pass the file's path, or move the directory away")
    if not os.path.isfile(path):
        fail(f"checkpoint {path!r} does not exist; pass the path of a file saved with --save-model")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        fail(f"checkpoint {path!r} could not be read ({type(e).__name__}); it is corrupt or not a checkpoint")
    script = os.path.basename(__file__)
    if not isinstance(ckpt, dict) or not {"script", "args", "agent"} <= ckpt.keys():
        fail(f"{path!r} is not a checkpoint saved by {script} --save-model")
    if ckpt["script"] != script:
        fail(f"{path!r} was saved by {ckpt['script']}, not {script}; run it with {ckpt['script']}")
    if ckpt.get("format", 1) != CHECKPOINT_FORMAT:
        fail(
            f"{path!r} has checkpoint format {ckpt.get('format', 1)}, this {script} reads format {CHECKPOINT_FORMAT}; "
            "use the version of the script that saved it"
        )
    missing = [key for key in ("optimizer", "global_step", "iteration", "ranks") if key not in ckpt]
    if missing:
        fail(f"{path!r} has no {', '.join(map(repr, missing))}: it is not a whole checkpoint of {script}; pass one saved with --save-model")
    if ckpt["args"]["env_id"] != args.env_id:
        fail(f"{path!r} was trained on {ckpt['args']['env_id']}; pass --env-id {ckpt['args']['env_id']}")
    return ckpt


def load_agent(agent, ckpt: dict, path: str):
    """The checkpoint's parameters into `agent`, or a one-line error when they do not fit its architecture."""
    mine, saved = agent.state_dict(), ckpt["agent"]
    differ = sorted(k for k in mine.keys() | saved.keys() if k not in mine or k not in saved or mine[k].shape != saved[k].shape)
    if differ:  # missing, unexpected or differently shaped parameters
        fail(
            f"{path!r} does not fit this Agent (parameters {', '.join(differ[:2])}{', ...' if len(differ) > 2 else ''} differ in name or "
            f"shape); it was saved by another version of {os.path.basename(__file__)} or an edited Agent"
        )
    agent.load_state_dict(saved)


def moved(carry: tuple, to) -> tuple:
    """Copies of carry's tensors (nested in tuples) on the device `to`, or each on the device of its counterpart in `to`,
    a carry of the same shape (a script may keep part of it on the host)."""
    return tuple(
        moved(x, y) if isinstance(x, tuple) else x.to(getattr(y, "device", y), copy=True)
        for x, y in zip(carry, to if isinstance(to, tuple) else [to] * len(carry), strict=True)
    )


def make_checkpoint(args: Args, agent, optimizer, envs, global_step: int, iteration: int, carry: tuple) -> dict:
    """Everything needed to continue after `iteration`, copied so that training can go on: carry is what the loop takes
    from one iteration to the next (next_obs, next_done, ...). What differs between processes under torchrun (envs,
    carry, RNGs) is gathered from every one into "ranks" on rank 0."""
    try:
        env_state = pickle.dumps(envs.envs)  # the sub-envs mid-episode, with their RNGs and wrappers
    except Exception:
        env_state = None  # video recorders and C++ vector envs do not pickle: resume then starts new episodes
    own = {
        "envs": env_state,
        "carry": moved(carry, torch.device("cpu")),
        "normalization": copy.deepcopy(getattr(envs, "normalization", None)),  # running statistics, where the envs keep some
        "rng": {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if carry[0].is_cuda else None,
        },
    }
    return {
        "format": CHECKPOINT_FORMAT,
        "script": os.path.basename(__file__),
        "args": asdict(args),
        "agent": copy.deepcopy(agent.state_dict()),
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "global_step": global_step,
        "iteration": iteration,
        "ranks": gather(own),  # one entry per process
    }


def restore(args: Args, ckpt: Optional[dict], rank: int, agent, optimizer, envs, carry: tuple) -> tuple:
    """Continue where make_checkpoint left off: agent, optimizer, this process's envs mid-episode with the carry, its
    RNGs; returns (global_step, first iteration, carry). Without a checkpoint: (0, 1, the fresh carry)."""
    if ckpt is None:
        return 0, 1, carry
    own = ckpt["ranks"][rank]  # this process's envs, carry and RNGs
    load_agent(agent, ckpt, args.resume)
    load_optimizer(optimizer, ckpt["optimizer"])
    if own["normalization"] is not None:
        envs.normalization = own["normalization"]
    if own["envs"] is not None:
        envs.envs[:] = pickle.loads(own["envs"])
        carry = moved(own["carry"], carry)
    else:  # new episodes, seen through the checkpoint's normalization statistics, from seeds this run has not played
        next_obs, _ = envs.reset(seed=args.seed + ckpt["global_step"] + rank * envs.num_envs)
        carry = (torch.as_tensor(next_obs, dtype=carry[0].dtype, device=carry[0].device), *carry[1:])
        if rank == 0:
            print("notice: the checkpoint holds no env state (C++ vector envs and video recorders do not pickle); new episodes start here")
    random.setstate(own["rng"]["python"])
    np.random.set_state(own["rng"]["numpy"])
    torch.set_rng_state(own["rng"]["torch"])
    if carry[0].is_cuda and own["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(own["rng"]["cuda"])
    if rank == 0:
        print(f"resumed from {args.resume} at iteration {ckpt['iteration']} (step {ckpt['global_step']})")
    return ckpt["global_step"], ckpt["iteration"] + 1, carry


def save_checkpoint(checkpoint: dict, path: str, rank: int, final: bool = True) -> float:
    """Write the checkpoint atomically (a whole file under a temporary name, then renamed over the last one, so that
    a kill or a full disk mid-write leaves the previous checkpoint); rank 0 holds every process's part. Returns when it
    was written; a failed write raises OSError, which the run reports in one line (write_error)."""
    if rank == 0:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)  # in memory first: a failed write below is the disk's, with its reason
        try:
            with open(f"{path}.tmp", "wb") as f:
                f.write(buffer.getbuffer())
                f.flush()
                os.fsync(f.fileno())  # on the disk before it replaces the last one
            os.replace(f"{path}.tmp", path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(f"{path}.tmp")  # no partial file left to fill the disk
            raise OSError(
                e.errno, f"the checkpoint of iteration {checkpoint['iteration']} could not be written ({e.strerror})", path
            ) from None
        if final:
            print(f"checkpoint of iteration {checkpoint['iteration']} saved to {path}")
    return time.time()


def evaluate(args: Args, run_name: str, device: torch.device) -> list:
    """Play `args.eval_episodes` episodes with a saved agent, in envs made as in its training (frozen normalization
    statistics too), and return their returns."""
    ckpt = load_checkpoint(args.eval_checkpoint, args)
    trained = Args(**{**ckpt["args"], "capture_video": args.capture_video, "eval_checkpoint": args.eval_checkpoint})
    envs = make_envs(trained, 1, run_name, rank=0)
    if ckpt["ranks"][0]["normalization"] is not None:
        envs.normalization = ckpt["ranks"][0]["normalization"]
    agent = Agent(envs, trained).to(device)
    load_agent(agent, ckpt, args.eval_checkpoint)
    torch.manual_seed(args.seed)  # sampled actions: the same seed plays the same episodes
    obs, _ = envs.reset(seed=args.seed)
    done, memory = torch.zeros(1, device=device), None
    episodic_returns = []
    while len(episodic_returns) < args.eval_episodes:
        with torch.inference_mode():
            x = torch.as_tensor(obs, dtype=torch.uint8 if obs.dtype == np.uint8 else torch.float32, device=device)
            action, memory = eval_action(agent, x, done, args.eval_greedy, memory)
        obs, _, terminations, truncations, infos = envs.step(action.cpu().numpy())
        done = torch.as_tensor(terminations | truncations, dtype=torch.float32, device=device)
        for _, episode_return, _ in ended_episodes(infos, 0):
            episodic_returns.append(episode_return)
            print(f"eval episode {len(episodic_returns)}: return {episode_return:.2f}")
    envs.close()
    return episodic_returns


def init_distributed(args: Args, error, ckpt: Optional[dict]) -> tuple:
    """Under torchrun, join the process group (NCCL between GPUs, one per local rank; gloo on CPUs) and
    return (rank, world_size, device, ckpt); a plain `python` run is rank 0 of 1 and has no process group.
    error: the exit of a start-up check that failed in this process (None if all passed); if any process has
    one, every process stops with its reason. ckpt: the checkpoint to resume, read by rank 0 alone and sent
    to every process (so that on several machines the file need only be on rank 0's)."""
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world_size == 1 and error is not None:
        raise SystemExit(error)
    cuda = args.cuda and torch.cuda.is_available()
    if args.cuda and not cuda and rank == 0:
        print("notice: CUDA is not available, running on CPU")
    if world_size == 1:
        return 0, 1, torch.device("cuda" if cuda else "cpu"), ckpt
    local_rank, local_size = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if cuda and local_size > torch.cuda.device_count():
        fail(
            f"{local_size} processes on this machine for {torch.cuda.device_count()} GPU(s); pass --nproc-per-node {torch.cuda.device_count()}, or --no-cuda"
        )
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # Import torch._dynamo (torch.optim loads it lazily) before the group exists: modules it loads capture the default group
    # as a default argument, which would keep it and its threads past destroy_process_group (and abort at exit).
    import torch._dynamo as _dynamo  # noqa: F401  (as a new name: `import torch._dynamo` would make `torch` a local)

    # torchrun --max-restarts keeps its store across restarts: each attempt's keys go under a prefix of their own, or the
    # processes of a restart could read the addresses of the dead ones
    # (no name holds the store: a start-up error's traceback would keep it, and its threads, past the group's end)
    attempt = f"attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)}"
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    dist.init_process_group(backend, store=dist.PrefixStore(attempt, next(dist.rendezvous("env://"))[0]), rank=rank, world_size=world_size)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, (asdict(args), error))
    for name, value in everyone[0][0].items():
        if any(other[name] != value for other, _ in everyone):
            values = ", ".join(sorted({repr(other[name]) for other, _ in everyone}))
            fail(f"the processes were started with different arguments ({name}: {values}); give them one command line")
    reasons = [(r, e) for r, (_, e) in enumerate(everyone) if isinstance(e, str)]  # machines' first processes carry them
    if reasons:
        r, reason = reasons[0]
        fail(reason.removeprefix("error: ") + (f" (on rank {r})" if r > 0 else ""))
    if any(e is not None for _, e in everyone):
        fail("a process stopped at start-up; its machine's first process says why")
    if args.resume is not None and args.eval_checkpoint is None:
        shared = [ckpt]
        dist.broadcast_object_list(shared, src=0)
        ckpt = shared[0]
    return rank, world_size, device, ckpt


def broadcast_parameters(agent: nn.Module):
    """Under torchrun, every process starts from rank 0's initialization."""
    if dist.is_initialized():
        for param in agent.parameters():
            dist.broadcast(param.data, src=0)


def all_mean(x: torch.Tensor) -> torch.Tensor:
    """The mean of x over every process (x itself in a plain run)."""
    if dist.is_initialized():
        x = x.clone()
        dist.all_reduce(x)
        x /= dist.get_world_size()
    return x


def whole_mean_std(x: torch.Tensor) -> tuple:
    """Mean and std of x pooled over every process's equal share (x.mean(), x.std() in a plain run)."""
    if not dist.is_initialized():
        return x.mean(), x.std()
    mean = all_mean(x.mean())
    count = x.numel() * dist.get_world_size()
    return mean, (all_mean(((x - mean) ** 2).sum()) * dist.get_world_size() / (count - 1)).sqrt()


def average_gradients(agent: nn.Module):
    """Average every gradient over the processes in one collective, so that they all take the same step."""
    if dist.is_initialized():
        grads = [p.grad for p in agent.parameters()]
        flat = all_mean(torch.cat([g.flatten() for g in grads]))
        for grad, chunk in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            grad.copy_(chunk.view_as(grad))


def gather(obj) -> Optional[list]:
    """Every process's obj in rank order, on rank 0 (None on the others); [obj] in a plain run."""
    if not dist.is_initialized():
        return [obj]
    objs = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, objs)
    return objs


def make_update(args: Args, agent: nn.Module, device: torch.device) -> tuple:
    """(Adam, the rollout's policy forward, the update's minibatch step). With --cuda-graphs on CUDA, the forward and the
    step are recorded in CUDA graphs and replayed, and Adam runs fused and capturable, its learning rate a tensor on the
    GPU that the recorded step reads (set_learning_rate fills it); elsewhere both run as they are, with foreach Adam."""
    graphs = args.cuda_graphs and device.type == "cuda"
    if args.cuda_graphs and not graphs:
        print("notice: --cuda-graphs needs CUDA; on the CPU the policy and the update run as they are")
    if not graphs:
        return optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, foreach=True), agent.get_action_and_value, update_minibatch
    lr = torch.tensor(args.learning_rate, device=device)
    optimizer = optim.Adam(agent.parameters(), lr=lr, eps=1e-5, fused=True, capturable=True)
    return optimizer, CudaGraph(agent.get_action_and_value), CudaGraph(update_minibatch)


def set_learning_rate(optimizer: optim.Optimizer, lr: float):
    """The learning rate of the next steps: in place where a recorded step reads it from a tensor (--cuda-graphs)."""
    group = optimizer.param_groups[0]
    if isinstance(group["lr"], torch.Tensor):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr


def load_optimizer(optimizer: optim.Optimizer, saved: dict):
    """A checkpoint's Adam state into `optimizer`, which keeps how it runs (foreach, or fused and capturable) and where its
    learning rate lives (a float, or the GPU tensor a recorded step reads), whatever the checkpoint's run used:
    load_state_dict alone would put the saved options and the saved learning rate, loaded to the CPU, in their place."""
    mine = optimizer.param_groups[0]
    options = {name: mine[name] for name in ("foreach", "fused", "capturable")}
    groups = [{**group, **options, "lr": float(group["lr"])} for group in saved["param_groups"]]
    lr = mine["lr"]
    optimizer.load_state_dict({**saved, "param_groups": groups})  # Adam's step counts go where these options need them
    if isinstance(lr, torch.Tensor):  # the tensor the recorded step reads, now holding the saved learning rate
        optimizer.param_groups[0]["lr"] = lr.fill_(optimizer.param_groups[0]["lr"])


def tensors_of(items: tuple) -> list:
    """The tensors in items, in order, in tuples nested to any depth (a minibatch may hold a recurrent state (h, c))."""
    return [t for item in items for t in (tensors_of(item) if isinstance(item, tuple) else [item]) if isinstance(t, torch.Tensor)]


def copied(item):
    """item with each tensor in it, in tuples nested to any depth, replaced by a copy."""
    return tuple(map(copied, item)) if isinstance(item, tuple) else item.clone() if isinstance(item, torch.Tensor) else item


class CudaGraph:
    """fn(*args) recorded once in a CUDA graph and replayed: one launch instead of one per kernel. The first `warmup`
    calls run as they are (on a side stream, as CUDA graphs need); the next one records it on copies of its tensor
    arguments (in tuples too), and every later call copies its own into those before the replay. The outputs are the
    recorded ones, overwritten by the next call. fn must do the same work on every call: no branch on a tensor's value."""

    def __init__(self, fn: Callable, warmup: int = 3):
        self.fn, self.warmup, self.graph = fn, warmup, None

    def __call__(self, *args):
        if self.graph is None and self.warmup > 0:
            self.warmup -= 1
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                out = self.fn(*args)
            torch.cuda.current_stream().wait_stream(stream)
            return out
        if self.graph is None:
            static = copied(args)
            self.graph, self.inputs = torch.cuda.CUDAGraph(), tensors_of(static)
            with torch.cuda.graph(self.graph):
                self.outputs = self.fn(*static)
        for mine, given in zip(self.inputs, tensors_of(args), strict=True):
            mine.copy_(given)
        self.graph.replay()
        return self.outputs


def make_writer(args: Args, run_name: str, rank: int, ckpt: Optional[dict]) -> Optional[SummaryWriter]:
    """TensorBoard at --run-dir (and wandb with --track) on rank 0, which records the whole run; None elsewhere. A resumed
    run hides what an earlier run in the same directory logged after the checkpoint (TensorBoard's purge_step)."""
    if rank > 0:
        return None
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            save_code=True,
        )
    report = threading.excepthook  # TensorBoard's writer thread fails on a full disk: the next write says it in one line
    threading.excepthook = lambda hook: None if type(hook.thread).__name__ == "_AsyncWriterThread" else report(hook)
    try:
        writer = SummaryWriter(args.run_dir, purge_step=None if ckpt is None else ckpt["global_step"] + 1)
        writer.add_text(
            "hyperparameters", "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()]))
        )
    except OSError as e:
        fail(write_error(e, args))
    return writer


def ended_episodes(infos: dict, global_step: int) -> list:
    """(global_step, return, length) of each episode that ended in a step, from its infos' "final_info" (SAME_STEP mode)."""
    if "final_info" not in infos or "episode" not in infos["final_info"]:
        return []
    episodes = infos["final_info"]["episode"]
    return [(global_step, float(episodes["r"][i]), int(episodes["l"][i])) for i in np.flatnonzero(infos["final_info"]["_episode"])]


def log_episodes(writer: Optional[SummaryWriter], finished: list) -> list:
    """Write every process's finished episodes, (global_step, return, length), to TensorBoard in the order they ended,
    and empty `finished`; return their returns (on rank 0; [] on the others)."""
    everywhere = gather(finished.copy())
    finished.clear()
    if writer is None:
        return []
    episodes = sorted(sum(everywhere, []), key=lambda e: e[0])
    for episode_step, episode_return, episode_length in episodes:
        writer.add_scalar("charts/episodic_return", episode_return, episode_step)
        writer.add_scalar("charts/episodic_length", episode_length, episode_step)
    return [episode_return for _, episode_return, _ in episodes]


def update_means(totals: torch.Tensor, num_updates: int) -> dict:
    """The sums of the update's statistics (STATS) over its minibatch steps to {name: mean over those steps and every
    process} (zeros where a --target-kl stop came before the first step)."""
    means = all_mean(totals / max(num_updates, 1)).tolist()
    return dict(zip(STATS, means, strict=True))


def explained_variance(b_values: torch.Tensor, b_returns: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over every process's batch (nan where the returns do not vary)."""
    everywhere = gather((b_values.cpu().numpy(), b_returns.cpu().numpy()))
    if everywhere is None:
        return np.nan  # not rank 0: it logs
    y_pred, y_true = (np.concatenate(part) for part in zip(*everywhere, strict=True))
    var_y = np.var(y_true)
    return np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y


def catch_stop_signals() -> list:
    """SIGTERM (kill, docker stop, systemd, Slurm, Kubernetes), and Ctrl-C under torchrun, where it reaches each process
    at its own point of an iteration: note it here, and stop_requested() stops every process after the same iteration,
    which the checkpoint keeps. A second SIGTERM kills at once. A plain run's Ctrl-C stops wherever it finds the run
    (KeyboardInterrupt: the iteration in progress is not whole, the checkpoint keeps the one before). Returns the list of
    the signals noted, from which close_run takes the exit status."""
    interrupted = []

    def note(signum, frame):
        interrupted.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the next one cannot wait
        if signum == signal.SIGINT and not dist.is_initialized():
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, note)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # nohup and `&` in a script ignore Ctrl-C: so does the run
        signal.signal(signal.SIGINT, note)
    return interrupted


def stop_requested(interrupted: list, device: torch.device) -> int:
    """The signal that stops the run after this iteration (the same in every process under torchrun), 0 if none."""
    if not dist.is_initialized():
        return interrupted[0] if interrupted else 0  # no tensor, no device sync in a plain run
    signum = torch.tensor(float(interrupted[0] if interrupted else 0), device=device)
    dist.all_reduce(signum, op=dist.ReduceOp.MAX)
    return int(signum.item())


def write_error(e: OSError, args: Args) -> str:
    """The one-line reason a write to the run's directory failed (full disk, read-only, no permission); any other
    OSError is not one of ours to explain, and goes on as it came."""
    if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO):
        raise e
    then = f"--resume {args.run_dir}/{args.exp_name}.pt continues from the last checkpoint written" if args.save_model else "run again"
    return f"{e.filename or args.run_dir!r}: {e.strerror}; free space there or make it writable, then {then}"


def close_run(args: Args, writer: Optional[SummaryWriter], finished: list, error: Optional[str], interrupted: list):
    """Log the episodes of an interrupted iteration, close TensorBoard and wandb, leave the process group, release the
    run's directory. Then the exit status: 0 only for a run that reached its end; a failure's one-line error (a NaN, a
    write that failed), or 128 + the signal that stopped it (143 for SIGTERM, 130 for Ctrl-C), as a shell reports it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the handlers of catch_stop_signals() end with the run
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        log_episodes(writer, finished)
        if writer is not None:
            writer.close()
    except OSError as e:  # the log of a full or read-only disk: as far as it got
        error = error or write_error(e, args)
    if writer is not None and args.track:
        import wandb

        wandb.finish()
    if dist.is_initialized():
        dist.barrier()  # none exits before rank 0 has saved and closed: torchrun stops the others when one exits with an error
        dist.destroy_process_group()
    for lock in RUN_DIR_LOCK:
        lock.close()
    RUN_DIR_LOCK.clear()
    if error is not None:
        fail(error)
    if interrupted:
        raise SystemExit(128 + interrupted[0])


if __name__ == "__main__":
    # ARGUMENTS AND START-UP
    args = tyro.cli(Args)
    run_name = f"{args.env_id.replace('/', '_')}__{args.exp_name}__{args.seed}__{int(time.time())}"  # ALE/, dm_control/: one directory
    # small networks: one thread avoids the synchronization cost that dominates tiny CPU matmuls
    torch.set_num_threads(1)
    rank, world_size, device, ckpt = start_up(args, run_name)  # checks, torchrun, --resume's checkpoint; evaluation exits here
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    # this process's share: the whole run's batch is split evenly between the processes
    num_envs, batch_size, minibatch_size = args.num_envs // world_size, args.batch_size // world_size, args.minibatch_size // world_size
    if rank == 0:
        print(
            f"batch size {args.batch_size}, minibatch size {args.minibatch_size}, "
            f"{args.num_iterations} iterations of {args.update_epochs} epochs, on {device}"
            + (f", {world_size} processes of {num_envs} envs" if world_size > 1 else "")
        )

    # LOGGING
    writer = make_writer(args, run_name, rank, ckpt)  # one run, one record: rank 0 writes it for every process (None elsewhere)

    # SEEDING
    random.seed(args.seed + rank)  # each process its own streams (rank 0's are those of a plain run)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # ENVS
    envs = make_envs(args, num_envs, run_name, rank)

    # AGENT AND OPTIMIZER
    agent = Agent(envs, args).to(device)
    broadcast_parameters(agent)
    optimizer, policy, update_step = make_update(args, agent, device)  # with --cuda-graphs on CUDA, both recorded in CUDA graphs

    # STORAGE
    # dones[t] = 1 where obs[t] is the first observation of a new episode (the previous step ended one);
    # rewards[t] includes gamma * V(final_obs) where step t hit a time limit (bootstrap_truncation).
    storage_shape = (args.num_steps, num_envs)
    obs = torch.zeros(storage_shape + envs.single_observation_space.shape, device=device)  # (num_steps, num_envs, *obs_shape)
    actions = torch.zeros(storage_shape + envs.single_action_space.shape, dtype=torch.long, device=device)  # (num_steps, num_envs)
    logprobs = torch.zeros(storage_shape, device=device)  # (num_steps, num_envs)
    # rewards and dones stay on the host (pinned on CUDA) until GAE: a step copies only the observation to the device
    rewards = torch.zeros(storage_shape, pin_memory=device.type == "cuda")  # (num_steps, num_envs)
    dones = torch.zeros(storage_shape, pin_memory=device.type == "cuda")  # (num_steps, num_envs)
    values = torch.zeros(storage_shape, device=device)  # (num_steps, num_envs)

    next_obs_np, _ = envs.reset(seed=args.seed + rank * num_envs)  # env seeds: the same set as a plain run's
    envs.action_space.seed(args.seed + rank)
    next_obs = torch.as_tensor(next_obs_np, dtype=obs.dtype, device=device)  # (num_envs, *obs_shape)
    next_done = torch.zeros(num_envs)  # (num_envs,), on the host
    next_rnn_state = agent.initial_state(num_envs, device)  # LSTM (h, c), GRU (h,), each (1, num_envs, H)
    # --resume: the checkpoint's agent, optimizer, counters, RNGs and envs mid-episode replace the fresh ones
    global_step, start_iteration, (next_obs, next_done, next_rnn_state) = restore(
        args, ckpt, rank, agent, optimizer, envs, (next_obs, next_done, next_rnn_state)
    )
    recent_returns = deque(maxlen=100)
    finished = []  # (global_step, return, length) of this process's episodes since the last log
    interrupted = catch_stop_signals()  # the signals that stopped the run (SIGTERM; Ctrl-C)
    checkpoint, error = None, None  # checkpoint: the state after the last whole iteration, what --save-model writes
    model_path = f"{args.run_dir}/{args.exp_name}.pt"
    if args.save_model:
        checkpoint = make_checkpoint(args, agent, optimizer, envs, global_step, start_iteration - 1, (next_obs, next_done, next_rnn_state))
    start_time, start_step = time.time(), global_step
    saved_at = start_time  # the last periodic write of the checkpoint
    iteration = start_iteration - 1
    try:
        for iteration in range(start_iteration, args.num_iterations + 1):
            # LEARNING-RATE ANNEALING
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                set_learning_rate(optimizer, frac * args.learning_rate)
            initial_rnn_state = tuple(s.clone() for s in next_rnn_state)  # training replays from here

            # ROLLOUT
            for step in range(0, args.num_steps):
                global_step += args.num_envs
                obs[step] = next_obs
                dones[step] = next_done
                with torch.inference_mode():
                    action, logprob, _, value, next_rnn_state = policy(next_obs, next_rnn_state, next_done.to(device))
                values[step] = value
                actions[step] = action
                logprobs[step] = logprob

                next_obs_np, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
                reward = reward * args.reward_scale
                if args.bootstrap_truncation and "final_obs" in infos:
                    # a time limit is not the end of the MDP: r + gamma * V(final_obs) (terminations get no bootstrap)
                    trunc = np.flatnonzero(truncations & ~terminations)
                    if len(trunc):
                        final_obs = torch.as_tensor(np.stack(infos["final_obs"][trunc]), dtype=obs.dtype, device=device)
                        with torch.inference_mode():
                            # the final observation continues its episode: the state after step t, no reset
                            final_state = tuple(s[:, trunc] for s in next_rnn_state)
                            final_value = agent.get_value(final_obs, final_state, torch.zeros(len(trunc), device=device))
                            reward[trunc] += args.gamma * final_value.cpu().numpy()
                rewards[step] = torch.as_tensor(reward)
                next_obs = torch.as_tensor(next_obs_np, dtype=obs.dtype, device=device)
                next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
                finished.extend(ended_episodes(infos, global_step))

            # ADVANTAGES
            with torch.inference_mode():
                next_value = agent.get_value(next_obs, next_rnn_state, next_done.to(device))
            gae_inputs = (rewards.to(device), values, dones.to(device), next_value, next_done.to(device))  # rewards, dones: host
            advantages, returns = compute_gae(*gae_inputs, args.gamma, args.gae_lambda)

            # FLATTEN
            b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)  # (batch, *obs_shape)
            b_logprobs = logprobs.reshape(-1)  # (batch,)
            b_actions = actions.reshape((-1,) + envs.single_action_space.shape)  # (batch, *action_shape)
            b_advantages = advantages.reshape(-1)  # (batch,)
            b_returns = returns.reshape(-1)  # (batch,)
            b_values = values.reshape(-1)  # (batch,)
            b_dones = dones.to(device).reshape(-1)  # (batch,)

            # UPDATE
            batch = (b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values, b_dones)
            b_inds = np.arange(num_envs)  # minibatches of whole env sequences: the update shuffles envs, not steps
            flatinds = torch.arange(batch_size, device=device).reshape(args.num_steps, num_envs)
            totals, num_updates = torch.zeros(len(STATS), device=device), 0  # sums of the update's statistics (STATS)
            kl_stop = False
            for _epoch in range(args.update_epochs):
                np.random.shuffle(b_inds)
                epoch_inds = torch.as_tensor(b_inds, device=device)
                for start in range(0, num_envs, num_envs // args.num_minibatches):
                    mb_envs = epoch_inds[start : start + num_envs // args.num_minibatches]
                    mb_inds = flatinds[:, mb_envs].flatten()  # these envs' whole sequences, time-major
                    mb_state = tuple(s[:, mb_envs] for s in initial_rnn_state)  # their state at the rollout's start
                    minibatch_stats = update_step(args, agent, optimizer, (*(b[mb_inds] for b in batch), mb_state))
                    if minibatch_stats is None:
                        kl_stop = True  # approx KL past --target-kl: no further minibatch or epoch
                        break
                    totals += minibatch_stats
                    num_updates += 1
                if kl_stop:
                    break

            # LOGGING
            stats = update_means(totals, num_updates)  # means over the update and every process
            if not (np.isfinite(stats["loss"]) and np.isfinite(stats["grad_norm"])):
                error = f"the loss became {stats['loss']} (gradient norm {stats['grad_norm']}) at iteration {iteration}; training stopped"
                break
            recent_returns.extend(log_episodes(writer, finished))  # every process's episodes, in the order they ended
            explained_var = explained_variance(b_values, b_returns)
            if rank == 0:
                sps = int((global_step - start_step) / (time.time() - start_time))
                writer.add_scalar("charts/learning_rate", float(optimizer.param_groups[0]["lr"]), global_step)
                writer.add_scalar("losses/value_loss", stats["value_loss"], global_step)
                writer.add_scalar("losses/policy_loss", stats["policy_loss"], global_step)
                writer.add_scalar("losses/entropy", stats["entropy"], global_step)
                writer.add_scalar("losses/old_approx_kl", stats["old_approx_kl"], global_step)
                writer.add_scalar("losses/approx_kl", stats["approx_kl"], global_step)
                writer.add_scalar("losses/clipfrac", stats["clipfrac"], global_step)
                writer.add_scalar("losses/explained_variance", explained_var, global_step)
                writer.add_scalar("charts/SPS", sps, global_step)
                eta = (args.num_iterations - iteration) * args.batch_size / max(sps, 1)
                recent = f"{np.mean(recent_returns):.2f}" if recent_returns else "n/a"
                print(
                    f"iter {iteration}/{args.num_iterations} step {global_step} SPS {sps} "
                    f"return {recent} (last {len(recent_returns)}) ETA {eta // 60:.0f}m{eta % 60:02.0f}s"
                )
            if args.save_model:
                checkpoint = make_checkpoint(args, agent, optimizer, envs, global_step, iteration, (next_obs, next_done, next_rnn_state))
            stop = stop_requested(interrupted, device)  # SIGTERM, or Ctrl-C under torchrun: every process stops after this iteration
            if args.save_model and not stop and time.time() - saved_at >= 60 * args.save_every:  # a killed run loses at most this much
                saved_at = save_checkpoint(checkpoint, model_path, rank, final=False)
            if stop:
                if rank == 0:
                    print(
                        f"stopped by {signal.Signals(stop).name} after iteration {iteration}"
                        + (", which the checkpoint keeps" if args.save_model else "")
                    )
                break
    except KeyboardInterrupt:
        if rank == 0:
            print(f"interrupted during iteration {iteration}; closing (a checkpoint keeps the last whole iteration)")
    except OSError as e:  # a write to the run's directory failed (TensorBoard's, a periodic checkpoint's): say why below
        error = write_error(e, args)

    # SAVE AND CLOSE
    try:
        if args.save_model:
            save_checkpoint(checkpoint, model_path, rank)
    except OSError as e:
        error = error or write_error(e, args)
    envs.close()
    close_run(args, writer, finished, error, interrupted)  # the exit status: 0 only for a run that reached its end
