"""CleanRL's PPO for discrete actions, as its ppo.py computes it, written here from its algorithm (no code of CleanRL's
is in this repository): torch.distributions.Categorical for the policy, Adam with its default options, GAE by the
backward loop with the last step's bootstrap in a branch, numpy indices for the minibatches, a time limit treated as
a termination, and the vector env autoresetting in the same step (gymnasium 0.29's behaviour, which CleanRL pins).
tests/test_cleanrl.py checks that ppo.py --no-bootstrap-truncation computes the same parameters, bit for bit;
benchmark/tools/vs_cleanrl.py checks ppo.py against CleanRL's own file."""

import random

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.categorical import Categorical

DEFAULTS = dict(learning_rate=2.5e-4, num_envs=4, num_steps=128, gamma=0.99, gae_lambda=0.95, num_minibatches=4)
DEFAULTS.update(update_epochs=4, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)


def init(layer: nn.Linear, std: float = np.sqrt(2)) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def mlp(inputs: int, outputs: int, std: float) -> nn.Sequential:
    return nn.Sequential(
        init(nn.Linear(inputs, 64)), nn.Tanh(), init(nn.Linear(64, 64)), nn.Tanh(), init(nn.Linear(64, outputs), std)
    )


class ReferenceAgent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.critic = mlp(obs_dim, 1, 1.0)  # built first: the order in which the parameters draw their initial values
        self.actor = mlp(obs_dim, n_actions, 0.01)

    def value(self, x):
        return self.critic(x)  # (B, 1)

    def act(self, x, action=None):
        policy = Categorical(logits=self.actor(x))
        if action is None:
            action = policy.sample()
        return action, policy.log_prob(action), policy.entropy(), self.critic(x)


def train(env_id: str, seed: int, total_timesteps: int, **overrides) -> ReferenceAgent:
    """The agent after every iteration of a run of total_timesteps, from the seed, on the CPU."""
    c = {**DEFAULTS, **overrides}
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make(env_id)) for _ in range(c["num_envs"])],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = ReferenceAgent(int(np.prod(envs.single_observation_space.shape)), envs.single_action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=c["learning_rate"], eps=1e-5)
    T, N = c["num_steps"], c["num_envs"]
    batch_size = T * N
    minibatch_size = batch_size // c["num_minibatches"]
    iterations = total_timesteps // batch_size
    obs = torch.zeros((T, N) + envs.single_observation_space.shape)
    actions, logprobs, rewards, dones, values = (torch.zeros(T, N) for _ in range(5))
    observation, _ = envs.reset(seed=seed)
    next_obs, next_done = torch.Tensor(observation), torch.zeros(N)
    for iteration in range(1, iterations + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / iterations) * c["learning_rate"]
        for t in range(T):
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
            values[t], actions[t], logprobs[t] = value.flatten(), action, logprob
            observation, reward, terminated, truncated, _ = envs.step(action.numpy())
            rewards[t] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(observation), torch.Tensor(np.logical_or(terminated, truncated))
        with torch.no_grad():
            next_value = agent.value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            last = 0
            for t in reversed(range(T)):
                if t == T - 1:
                    nonterminal, following = 1.0 - next_done, next_value
                else:
                    nonterminal, following = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + c["gamma"] * following * nonterminal - values[t]
                advantages[t] = last = delta + c["gamma"] * c["gae_lambda"] * nonterminal * last
            returns = advantages + values
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs, b_actions, b_advantages = logprobs.reshape(-1), actions.reshape(-1), advantages.reshape(-1)
        b_returns, b_values = returns.reshape(-1), values.reshape(-1)
        indices = np.arange(batch_size)
        for _ in range(c["update_epochs"]):
            np.random.shuffle(indices)
            for start in range(0, batch_size, minibatch_size):
                mb = indices[start : start + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.act(b_obs[mb], b_actions.long()[mb])
                ratio = (newlogprob - b_logprobs[mb]).exp()
                adv = b_advantages[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clip = c["clip_coef"]
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
                newvalue = newvalue.view(-1)
                clipped = b_values[mb] + torch.clamp(newvalue - b_values[mb], -clip, clip)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (clipped - b_returns[mb]) ** 2).mean()
                loss = pg_loss - c["ent_coef"] * entropy.mean() + v_loss * c["vf_coef"]
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), c["max_grad_norm"])
                optimizer.step()
    envs.close()
    return agent
