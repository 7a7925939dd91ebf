"""The one update of all four scripts and its CUDA-graph machinery, checked on the CPU: nested tuples in a recorded
step's arguments, the optimizer's options and learning rate across checkpoints, --cuda-graphs on the CPU, the help,
and ppo_atari.py's automatic env groups. What needs a GPU is in tests/test_cuda.py."""

import numpy as np
import pytest
import torch
import tyro

from tests.helpers import SCRIPTS, TINY, error_of, load, params, run, same_params


@pytest.mark.parametrize("script", SCRIPTS)
def test_graph_arguments_are_found_in_tuples_nested_to_any_depth(script):
    """A recorded step copies each call's tensors into the ones it was recorded on: a tensor it does not find, such as
    ppo_rnn.py's state (h, c) inside a minibatch tuple, would be replayed stale. The copies are new tensors, equal."""
    module = load(script)
    x, v, h, c = torch.arange(4.0), torch.zeros(2), torch.zeros(1, 2, 3), torch.ones(1, 2, 3)
    args = ("args", x, (v, (h, c)), 7)
    found = module.tensors_of(args)
    assert len(found) == 4 and all(a is b for a, b in zip(found, [x, v, h, c], strict=True))
    static = module.copied(args)
    assert static[0] == "args" and static[3] == 7 and isinstance(static[2][1], tuple)
    assert all(torch.equal(a, b) and a is not b for a, b in zip(module.tensors_of(static), found, strict=True))


def adam_steps(optimizer, parameter, n=2) -> dict:
    for _ in range(n):
        optimizer.zero_grad()
        (parameter**2).sum().backward()
        optimizer.step()
    return optimizer.state_dict()


def test_load_optimizer_keeps_the_runs_options_and_learning_rate_tensor():
    """A checkpoint's Adam state goes into the run's optimizer as it is set up: a --cuda-graphs checkpoint (its learning
    rate a tensor) into a foreach Adam with a float rate, and a float checkpoint into the tensor that a recorded step reads,
    filled in place, so that annealing it reaches the recorded step (load_state_dict alone would swap in the saved ones)."""
    module = load("ppo.py")
    parameter = torch.nn.Parameter(torch.linspace(-1, 1, 5))
    saved = adam_steps(torch.optim.Adam([parameter], lr=torch.tensor(1e-3), eps=1e-5, foreach=False), parameter)
    plain = torch.optim.Adam([parameter], lr=2.5e-4, eps=1e-5, foreach=True)
    module.load_optimizer(plain, saved)
    assert plain.param_groups[0]["lr"] == pytest.approx(1e-3) and not isinstance(plain.param_groups[0]["lr"], torch.Tensor)
    assert plain.param_groups[0]["foreach"] is True
    assert torch.equal(plain.state_dict()["state"][0]["exp_avg"], saved["state"][0]["exp_avg"])
    adam_steps(plain, parameter)  # a tensor learning rate with foreach=True would raise here

    lr = torch.tensor(2.5e-4)
    graphed = torch.optim.Adam([parameter], lr=lr, eps=1e-5, foreach=False)
    module.load_optimizer(graphed, adam_steps(torch.optim.Adam([parameter], lr=5e-4, eps=1e-5, foreach=True), parameter))
    assert graphed.param_groups[0]["lr"] is lr and lr.item() == pytest.approx(5e-4) and graphed.param_groups[0]["foreach"] is False
    module.set_learning_rate(graphed, 1e-4)  # annealing fills the same tensor
    assert graphed.param_groups[0]["lr"] is lr and lr.item() == pytest.approx(1e-4)


@pytest.mark.parametrize("script", SCRIPTS)
def test_cuda_graphs_on_the_cpu_change_nothing(script, tmp_path, capsys):
    argv = [*TINY, "--total-timesteps", "96"]
    a = run(script, *argv, cwd=tmp_path / "a")
    b = run(script, *argv, "--cuda-graphs", cwd=tmp_path / "b")
    assert "notice: --cuda-graphs needs CUDA" in capsys.readouterr().out
    assert b["update_step"] is b["update_minibatch"] and not isinstance(b["optimizer"].param_groups[0]["lr"], torch.Tensor)
    assert same_params(params(a["agent"]), params(b["agent"]))


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_shows_cuda_graphs(script, capsys):
    with pytest.raises(SystemExit):
        tyro.cli(load(script).Args, args=["--help"])
    assert "--cuda-graphs" in capsys.readouterr().out


@pytest.mark.parametrize("num_envs,groups", [(1, 1), (3, 1), (4, 2), (6, 2)])
def test_automatic_env_groups_split_each_process_envs_in_two_only_where_they_divide(num_envs, groups, monkeypatch):
    """On a GPU the native envs step in two groups by default; an odd number of envs per process (--num-envs 3, or 6 envs
    on 2 torchrun processes) keeps them in one, and every env steps."""
    module = load("ppo_atari.py")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    envs = module.make_envs(module.Args(num_envs=num_envs), num_envs, "test", 0)
    assert len(envs.parts) == groups
    obs, _ = envs.reset(seed=1)
    for g, part in enumerate(envs.parts):
        envs.send(np.zeros(len(range(num_envs)[part]), dtype=np.int64), g)
    stepped = np.concatenate([envs.recv(g)[0] for g in range(groups)])
    assert obs.shape == stepped.shape == (num_envs, 4, 84, 84)
    envs.close()


def test_env_groups_that_cannot_be_are_one_line_errors(tmp_path):
    """An explicit --env-groups must divide each process's envs and needs the native envs."""
    assert "0 or a divisor of 8" in error_of("ppo_atari.py", "--env-groups", "3", cwd=tmp_path)
    assert "no --no-native-envs" in error_of("ppo_atari.py", "--env-groups", "2", "--no-native-envs", cwd=tmp_path)
    assert not (tmp_path / "runs").exists()
