"""The losses: the clipped surrogate's gradient vanishes exactly where clipping removes the incentive, and the value
loss of every script's update is the closed form, clipped (--clip-vloss) or not."""

import gymnasium as gym
import pytest
import torch
from torch.distributions.categorical import Categorical

from tests.helpers import SCRIPTS, TINY, agent_outputs, interrupt_at_call, load, run


@pytest.mark.parametrize("script", SCRIPTS)
def test_clipped_surrogate_gradient(script):
    policy_loss = load(script).policy_loss
    eps = 0.2
    #                       clipped: no gradient     |  unclipped: gradient -A/N
    ratio = torch.tensor([1.5, 0.5, 1.2001, 0.7999, 0.5, 1.5, 1.1, 0.9, 1.0], requires_grad=True)
    adv = torch.tensor([2.0, -3.0, 1.0, -1.0, 2.0, -3.0, 1.5, -0.5, 4.0])
    loss = policy_loss(adv, ratio, eps)
    loss.backward()
    n = len(ratio)
    expected_grad = torch.where(torch.arange(n) < 4, torch.zeros(n), -adv / n)
    torch.testing.assert_close(ratio.grad, expected_grad, rtol=0, atol=1e-7)
    # and the value: the pessimistic (larger) of the two negated surrogates
    expected = torch.max(-adv * ratio, -adv * ratio.clamp(1 - eps, 1 + eps)).mean()
    torch.testing.assert_close(loss, expected)


# rows of (d, r): the rollout's value is V - d and the return V + r, for the new value V. Unclipped, a row's squared
# error is r^2; clipped, the new value moves at most eps from the rollout's, and the error is (clip(d) - d - r)^2.
ROWS = [(2.5, 1.0), (2.5, -1.0), (0.5, 0.3), (-2.5, -1.0), (-2.5, 0.5)]  # d in units of eps


def closed_form(rows: list, eps: float, clipped: bool) -> float:
    errors = []
    for d, r in rows:
        d *= eps
        clip = max(-eps, min(eps, d))
        errors.append(max(r**2, (clip - d - r) ** 2) if clipped else r**2)
    return 0.5 * sum(errors) / len(errors)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("clip_vloss", [True, False])
def test_value_loss_is_the_closed_form(script, clip_vloss, tmp_path, monkeypatch):
    """The value loss that update_minibatch computes and reports, on a real batch of the script whose rollout values
    and returns are set around the agent's own values: with --clip-vloss, 0.5 * the mean over rows of
    max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2), the clip binding on some rows (the clipped error the
    larger) and not on others; without, 0.5 * the mean of (V - R)^2. eps is the script's --clip-coef (Atari's 0.1)."""
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 1)  # a real batch, before any step
    g = run(script, *TINY, "--total-timesteps", "64", *([] if clip_vloss else ["--no-clip-vloss"]), cwd=tmp_path)
    minibatch = (*g["batch"], g["initial_rnn_state"]) if "initial_rnn_state" in g else g["batch"]  # every env's rows
    agent, eps = g["agent"], g["args"].clip_coef
    newvalue = agent_outputs(g, minibatch)[3]
    rows = [ROWS[i % len(ROWS)] for i in range(len(newvalue))]
    d, r = (torch.tensor([row[k] for row in rows]) for k in (0, 1))
    values, returns = newvalue - d * eps, newvalue + r
    minibatch = (*minibatch[:4], returns, values, *minibatch[6:])
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-9)
    stats = g["update_minibatch"](g["args"], agent, optimizer, minibatch)
    value_loss = stats["value_loss"].item()
    assert value_loss == pytest.approx(closed_form(rows, eps, clip_vloss), rel=1e-5)
    if clip_vloss:  # the case in point: the script's loss took the clipped error where it is the larger
        assert value_loss > 1.1 * closed_form(rows, eps, False)


@pytest.mark.parametrize("script", SCRIPTS)
def test_value_loss_function(script):
    value_loss = load(script).value_loss
    eps = 0.2
    newvalue = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0])
    d, r = (torch.tensor([row[k] for row in ROWS]) for k in (0, 1))
    values, returns = newvalue - d * eps, newvalue + r
    assert value_loss(newvalue, values, returns, eps).item() == pytest.approx(closed_form(ROWS, eps, True), rel=1e-6)
    assert value_loss(newvalue, values, returns, None).item() == pytest.approx(closed_form(ROWS, eps, False), rel=1e-6)


@pytest.mark.parametrize("script", ["ppo.py", "ppo_atari.py"])
def test_the_written_out_categorical_is_torchs_bit_for_bit(script):
    """get_action_and_value's sample, log-probability and entropy, written out without torch.distributions.Categorical:
    the same action from the same seed, the same numbers, and the same gradients of a loss of both, bit for bit."""
    module = load(script)
    envs = gym.vector.SyncVectorEnv(
        [module.make_env("CartPole-v1" if script == "ppo.py" else "BreakoutNoFrameskip-v4", 0, False, "t")]
    )
    agent = module.Agent(envs)
    torch.manual_seed(1)
    x = torch.rand(64, *envs.single_observation_space.shape) * (255 if script == "ppo_atari.py" else 1)
    logits = agent.actor(agent.network(x / 255.0)) if script == "ppo_atari.py" else agent.actor(x)
    reference = Categorical(logits=logits)
    torch.manual_seed(0)
    action = reference.sample()
    torch.manual_seed(0)
    sampled = agent.get_action_and_value(x)[0]
    assert torch.equal(sampled, action) and len(action.unique()) > 1
    weights = torch.randn(64)

    def gradients(logprob, entropy) -> list:
        agent.zero_grad()
        ((logprob * weights).mean() - 0.01 * entropy.mean()).backward()
        return [p.grad.clone() for p in agent.actor.parameters()]

    _, logprob, entropy, _ = agent.get_action_and_value(x, action)
    assert torch.equal(logprob, reference.log_prob(action)) and torch.equal(entropy, reference.entropy())
    ours = gradients(logprob, entropy)
    logits = agent.actor(agent.network(x / 255.0)) if script == "ppo_atari.py" else agent.actor(x)
    reference = Categorical(logits=logits)
    theirs = gradients(reference.log_prob(action), reference.entropy())
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
