"""ppo.py is CleanRL's PPO: with --no-bootstrap-truncation (CleanRL treats a time limit as a termination) it computes
the parameters of tests/cleanrl_reference.py, CleanRL's algorithm as its ppo.py computes it, bit for bit, through
episode ends and time limits. Against CleanRL's own file: benchmark/tools/vs_cleanrl.py (docs/cleanrl.md)."""

import sys
import types

import pytest
import torch
from torch import nn

from tests import cleanrl_reference
from tests.helpers import ROOT, load, run


@pytest.mark.parametrize("env_id", ["CartPole-v1", "tests.envs:CartPoleShort-v1"])
def test_ppo_computes_cleanrls_parameters_bit_for_bit(env_id, tmp_path):
    g = run("ppo.py", "--env-id", env_id, "--total-timesteps", "2560", "--no-bootstrap-truncation", cwd=tmp_path)
    assert g["iteration"] == 5
    torch.set_num_threads(1)  # as ppo.py runs
    reference = cleanrl_reference.train(env_id, seed=1, total_timesteps=2560)
    mine, theirs = dict(g["agent"].named_parameters()), dict(reference.named_parameters())
    assert mine.keys() == theirs.keys()
    for name, parameter in mine.items():
        assert torch.equal(parameter, theirs[name]), name
    torch.manual_seed(1)
    initial = cleanrl_reference.ReferenceAgent(4, 2)  # the parameters both drew at the start: trained since
    assert not any(torch.equal(p, q) for p, q in zip(mine.values(), initial.parameters(), strict=True))


def test_with_the_truncation_bootstrap_the_parameters_differ(tmp_path):
    """The one intended difference on this env: a time limit bootstraps gamma * V(final_obs) (the default)."""
    env_id = "tests.envs:CartPoleShort-v1"
    g = run("ppo.py", "--env-id", env_id, "--total-timesteps", "2560", cwd=tmp_path)
    torch.set_num_threads(1)
    reference = cleanrl_reference.train(env_id, seed=1, total_timesteps=2560)
    assert not all(torch.equal(p, q) for p, q in zip(g["agent"].parameters(), reference.parameters(), strict=True))


def test_the_checker_finds_the_first_iteration_and_the_tensors_that_differ():
    """benchmark/tools/vs_cleanrl.py's comparison, on recorded parameters: CleanRL's names mapped to ours (its Gaussian
    head is `actor_mean`), its order ignored, the first iteration with a difference and each differing tensor's
    largest difference reported; identical runs reported as such; the initial parameters compared first."""
    sys.path.insert(0, str(ROOT / "benchmark" / "tools"))
    import vs_cleanrl

    w, b = torch.ones(2, 2), torch.zeros(2)
    ours = {"names": ["actor.0.weight", "critic.0.bias"], "iterations": [[w, b], [w, b + 1], [w + 2, b + 1]]}
    theirs = {"names": ["critic.0.bias", "actor_mean.0.weight"], "iterations": [[b, w], [b + 1, w], [b + 1.5, w + 2]]}
    result = vs_cleanrl.compare(ours, theirs)
    assert result["first_difference"] == 3 and result["tensors"] == {"critic.0.bias": 0.5}
    assert vs_cleanrl.compare(ours, ours)["first_difference"] is None
    # the initial parameters, where both runs recorded them, are iteration 0
    started_apart = vs_cleanrl.compare({**ours, "initial": [w, b]}, {**theirs, "initial": [b, w + 1]})
    assert started_apart["first_difference"] == 0 and started_apart["tensors"] == {"actor.0.weight": 1.0}
    assert vs_cleanrl.compare({**ours, "initial": [w, b]}, {**theirs, "initial": [b, w]})["first_difference"] == 3


def test_the_atari_agent_starts_from_cleanrls_initial_parameters():
    """ppo_atari.py's Agent draws its initial parameters in CleanRL's ppo_atari.py's order (each layer of the Nature CNN
    trunk made and initialized, then the actor, then the critic): one seed gives the same parameters (docs/cleanrl.md)."""
    module = load("ppo_atari.py")
    envs = types.SimpleNamespace(single_action_space=types.SimpleNamespace(n=4))
    torch.manual_seed(1)
    agent = module.Agent(envs)
    torch.manual_seed(1)
    trunk = [(nn.Conv2d, 4, 32, 8, 4), (nn.Conv2d, 32, 64, 4, 2), (nn.Conv2d, 64, 64, 3, 1)]
    reference = []
    for conv, channels_in, channels_out, kernel, stride in trunk:
        reference.append(cleanrl_reference.init(conv(channels_in, channels_out, kernel, stride=stride)))
    reference.append(cleanrl_reference.init(nn.Linear(64 * 7 * 7, 512)))
    reference.append(cleanrl_reference.init(nn.Linear(512, 4), std=0.01))  # the actor
    reference.append(cleanrl_reference.init(nn.Linear(512, 1), std=1.0))  # the critic
    names = [f"network.{i}" for i in (0, 2, 4, 7)] + ["actor", "critic"]
    mine = dict(agent.named_parameters())
    assert len(mine) == 2 * len(reference)
    for name, layer in zip(names, reference, strict=True):
        assert torch.equal(mine[f"{name}.weight"], layer.weight), name
        assert torch.equal(mine[f"{name}.bias"], layer.bias), name
