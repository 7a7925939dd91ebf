"""The clipped surrogate: its gradient vanishes exactly where clipping removes the incentive."""

import pytest
import torch

from tests.helpers import SCRIPTS, load


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
