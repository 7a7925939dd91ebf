"""GAE against its closed form (a sum of discounted TD errors) and a plain-loop reference."""

import numpy as np
import pytest
import torch

from tests.helpers import SCRIPTS, load


def closed_form(rewards, values, dones, next_value, next_done, gamma, lam):
    """A_t = sum_l (gamma * lam)^l delta_{t+l}, summed until the episode ends (float64 numpy)."""
    T, N = rewards.shape
    all_values = np.concatenate([values, next_value[None]])
    starts = np.concatenate([dones, next_done[None]])  # starts[t] = 1: obs t begins a new episode
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                nonterminal = 1.0 - starts[k + 1, n]
                delta = rewards[k, n] + gamma * all_values[k + 1, n] * nonterminal - values[k, n]
                total += weight * delta
                if not nonterminal:
                    break
                weight *= gamma * lam
            adv[t, n] = total
    return adv


def plain_loop(rewards, values, dones, next_value, next_done, gamma, lam):
    """The textbook backward recursion, one env and one float at a time."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        last = 0.0
        for t in reversed(range(T)):
            next_v = next_value[n] if t == T - 1 else values[t + 1, n]
            nonterminal = 1.0 - (next_done[n] if t == T - 1 else dones[t + 1, n])
            delta = rewards[t, n] + gamma * next_v * nonterminal - values[t, n]
            last = delta + gamma * lam * nonterminal * last
            adv[t, n] = last
    return adv


def rollout(seed, T=9, N=3):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(T, N))
    values = rng.normal(size=(T, N))
    dones = np.zeros((T, N))
    dones[0, 0] = 1.0  # an episode starts with the rollout
    dones[4, 0] = 1.0  # and one in the middle
    dones[3, 1] = dones[5, 1] = 1.0  # two episode ends close together
    next_done = np.array([0.0, 1.0, 1.0])  # episodes ending at the rollout's last step
    dones[T - 1, 2] = 1.0  # a one-step episode at the end
    next_value = rng.normal(size=N)
    return rewards, values, dones, next_value, next_done


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0), (1.0, 0.7)])
def test_gae_matches_closed_form_and_plain_loop(script, gamma, lam):
    compute_gae = load(script).compute_gae
    for seed in range(3):
        data = rollout(seed)
        adv, ret = compute_gae(*map(torch.from_numpy, data), gamma, lam)
        expected = closed_form(*data, gamma, lam)
        np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(adv.numpy(), plain_loop(*data, gamma, lam), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ret.numpy(), expected + data[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("script", SCRIPTS)
def test_gae_lambda_one_is_discounted_return_minus_value(script):
    compute_gae = load(script).compute_gae
    rewards, values, _, next_value, _ = rollout(7)
    dones, next_done = np.zeros_like(rewards), np.zeros(rewards.shape[1])
    _, ret = compute_gae(*map(torch.from_numpy, (rewards, values, dones, next_value, next_done)), 0.9, 1.0)
    T = rewards.shape[0]
    expected = [sum(0.9**k * rewards[t + k] for k in range(T - t)) + 0.9 ** (T - t) * next_value for t in range(T)]
    np.testing.assert_allclose(ret.numpy(), np.array(expected), rtol=1e-12)


@pytest.mark.parametrize("script", SCRIPTS)
def test_gae_float32_storage(script):
    """The scripts call it on float32 storage; the result stays float32 and close to the float64 one."""
    compute_gae = load(script).compute_gae
    data = rollout(3)
    adv, _ = compute_gae(*(torch.from_numpy(x).float() for x in data), 0.99, 0.95)
    assert adv.dtype == torch.float32
    np.testing.assert_allclose(adv.numpy(), closed_form(*data, 0.99, 0.95), rtol=1e-5, atol=1e-5)
