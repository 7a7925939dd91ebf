"""PPO for continuous actions (MuJoCo): Gaussian policy, VecNormalize saved with the agent, on gymnasium 1.x.

    python ppo_continuous_action.py                 # HalfCheetah-v5, 1M steps, about 10 minutes on 2 cores
    python ppo_continuous_action.py --env-id Hopper-v5 --seed 2 --save-model
    python ppo_continuous_action.py --eval-checkpoint runs/<run>/ppo_continuous_action.pt --eval-greedy

Follows Schulman et al. 2017 (arXiv:1707.06347) and openai/baselines' ppo2 with every detail of
"The 32 Implementation Details of PPO" (Huang and Dossa, 2020), corrected for gymnasium 1.x: no
transition from an autoreset reaches the batch, and a time-limit truncation bootstraps
gamma * V(final_obs) instead of being treated as termination (`--no-bootstrap-truncation` restores
the old behaviour). `%run` in IPython leaves `agent`, the storage and `b_*` in the namespace.
Checkpoints are pickles (optimizer, RNG and env state): load only checkpoints you trust.

Read the research layer (down to `evaluate`) and `__main__`: the run-management layer between them
is the same in all four scripts and can be skipped on a first reading.
"""

import contextlib
import errno
import functools
import importlib.util
import io
import math
import os
import pickle
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Optional

import gymnasium as gym
import mujoco
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
import tyro
from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
from gymnasium.wrappers.utils import RunningMeanStd
from torch.utils.tensorboard import SummaryWriter

# MuJoCo 4 warns about a deprecated attribute in gymnasium's HalfCheetah model at every load: harmless, not shown
mujoco.set_mju_user_warning(lambda msg: None if "settotalmass" in msg else print(f"MuJoCo: {msg}", file=sys.stderr))
if importlib.util.find_spec("shimmy"):  # the DeepMind Control Suite's dm_control/* ids, with requirements-dmc.txt
    if not os.environ.get("DISPLAY"):  # headless: dm_control picks its renderer as it imports, EGL here
        os.environ.setdefault("MUJOCO_GL", "egl")
    gym.register_envs(importlib.import_module("shimmy"))


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
    """on CUDA, record the rollout's policy forward and the update's minibatch step in CUDA graphs and replay them (no
    kernel launch overhead; fused Adam: other numbers than without)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """whether to save a checkpoint to `{run_dir}/{exp_name}.pt` (at the end, and on Ctrl-C or SIGTERM)"""
    save_every: float = 10.0
    """with --save-model, also write the checkpoint every this many minutes of wall time (0: after every iteration)"""
    run_dir: Optional[str] = None
    """the run's directory, for its TensorBoard log and checkpoint (default: `runs/{run_name}`; --resume: the checkpoint's)"""
    resume: Optional[str] = None
    """path of a checkpoint to continue training from, with every setting it was saved with (flags here change how it
    runs and is recorded, and may raise --total-timesteps); `auto`: the one in --run-dir if there is one, else start"""
    eval_checkpoint: Optional[str] = None
    """path of a checkpoint to evaluate instead of training, on the env it was trained on"""
    eval_episodes: int = 10
    """the number of episodes to play with `--eval-checkpoint`"""
    eval_greedy: bool = False
    """if toggled, evaluation takes the most likely action instead of sampling"""

    env_id: str = "HalfCheetah-v5"
    """the id of the environment"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments (raised on --resume: trains further, the learning rate at the new schedule's
    point, (1 - iterations done / new iterations) x learning_rate: not the run a larger total from the start would give)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel game environments"""
    num_steps: int = 2048
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
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
    norm_obs: bool = True
    """normalize observations by their running mean and variance, clipped to [-10, 10]"""
    norm_reward: bool = True
    """divide rewards by the running standard deviation of the discounted return, clipped to [-10, 10]"""

    batch_size: tyro.conf.Suppress[int] = 0
    """the batch size (computed in runtime, not a flag)"""
    minibatch_size: tyro.conf.Suppress[int] = 0
    """the mini-batch size (computed in runtime, not a flag)"""
    num_iterations: tyro.conf.Suppress[int] = 0
    """the number of iterations (computed in runtime, not a flag)"""


def make_env(env_id: str, idx: int, capture_video: bool, run_name: str):
    def thunk():
        if capture_video and idx == 0:
            if not os.environ.get("DISPLAY"):  # headless: EGL, set only when rendering (child processes inherit it)
                os.environ.setdefault("MUJOCO_GL", "egl")
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = MujocoState(env) if isinstance(env.unwrapped, MujocoEnv) else env
        if env_id.startswith("dm_control/"):  # its observations, a Dict, as one vector (keys in sorted order); it pickles
            env.unwrapped.spec = None  # whole (but for its spec's entry point, a local function): exact resume
            flatten = functools.partial(gym.spaces.flatten, env.observation_space)  # FlattenObservation's lambda: no pickle
            env = gym.wrappers.TransformObservation(env, flatten, gym.spaces.flatten_space(env.observation_space))
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env

    return thunk


class MujocoState(gym.Wrapper):
    """Pickles the simulation mid-episode (gymnasium's MuJoCo envs pickle only their arguments), for exact resume."""

    def __getstate__(self):
        return {**self.__dict__, "simulation": (self.unwrapped.data, self.unwrapped.np_random)}

    def __setstate__(self, state):
        self.__dict__.update(state)
        data, self.unwrapped.np_random = self.__dict__.pop("simulation")
        mujoco.mj_copyData(self.unwrapped.data, self.unwrapped.model, data)


class NormalizeVector(gym.vector.VectorWrapper):
    """baselines' VecNormalize for a SAME_STEP vector env: observations (final ones too) by their running mean and
    variance, rewards by the running std of the discounted return, both clipped to [-10, 10]; `frozen` in evaluation.
    Actions are clipped to their bounds on the way to the env; the batch keeps the unclipped sample."""

    checkpointed = ("obs_rms", "return_rms", "discounted_return")  # what a checkpoint keeps: its running statistics

    def __init__(self, env: gym.vector.SyncVectorEnv, args: Args):
        super().__init__(env)
        self.envs = env.envs
        self.gamma = args.gamma
        self.norm_obs = args.norm_obs
        self.norm_reward = args.norm_reward
        self.frozen = args.eval_checkpoint is not None  # evaluation: the statistics of training, not updated
        self.obs_rms = RunningMeanStd(shape=self.single_observation_space.shape)
        self.return_rms = RunningMeanStd(shape=())
        self.discounted_return = np.zeros(self.num_envs)

    @staticmethod
    def update(rms: RunningMeanStd, x: np.ndarray):
        """rms.update(x) without np.var's overhead (same numbers); under torchrun, the moments of every process's x."""
        mean = all_mean(torch.as_tensor(x.mean(0))).numpy()
        var = all_mean(torch.as_tensor(((x - mean) ** 2).mean(0))).numpy()
        rms.update_from_moments(mean, var, len(x) * (dist.get_world_size() if dist.is_initialized() else 1))

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        normalized = np.clip((obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + 1e-8), -10, 10).astype(np.float32)
        return normalized if self.norm_obs else obs

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        self.discounted_return = np.zeros(self.num_envs)
        if not self.frozen:
            self.update(self.obs_rms, obs)
        return self.normalize(obs), infos

    def step(self, actions):
        space = self.single_action_space
        obs, reward, terminations, truncations, infos = self.env.step(np.clip(actions, space.low, space.high))
        if not self.frozen:
            self.update(self.obs_rms, obs)
            self.discounted_return = self.discounted_return * self.gamma + reward
            self.update(self.return_rms, self.discounted_return)
        self.discounted_return[terminations | truncations] = 0
        for i in np.flatnonzero(infos.get("_final_obs", [])):  # V(final_obs) for the bootstrap sees what V always sees
            infos["final_obs"][i] = self.normalize(infos["final_obs"][i])
        scaled = np.clip(reward / np.sqrt(self.return_rms.var + 1e-8), -10, 10)
        return self.normalize(obs), scaled if self.norm_reward else reward, terminations, truncations, infos


def make_vector_env(args: Args, num_envs: int, rank: int) -> gym.vector.VectorEnv:
    """The vector env in SAME_STEP autoreset mode: an episode's last step returns the next episode's first observation
    and puts the real last one in infos["final_obs"], so every step is a real transition. The default NEXT_STEP mode
    would spend one step per episode on a reset whose action is ignored."""
    run_name = os.path.basename(args.run_dir)  # videos/{run_name}
    num_envs = 1 if args.eval_checkpoint else num_envs  # evaluation plays one env
    thunks = [make_env(args.env_id, i, args.capture_video and rank == 0, run_name) for i in range(num_envs)]
    return NormalizeVector(gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP), args)


def ended_episodes(infos: dict, global_step: int) -> list:
    """(global_step, return, length) of each episode that ended in a step, from its infos' "final_info" (SAME_STEP mode)."""
    if "final_info" not in infos or "episode" not in infos["final_info"]:
        return []
    episodes = infos["final_info"]["episode"]
    ended = np.flatnonzero(infos["final_info"]["_episode"])
    return [(global_step, float(episodes["r"][i]), int(episodes["l"][i])) for i in ended]


def check_env(args: Args):
    """Fail early, before anything is written, if the env is unknown or not of this script's kind."""
    env_id = args.env_id
    if env_id.startswith("dm_control/") and importlib.util.find_spec("shimmy") is None:
        fail(f"{env_id} needs dm-control and shimmy: the venv of requirements-dmc.txt (README, the DeepMind Control Suite)")
    try:
        env = make_env(env_id, 0, False, "check")()  # as the run makes it (DMC: its observations flattened)
    except gym.error.Error as e:
        if "NoFrameskip" in env_id or env_id.startswith("ALE/"):
            fail(f"{env_id} is an Atari game; use ppo_atari.py for it")
        fail(f"unknown env id {env_id!r} ({e}); list them: python -c 'import gymnasium; gymnasium.pprint_registry()'")
    except ImportError as e:
        fail(f"the module of env id {env_id!r} does not import ({e.__cause__ or e}); check the name before ':', or install it")
    env.close()
    if isinstance(env.action_space, gym.spaces.Discrete):
        fail(f"{env_id} has discrete actions; use ppo.py for it (ppo_atari.py for Atari)")
    if not isinstance(env.action_space, gym.spaces.Box):
        fail(f"{env_id} has {type(env.action_space).__name__} actions; {os.path.basename(__file__)} needs Box ones")
    if isinstance(env.observation_space, gym.spaces.Box) and len(env.observation_space.shape) in (2, 3):
        fail(f"{env_id} has image observations of shape {env.observation_space.shape}; use ppo_atari.py for images")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        fail(f"{env_id} observations are {env.observation_space}, not a flat Box; wrap it in gymnasium's FlattenObservation")


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, int(np.prod(envs.single_action_space.shape))), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, int(np.prod(envs.single_action_space.shape))))  # state-independent

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)  # (B,)

    def get_action_and_value(self, x: torch.Tensor, action: Optional[torch.Tensor] = None):
        action_mean = self.actor(x)  # (B, act_dim)
        action_std = self.actor_logstd.expand_as(action_mean).exp()
        if action is None:
            with torch.no_grad():
                action = action_mean + action_std * torch.randn_like(action_mean)  # torch.normal's numbers, no host sync
        log_std = action_std.log()  # Normal's sample, log_prob and entropy written out: same numbers, a third of the time
        logprob = (-((action - action_mean) ** 2) / (2 * action_std**2) - log_std - math.log(math.sqrt(2 * math.pi))).sum(1)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(1)
        # (B, act_dim) action, unclipped (the env clips it); (B,) log-prob and entropy summed over action dims; (B,) value
        return action, logprob, entropy, self.critic(x).squeeze(-1)


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


def value_loss(
    newvalue: torch.Tensor, values: torch.Tensor, returns: torch.Tensor, clip_coef: Optional[float]
) -> torch.Tensor:
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
    """One gradient step on minibatch, the rows mb_inds of the b_* tensors in `batch` (obs, logprobs, actions, advantages,
    returns, values, and what the domain adds): the clipped surrogate, the value loss and the entropy bonus. Returns the
    step's statistics (STATS, in that order) in one tensor, or None, without a step, where the approximate KL has passed
    args.target_kl. A function of tensors and nothing else, so that --cuda-graphs can record it once and replay it."""
    mb_obs, mb_logprobs, mb_actions, mb_advantages, mb_returns, mb_values = minibatch
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb_obs, mb_actions)
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


def all_mean(x: torch.Tensor) -> torch.Tensor:
    """The mean of x over torchrun's processes (x itself in a plain run)."""
    if dist.is_initialized():
        x = x.clone()
        dist.all_reduce(x)
        x /= dist.get_world_size()
    return x


def whole_mean_std(x: torch.Tensor) -> tuple:
    """Mean and standard deviation of x pooled over every process's equal share (x.mean(), x.std() in a plain run)."""
    if not dist.is_initialized():
        return x.mean(), x.std()
    mean = all_mean(x.mean())
    count = x.numel() * dist.get_world_size()
    return mean, (all_mean(((x - mean) ** 2).sum()) * dist.get_world_size() / (count - 1)).sqrt()


def average_gradients(agent: nn.Module):
    """Every gradient averaged over the processes, in one collective, so that they all take the same step."""
    if dist.is_initialized():
        grads = [p.grad for p in agent.parameters()]
        means = all_mean(torch.cat([g.flatten() for g in grads])).split([g.numel() for g in grads])
        for grad, mean in zip(grads, means, strict=True):
            grad.copy_(mean.view_as(grad))


def make_update(args: Args, agent: nn.Module, device: torch.device) -> tuple:
    """(Adam, the rollout's policy forward, the minibatch step), every process from rank 0's parameters. With --cuda-graphs
    on CUDA the forward and the step replay CUDA graphs, and Adam is fused and capturable, reading a learning-rate tensor."""
    if dist.is_initialized():
        for param in agent.parameters():
            dist.broadcast(param.data, src=0)
    graphs = args.cuda_graphs and device.type == "cuda"
    if args.cuda_graphs and not graphs:
        print("notice: --cuda-graphs needs CUDA; on the CPU the policy and the update run as they are")
    if device.type == "cuda" and not graphs and args.target_kl is None and not dist.is_initialized():
        print("notice: eager CUDA ran 1.7-4.0x slower than --cuda-graphs on an H200, and slower than --no-cuda outside Atari")
    if not graphs:
        optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, foreach=True)
        return optimizer, agent.get_action_and_value, update_minibatch
    lr = torch.tensor(args.learning_rate, device=device)
    optimizer = optim.Adam(agent.parameters(), lr=lr, eps=1e-5, fused=True, capturable=True)
    return optimizer, CudaGraph(agent.get_action_and_value), CudaGraph(update_minibatch)


def set_learning_rate(optimizer: optim.Optimizer, lr: float):
    """The learning rate of the next steps: in place where a recorded step reads it from a tensor (--cuda-graphs)."""
    if isinstance(optimizer.param_groups[0]["lr"], torch.Tensor):
        optimizer.param_groups[0]["lr"].fill_(lr)
    else:
        optimizer.param_groups[0]["lr"] = lr


def load_optimizer(optimizer: optim.Optimizer, saved: dict):
    """A saved Adam state into `optimizer`, which keeps its own options and learning rate's place (a float or a tensor)."""
    mine = {name: optimizer.param_groups[0][name] for name in ("foreach", "fused", "capturable", "lr")}
    optimizer.load_state_dict({**saved, "param_groups": [{**group, **mine} for group in saved["param_groups"]]})
    optimizer.param_groups[0]["lr"] = mine["lr"]  # the very tensor a recorded step reads: load_state_dict copied it
    set_learning_rate(optimizer, float(saved["param_groups"][0]["lr"]))


def walk(fn: Callable, item, *like):
    """fn(tensor, *its counterparts in `like`) for each tensor in item, in tuples nested to any depth (a recurrent state),
    returned in a tuple of the same shape (anything else as it is)."""
    if isinstance(item, tuple):
        return tuple(walk(fn, *parts) for parts in zip(item, *like, strict=True))
    return fn(item, *like) if isinstance(item, torch.Tensor) else item


class CudaGraph:
    """fn(*args) recorded once in a CUDA graph and replayed: one launch instead of one per kernel. The first `warmup` calls
    run as they are, on a side stream; the next records fn on copies of its tensor arguments, into which each later call
    copies its own before the replay. The outputs are the recorded ones, overwritten by the next call. fn must do the
    same work on every call: no branch on a tensor's value."""

    def __init__(self, fn: Callable, warmup: int = 3):
        self.fn = fn
        self.warmup = warmup
        self.graph = None

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
            self.inputs = walk(torch.clone, args)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = self.fn(*self.inputs)
        walk(torch.Tensor.copy_, self.inputs, args)
        self.graph.replay()
        return self.outputs


def evaluate(args: Args, agent: Agent, envs: gym.vector.VectorEnv, ckpt: dict, device: torch.device):
    """Play --eval-episodes episodes with the checkpoint's agent (on rank 0), its most likely action (--eval-greedy) or a
    sampled one, in envs made as in its training; print their returns, and exit."""
    if int(os.environ.get("RANK", 0)) == 0:
        load_agent(agent, ckpt, args.eval_checkpoint)
        vars(envs).update(ckpt["ranks"][0]["wrapper"])  # a vector wrapper's state as trained (continuous: its statistics)
        greedy = args.eval_greedy
        torch.manual_seed(args.seed)  # sampled actions: the same seed plays the same episodes
        obs, _ = envs.reset(seed=args.seed)
        returns = []
        while len(returns) < args.eval_episodes:
            with torch.inference_mode():
                x = torch.as_tensor(obs, dtype=torch.float32, device=device)
                action = agent.actor(x) if greedy else agent.get_action_and_value(x)[0]
            obs, _, _, _, infos = envs.step(action.cpu().numpy())
            for _, episode_return, _ in ended_episodes(infos, 0):
                returns.append(episode_return)
                print(f"eval episode {len(returns)}: return {episode_return:.2f}")
        if args.capture_video and hasattr(envs, "envs"):  # gymnasium's recorder: no video of the episode begun after the last
            envs.envs[0].set_wrapper_attr("recording", False)
            envs.envs[0].set_wrapper_attr("recorded_frames", [])
        how = "greedy" if greedy else "sampled"
        videos = f"; videos in videos/{os.path.basename(args.run_dir)}/" if args.capture_video else ""
        print(f"eval: {len(returns)} episodes ({how}), return {np.mean(returns):.2f} ± {np.std(returns):.2f}{videos}")
    envs.close()
    raise SystemExit(0)


# ==================================================================================================================
# RUN MANAGEMENT: checks, torchrun's start, the checkpoint (save and restore side by side), logging and stop signals.
# Identical in all four scripts (tests/test_drift.py pins it), no part of the algorithm: a first reading can skip it.
# ==================================================================================================================

CHECKPOINT_FORMAT = 3  # raised whenever what a checkpoint holds changes; another format gets a one-line error
MAY_CHANGE_ON_RESUME = (  # how a run runs and is recorded: what --resume and --eval-checkpoint may change
    "exp_name seed torch_deterministic cuda track wandb_project_name wandb_entity capture_video save_model save_every "
    "run_dir resume eval_checkpoint eval_episodes eval_greedy env_groups"
).split()
RUN = {"lock": None, "signals": [], "saved_at": time.time(), "saved": None}  # this run's dir lock, stop signals, last save


def fail(message: str):
    """Stop with a one-line error instead of a traceback; under torchrun every process stops, and rank 0 says why."""
    says = os.environ.get("RANK" if dist.is_initialized() else "LOCAL_RANK", "0") == "0"
    if dist.is_initialized():
        dist.destroy_process_group()  # now, not during interpreter shutdown
    raise SystemExit(f"error: {message}" if says else 1)


def check_args(args: Args):
    positive = ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes")
    for name in (*positive, "learning_rate", "clip_coef", "max_grad_norm", "target_kl"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            fail(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("ent_coef", "vf_coef", "save_every"):
        if not getattr(args, name) >= 0:
            fail(f"--{name.replace('_', '-')} must be non-negative, got {getattr(args, name)}")
    for name in ("gamma", "gae_lambda"):
        if not 0 <= getattr(args, name) <= 1:
            fail(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")
    if args.capture_video and importlib.util.find_spec("moviepy") is None:  # gymnasium's RecordVideo writes with it
        fail("--capture-video writes videos with moviepy, which does not import here; pip install moviepy")
    check_env(args)  # the env's kind, and what this script's domain adds to these checks
    batch_size = args.num_envs * args.num_steps
    processes = int(os.environ.get("WORLD_SIZE", 1))  # under torchrun, each steps an equal share of the envs
    if batch_size % args.num_minibatches:
        fail(f"num_envs * num_steps = {batch_size} is not divisible by --num-minibatches {args.num_minibatches}")
    if args.norm_adv and batch_size // args.num_minibatches < 2:
        fail("a minibatch of 1 sample cannot normalize advantages; use fewer --num-minibatches or --no-norm-adv")
    if args.eval_checkpoint is None and args.total_timesteps < batch_size:
        fail(f"--total-timesteps {args.total_timesteps} is less than one batch (num_envs * num_steps = {batch_size})")
    if args.num_envs % processes or batch_size // processes % args.num_minibatches:
        fail(f"--num-envs {args.num_envs} does not split into {processes} processes of whole minibatches")
    if args.cuda_graphs and (args.target_kl is not None or processes > 1):
        fail("--cuda-graphs records the whole minibatch step: it cannot stop at --target-kl or average over processes")


def start_up(args: Args) -> tuple:
    """Checks, --resume's or --eval-checkpoint's checkpoint, torchrun's process group: (rank, world_size, device, ckpt)."""
    ckpt, error = None, None
    try:
        ckpt = from_checkpoint(args)
        check_args(args)
    except SystemExit as stop:
        error = stop.code
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    cuda = args.cuda and torch.cuda.is_available()
    if cuda and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) > torch.cuda.device_count():  # before the group: it could not start
        fail(f"more processes than the {torch.cuda.device_count()} GPU(s) here; lower --nproc-per-node, or pass --no-cuda")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if world_size > 1:
        importlib.import_module("torch._dynamo")  # else torch.optim's lazy import of it holds the group past its end
        attempt = f"restart{os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)}"  # torchrun --max-restarts keeps its store:
        store = dist.PrefixStore(attempt, next(dist.rendezvous("env://"))[0])  # keys apart from the dead attempts' keys
        dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo", store=store, rank=rank, world_size=world_size)
        everyone = [None] * world_size
        dist.all_gather_object(everyone, (asdict(args), error))
        differ = [name for name, value in everyone[0][0].items() if any(other[name] != value for other, _ in everyone)]
        reasons = [e for _, e in everyone if isinstance(e, str)]  # the first process of each machine has its reason
        reasons += [f"error: the processes were started with different arguments ({', '.join(differ)})"] if differ else []
        error = reasons[0] if reasons else error
    if error is not None:
        fail(str(error).removeprefix("error: "))
    if cuda:
        torch.cuda.set_device(device)
    elif args.cuda and rank == 0:
        print("notice: CUDA is not available, running on CPU")
    args.run_dir = args.run_dir or f"runs/{args.env_id.replace('/', '_')}__{args.exp_name}__{args.seed}__{int(time.time())}"
    return rank, world_size, device, ckpt


def from_checkpoint(args: Args) -> Optional[dict]:
    """The checkpoint of --resume or --eval-checkpoint, or None; the run takes its settings where no flag differs."""
    model_path = f"{args.run_dir}/{args.exp_name}.pt"
    if args.resume == "auto" and (args.run_dir is None or not args.save_model):
        fail("--resume auto continues the checkpoint in --run-dir: pass --run-dir DIR and --save-model")
    if args.resume == "auto":  # a restart of the same command line: its checkpoint, where it wrote one
        args.resume = model_path if os.path.exists(model_path) else None
    elif args.resume is None and args.eval_checkpoint is None and os.path.exists(model_path):
        fail(f"--run-dir {args.run_dir!r} holds {args.exp_name}.pt: continue it with --resume auto, or pass another --run-dir")
    path = args.eval_checkpoint or args.resume
    if path is None:
        return None
    script = os.path.basename(__file__)
    if not os.path.isfile(path):
        fail(f"checkpoint {path!r} is not a file; pass the path of one that --save-model wrote")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        fail(f"checkpoint {path!r} could not be read ({type(e).__name__}); it is corrupt or not a checkpoint")
    if isinstance(ckpt, dict) and ckpt.get("script", script) != script:
        fail(f"{path!r} was saved by {ckpt['script']}, not {script}; run it with {ckpt['script']}")
    parts = {"format", "args", "agent", "optimizer", "global_step", "iteration", "ranks"}
    if not isinstance(ckpt, dict) or not parts <= ckpt.keys() or ckpt["format"] != CHECKPOINT_FORMAT:
        fail(f"{path!r} is not a whole checkpoint of this {script}; pass one its --save-model wrote")
    if args.resume and len(ckpt["ranks"]) != int(os.environ.get("WORLD_SIZE", 1)):
        fail(f"{path!r} was saved by {len(ckpt['ranks'])} process(es), not {os.environ.get('WORLD_SIZE', 1)}; start as many")
    run_dir = f"{ckpt['args']['run_dir']}-eval" if args.eval_checkpoint else os.path.dirname(path) or "."  # eval: videos apart
    saved = {**ckpt["args"], "run_dir": run_dir}
    given = tyro.cli(Args, default=Args(**saved))  # the command line again, over the checkpoint's settings
    differ = [name for name in saved if name not in MAY_CHANGE_ON_RESUME and getattr(given, name) != saved[name]]
    if args.resume and given.total_timesteps > saved["total_timesteps"]:
        differ.remove("total_timesteps")  # trained further
    if differ:
        settings = ", ".join(f"{name}={saved[name]!r} (not {getattr(given, name)!r})" for name in differ)
        fail(f"{path!r} keeps the settings it was trained with: {settings}; drop those flags")
    vars(args).update(vars(given), resume=args.resume)
    return ckpt


def load_agent(agent: nn.Module, ckpt: dict, path: str):
    """The checkpoint's parameters into `agent`, or a one-line error where they do not fit it."""
    try:
        agent.load_state_dict(ckpt["agent"])
    except RuntimeError as e:  # missing, unexpected or reshaped parameters: torch's second line names the first of them
        fail(f"{path!r} does not fit this Agent ({str(e).splitlines()[1].strip()}); an edited Agent, or another version's")


def save_checkpoint(args: Args, rank: int, agent, optimizer, envs, global_step: int, iteration: int, carry: tuple):
    """Write what continuing after `iteration` needs (carry: what the loop takes to the next one), atomically."""
    try:
        env_state = pickle.dumps(envs.envs) if hasattr(envs, "envs") else None  # the sub-envs mid-episode, with their RNGs
    except (pickle.PicklingError, TypeError, AttributeError):  # AttributeError: "Can't pickle local object"
        env_state = None  # video recorders do not pickle (ale-py's vector env has no sub-envs): resume starts new episodes
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    rng["cuda"] = torch.cuda.get_rng_state() if carry[0].is_cuda else None
    wrapper = {name: getattr(envs, name) for name in getattr(envs, "checkpointed", ())}  # a vector wrapper's own state
    ranks = gather({"envs": env_state, "wrapper": wrapper, "carry": walk(torch.Tensor.cpu, carry), "rng": rng})
    if rank > 0:
        return
    checkpoint = {"format": CHECKPOINT_FORMAT, "script": os.path.basename(__file__), "args": asdict(args), "ranks": ranks}
    checkpoint.update(agent=agent.state_dict(), optimizer=optimizer.state_dict(), global_step=global_step, iteration=iteration)
    path = f"{args.run_dir}/{args.exp_name}.pt"
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)  # in memory first: a failed write below is the disk's
    try:
        with open(f"{path}.tmp", "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())  # on the disk before it replaces the last one
        os.replace(f"{path}.tmp", path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(f"{path}.tmp")  # no partial file left to fill the disk
        raise OSError(e.errno, f"the checkpoint of iteration {iteration} could not be written ({e.strerror})", path) from None
    RUN["saved"] = iteration


def restore(args: Args, ckpt: Optional[dict], rank: int, agent, optimizer, envs, carry: tuple) -> tuple:
    """Continue where save_checkpoint left off: (global_step, first iteration, carry); (0, 1, carry) for a new run."""
    if ckpt is None:
        return 0, 1, carry
    own = ckpt["ranks"][rank]
    load_agent(agent, ckpt, args.resume)
    load_optimizer(optimizer, ckpt["optimizer"])
    vars(envs).update(own["wrapper"])
    if own["envs"] is not None:
        envs.envs[:] = pickle.loads(own["envs"])
        carry = walk(torch.Tensor.to, own["carry"], carry)  # each on its device
    else:  # new episodes, seen through the checkpoint's normalization statistics, from seeds this run has not played
        obs, _ = envs.reset(seed=args.seed + ckpt["global_step"] + rank * envs.num_envs)
        carry = (torch.as_tensor(obs).to(carry[0]), *carry[1:])
        if rank == 0:
            print("notice: the checkpoint holds no env state (video recorders, C++ vector envs): new episodes start")
    random.setstate(own["rng"]["python"])
    np.random.set_state(own["rng"]["numpy"])
    torch.set_rng_state(own["rng"]["torch"])
    if carry[0].is_cuda and own["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(own["rng"]["cuda"])
    return ckpt["global_step"], ckpt["iteration"] + 1, carry


def start_run(args: Args, rank: int, ckpt: Optional[dict]) -> Optional[SummaryWriter]:
    """Rank 0 claims --run-dir (one run a directory, writable now) and opens TensorBoard there; stop signals are caught."""
    try:
        if rank == 0:
            os.makedirs(args.run_dir, exist_ok=True)
            RUN["lock"] = open(f"{args.run_dir}/.lock", "a+")  # held until close_run or the end of the process
            if os.name == "posix":  # an fcntl lock dies with its process: a killed run leaves nothing locked
                fcntl = importlib.import_module("fcntl")
                fcntl.lockf(RUN["lock"], fcntl.LOCK_EX | fcntl.LOCK_NB)
            print(os.getpid(), file=RUN["lock"], flush=True)
    except OSError as e:
        if RUN["lock"] is not None and e.errno in (errno.EACCES, errno.EAGAIN):
            fail(f"--run-dir {args.run_dir!r} is in use by another run; let it finish (or stop it), or pass another --run-dir")
        fail(f"cannot write to --run-dir {args.run_dir!r} ({e.strerror}); pass one this user can write, on a disk with space")
    signal.signal(signal.SIGTERM, stop_signal)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # nohup and `&` in a script ignore Ctrl-C: so does the run
        signal.signal(signal.SIGINT, stop_signal)
    if rank > 0:
        return None
    print(f"run dir {args.run_dir}" + (f", resumed from {args.resume} at iteration {ckpt['iteration']}" if ckpt else ""))
    if args.track:
        wandb = importlib.import_module("wandb")
        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True, config=vars(args))
    threading.excepthook = quiet_writer_thread  # TensorBoard's thread fails on a full disk: the next write says it in one line
    # a resumed run's log goes on in the same directory, TensorBoard hiding what a dead run logged after the checkpoint
    writer = SummaryWriter(args.run_dir, purge_step=None if ckpt is None else ckpt["global_step"] + 1)
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))
    return writer


def quiet_writer_thread(hook):
    """threading.excepthook, silent for TensorBoard's writer thread, whose failure the next write raises in the run."""
    if type(hook.thread).__name__ != "_AsyncWriterThread":
        threading.__excepthook__(hook)


def stop_signal(signum, frame):
    """SIGTERM or Ctrl-C stops the run after this iteration; a second Ctrl-C stops it now, a second SIGTERM kills it."""
    if signum == signal.SIGINT and RUN["signals"]:
        raise KeyboardInterrupt
    RUN["signals"].append(signum)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def gather(obj) -> Optional[list]:
    """Every process's obj in rank order, on rank 0 (None on the others); [obj] in a plain run."""
    if not dist.is_initialized():
        return [obj]
    objs = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, objs)
    return objs


def log_episodes(writer: Optional[SummaryWriter], finished: list) -> list:
    """Every process's `finished` episodes to TensorBoard (rank 0), in the order they ended; returns their returns."""
    everywhere = gather(finished.copy())
    finished.clear()
    episodes = sorted(sum(everywhere, []), key=lambda episode: episode[0]) if writer is not None else []
    for episode_step, episode_return, episode_length in episodes:
        writer.add_scalar("charts/episodic_return", episode_return, episode_step)
        writer.add_scalar("charts/episodic_length", episode_length, episode_step)
    return [episode_return for _, episode_return, _ in episodes]


def end_of_iteration(args: Args, rank: int, agent, optimizer, envs, global_step: int, iteration: int, carry: tuple) -> bool:
    """With --save-model, save every --save-every minutes, at the end, and where a signal stops the run; True if one does."""
    due = torch.tensor([RUN["signals"][0] if RUN["signals"] else 0, time.time() - RUN["saved_at"] >= 60 * args.save_every])
    if dist.is_initialized():
        dist.all_reduce(due, op=dist.ReduceOp.MAX)  # a CPU tensor: gloo, no device sync
    saved = f", saved to {args.run_dir}/{args.exp_name}.pt" if args.save_model else ""
    if saved and (due.any() or iteration == args.num_iterations):
        save_checkpoint(args, rank, agent, optimizer, envs, global_step, iteration, carry)
        RUN["saved_at"] = time.time()
    if rank == 0 and (due[0] or iteration == args.num_iterations):
        end = f"stopped by {signal.Signals(int(due[0])).name}" if due[0] else "finished"
        print(f"{end} after iteration {iteration}{saved}")
    return bool(due[0])


def close_run(args: Args, rank: int, writer: Optional[SummaryWriter], envs, finished: list, error):
    """Close everything; exit 0 only for a finished run, else 128 + the stop signal (SIGTERM 143, Ctrl-C 130), or the error."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    envs.close()
    try:
        log_episodes(writer, finished)
        if writer is not None:
            writer.close()
    except OSError as e:  # the log of a full or read-only disk: as far as it got
        error = error or e
    if isinstance(error, KeyboardInterrupt):  # a second Ctrl-C: the iteration in progress is lost
        error = None
        if rank == 0:
            print("interrupted mid-iteration" + (f"; the checkpoint keeps iteration {RUN['saved']}" if RUN["saved"] else ""))
    if isinstance(error, str) and RUN["saved"] is not None:  # a NaN: what the checkpoint on disk holds
        error += f"; {args.run_dir}/{args.exp_name}.pt keeps iteration {RUN['saved']}"
    if isinstance(error, OSError):  # the one place that explains a failed write: a full or read-only disk, no permission
        path = f"{args.run_dir}/{args.exp_name}.pt"
        then = f"--resume {path} continues after iteration {RUN['saved']}" if RUN["saved"] else "run again"
        error = f"{error.filename or args.run_dir!r}: {error.strerror}; free space there, or make it writable; then {then}"
    if writer is not None and args.track:
        importlib.import_module("wandb").finish()
    if RUN["lock"] is not None:
        RUN["lock"].close()
    if dist.is_initialized():
        dist.barrier()  # none exits before rank 0 has saved and closed: torchrun stops the others when one exits with an error
    if error is not None:
        fail(error)
    if dist.is_initialized():
        dist.destroy_process_group()
    if RUN["signals"]:
        raise SystemExit(128 + RUN["signals"][0])


if __name__ == "__main__":
    # ARGUMENTS AND START-UP
    args = tyro.cli(Args)
    torch.set_num_threads(1)  # small networks: one thread avoids the synchronization cost that dominates tiny CPU matmuls
    rank, world_size, device, ckpt = start_up(args)  # checks, torchrun; --resume, --eval-checkpoint: the checkpoint's settings
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    num_envs = args.num_envs // world_size  # this process's share: the run's batch is split evenly between the processes
    batch_size = args.batch_size // world_size
    minibatch_size = args.minibatch_size // world_size

    # SEEDING
    random.seed(args.seed + rank)  # each process its own streams (rank 0's are those of a plain run)
    np.random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # ENVS
    envs = make_vector_env(args, num_envs, rank)

    # AGENT AND OPTIMIZER
    agent = Agent(envs).to(device)
    if args.eval_checkpoint is not None:
        evaluate(args, agent, envs, ckpt, device)  # plays the saved agent instead of training, and exits
    optimizer, policy, update_step = make_update(args, agent, device)  # with --cuda-graphs on CUDA, both CUDA graphs

    # STORAGE
    # dones[t] = 1 where obs[t] is the first observation of a new episode (the previous step ended one);
    # rewards[t] includes gamma * V(final_obs) where step t hit a time limit (bootstrap_truncation).
    storage_shape = (args.num_steps, num_envs)
    obs = torch.zeros(storage_shape + envs.single_observation_space.shape, device=device)  # (num_steps, num_envs, *obs_shape)
    actions = torch.zeros(storage_shape + envs.single_action_space.shape, device=device)  # (num_steps, num_envs, act_dim)
    logprobs = torch.zeros(storage_shape, device=device)  # (num_steps, num_envs)
    rewards = torch.zeros(storage_shape, pin_memory=device.type == "cuda")  # (num_steps, num_envs), on the host until GAE
    dones = torch.zeros(storage_shape, pin_memory=device.type == "cuda")  # (num_steps, num_envs), on the host (pinned on CUDA)
    values = torch.zeros(storage_shape, device=device)  # (num_steps, num_envs)

    next_obs_np, _ = envs.reset(seed=args.seed + rank * num_envs)  # env seeds: the same set as a plain run's
    envs.action_space.seed(args.seed + rank)
    next_obs = torch.as_tensor(next_obs_np, dtype=obs.dtype, device=device)  # (num_envs, *obs_shape)
    next_done = torch.zeros(num_envs)  # (num_envs,), on the host
    carry = (next_obs, next_done)  # what one iteration hands the next; --resume: the checkpoint's, envs mid-episode
    global_step, start_iteration, (next_obs, next_done) = restore(args, ckpt, rank, agent, optimizer, envs, carry)

    # LOGGING
    writer = start_run(args, rank, ckpt)  # rank 0 claims --run-dir and opens TensorBoard there (None elsewhere)
    if rank == 0:
        sizes = f"batch {args.batch_size}, minibatch {args.minibatch_size}, {args.num_iterations} iterations, {device}"
        print(sizes + (f", {world_size} processes of {num_envs} envs" if world_size > 1 else ""))
    recent_returns = deque(maxlen=100)
    finished = []  # (global_step, return, length) of this process's episodes since the last log
    start_time = time.time()
    error = None  # what stopped the run early: a NaN, a failed write (OSError), a second Ctrl-C (KeyboardInterrupt)
    try:
        for iteration in range(start_iteration, args.num_iterations + 1):
            # LEARNING-RATE ANNEALING
            if args.anneal_lr:
                frac = 1.0 - (iteration - 1.0) / args.num_iterations
                set_learning_rate(optimizer, frac * args.learning_rate)

            # ROLLOUT
            for step in range(0, args.num_steps):
                global_step += args.num_envs
                obs[step] = next_obs
                dones[step] = next_done
                with torch.inference_mode():
                    action, logprob, _, value = policy(next_obs)
                values[step] = value
                actions[step] = action
                logprobs[step] = logprob

                next_obs_np, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
                trunc = np.flatnonzero(truncations & ~terminations) if args.bootstrap_truncation else []
                if len(trunc):  # a time limit is not the end of the MDP: r + gamma * V(final_obs) (terminations get none)
                    final_obs = torch.as_tensor(np.stack(infos["final_obs"][trunc]), dtype=obs.dtype, device=device)
                    with torch.inference_mode():
                        reward[trunc] += args.gamma * agent.get_value(final_obs).cpu().numpy()
                rewards[step] = torch.as_tensor(reward)
                next_obs = torch.as_tensor(next_obs_np, dtype=obs.dtype, device=device)
                next_done = torch.as_tensor(terminations | truncations, dtype=torch.float32)
                finished.extend(ended_episodes(infos, global_step))

            # ADVANTAGES
            with torch.inference_mode():
                next_value = agent.get_value(next_obs)
            advantages, returns = compute_gae(  # rewards and dones were stored on the host
                rewards.to(device), values, dones.to(device), next_value, next_done.to(device), args.gamma, args.gae_lambda
            )

            # FLATTEN
            b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)  # (batch, *obs_shape)
            b_logprobs = logprobs.reshape(-1)  # (batch,)
            b_actions = actions.reshape((-1,) + envs.single_action_space.shape)  # (batch, *action_shape)
            b_advantages = advantages.reshape(-1)  # (batch,)
            b_returns = returns.reshape(-1)  # (batch,)
            b_values = values.reshape(-1)  # (batch,)

            # UPDATE
            batch = (b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values)
            b_inds = np.arange(batch_size)
            totals = torch.zeros(len(STATS), device=device)  # sums of the update's statistics (STATS) over its steps
            num_updates = 0
            for _epoch in range(args.update_epochs):
                np.random.shuffle(b_inds)
                epoch_inds = torch.as_tensor(b_inds, device=device)
                for start in range(0, batch_size, minibatch_size):
                    mb_inds = epoch_inds[start : start + minibatch_size]
                    minibatch_stats = update_step(args, agent, optimizer, tuple(b[mb_inds] for b in batch))
                    if minibatch_stats is None:  # approx KL past --target-kl: no further minibatch or epoch
                        break
                    totals += minibatch_stats
                    num_updates += 1
                if minibatch_stats is None:
                    break

            # LOGGING
            stats = dict(zip(STATS, all_mean(totals / max(num_updates, 1)).tolist(), strict=True))  # means, every process
            if not (np.isfinite(stats["loss"]) and np.isfinite(stats["grad_norm"])):
                error = f"the loss became {stats['loss']} (gradient norm {stats['grad_norm']}) at iteration {iteration}"
                break
            recent_returns.extend(log_episodes(writer, finished))  # every process's episodes, in the order they ended
            if rank == 0:
                y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()  # rank 0's share of the batch
                var_y = np.var(y_true)
                explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
                sps = int((iteration - start_iteration + 1) * args.batch_size / (time.time() - start_time))
                writer.add_scalar("charts/learning_rate", float(optimizer.param_groups[0]["lr"]), global_step)
                for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac"):
                    writer.add_scalar(f"losses/{name}", stats[name], global_step)
                writer.add_scalar("losses/explained_variance", explained_var, global_step)
                writer.add_scalar("charts/SPS", sps, global_step)
                eta = (args.num_iterations - iteration) * args.batch_size / max(sps, 1) / 60  # minutes
                recent = f"{np.mean(recent_returns):.2f} ({len(recent_returns)} episodes)" if recent_returns else "n/a"
                print(f"iter {iteration}/{args.num_iterations} step {global_step} SPS {sps} return {recent} ETA {eta:.1f} min")
            carry = (next_obs, next_done)  # what the next iteration takes from this one
            if end_of_iteration(args, rank, agent, optimizer, envs, global_step, iteration, carry):
                break  # a stop signal (saved with --save-model)
    except (KeyboardInterrupt, OSError) as e:
        error = e

    # CLOSE
    close_run(args, rank, writer, envs, finished, error)  # the exit status: 0 only for a run that reached its end
