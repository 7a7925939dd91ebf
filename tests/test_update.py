"""The one update of all four scripts and its CUDA-graph machinery, checked on the CPU: nested tuples in a recorded
step's arguments, the optimizer's options and learning rate across checkpoints, --cuda-graphs on the CPU, the help,
and ppo_atari.py's automatic env groups. What needs a GPU is in tests/test_cuda.py."""

import dataclasses

import numpy as np
import pytest
import torch
import tyro

from tests.helpers import SCRIPTS, TINY, error_of, load, params, run, same_params


@pytest.mark.parametrize("script", SCRIPTS)
def test_graph_arguments_are_found_in_tuples_nested_to_any_depth(script):
    """A recorded step copies each call's tensors into the ones it was recorded on: a tensor it does not find, such as
    ppo_rnn.py's state (h, c) inside a minibatch tuple, would be replayed stale. walk() reaches every tensor in nested
    tuples, with its counterparts, and keeps anything else as it is."""
    module = load(script)
    x, v, h, c = torch.arange(4.0), torch.zeros(2), torch.zeros(1, 2, 3), torch.ones(1, 2, 3)
    args = ("args", x, (v, (h, c)), 7)
    static = module.walk(torch.clone, args)
    assert static[0] == "args" and static[3] == 7 and isinstance(static[2][1], tuple)
    pairs = [(static[1], x), (static[2][0], v), (static[2][1][0], h), (static[2][1][1], c)]
    assert all(torch.equal(a, b) and a is not b for a, b in pairs)
    later = ("args", x + 1, (v + 2, (h + 3, c + 4)), 7)
    module.walk(torch.Tensor.copy_, static, later)  # what a replay does before it runs
    assert torch.equal(static[1], x + 1) and torch.equal(static[2][1][1], c + 4)


def update_inputs(script: str, tmp_path) -> tuple:
    """(module, args, agent, a minibatch as the update takes it) from one tiny iteration of the script: its first
    minibatch's rows (ppo_rnn.py: the first env's whole sequence and its state at the rollout's start)."""
    from tests.helpers import interrupt_at_call

    with pytest.MonkeyPatch.context() as m:
        interrupt_at_call(m, torch.optim.Adam, "step", 1)  # stop at the first step: the batch is whole, the agent untouched
        g = run(script, *TINY, "--total-timesteps", "32", cwd=tmp_path)
    if "mb_state" in g:
        return g, (*(b[g["mb_inds"]] for b in g["batch"]), g["mb_state"])
    return g, tuple(b[g["mb_inds"]] for b in g["batch"])


class Recorder(torch.optim.Optimizer):
    """An optimizer that keeps the gradients it is asked to step with, and moves nothing."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.0})
        self.grads = []

    def step(self, closure=None):
        self.grads.append([p.grad.clone() for p in self.param_groups[0]["params"]])


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_update_composes_the_loss_and_its_gradient_step(script, tmp_path):
    """update_minibatch's one step against a loss composed here from the scripts' own pieces: the clipped surrogate of
    advantages normalized over this minibatch, minus ent_coef times the entropy, plus vf_coef times the value loss (with
    coefficients no script has by default), its gradient clipped to --max-grad-norm. Gradients left from before are
    zeroed first. A flipped entropy sign, advantages normalized over the batch or not at all, a coefficient on the wrong
    term or a missing clip each move the loss or the step."""
    g, minibatch = update_inputs(script, tmp_path)
    module, agent = g["update_minibatch"].__globals__, g["agent"]
    args = dataclasses.replace(g["args"], ent_coef=0.3, vf_coef=0.7, max_grad_norm=0.01, clip_coef=0.2, target_kl=None)
    for p in agent.parameters():
        p.grad = torch.full_like(p, 100.0)  # a stale gradient that must not reach the step
    optimizer = Recorder(agent.parameters())
    stats = {name: value.item() for name, value in g["update_minibatch"](args, agent, optimizer, minibatch).items()}

    if "mb_state" in g:  # ppo_rnn.py replays the sequence from its state, with its dones
        _, newlogprob, entropy, newvalue, _ = agent.get_action_and_value(
            minibatch[0], minibatch[7], minibatch[6], minibatch[2]
        )
    else:
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(minibatch[0], minibatch[2])
    ratio = (newlogprob - minibatch[1]).exp()
    advantages = minibatch[3]
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    kept = 1.0 - minibatch[6] if script == "ppo_atari.py" else torch.ones_like(advantages)
    weights = kept / kept.mean().clamp(min=1.0 / len(kept))
    pg_loss = module["policy_loss"](advantages * weights, ratio, args.clip_coef)
    v_loss = module["value_loss"](newvalue, minibatch[5], minibatch[4], args.clip_coef)
    entropy_loss = (entropy * kept).sum() / kept.sum().clamp(min=1.0)
    loss = pg_loss - 0.3 * entropy_loss + 0.7 * v_loss
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-6, abs=1e-7)
    assert stats["entropy"] == pytest.approx(entropy_loss.item(), rel=1e-6)
    assert stats["value_loss"] == pytest.approx(v_loss.item(), rel=1e-6)
    grads = torch.autograd.grad(loss, list(agent.parameters()))
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grad) for grad in grads]))
    assert stats["grad_norm"] == pytest.approx(norm.item(), rel=1e-5) and norm > 0.01  # clipping was due
    (stepped,) = optimizer.grads
    assert torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(s) for s in stepped])).item() == pytest.approx(
        0.01, rel=1e-4
    )
    for mine, reference in zip(stepped, grads, strict=True):
        torch.testing.assert_close(mine, reference * (0.01 / (norm + 1e-6)), rtol=1e-4, atol=1e-9)


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
    assert (
        graphed.param_groups[0]["lr"] is lr
        and lr.item() == pytest.approx(5e-4)
        and graphed.param_groups[0]["foreach"] is False
    )
    module.set_learning_rate(graphed, 1e-4)  # annealing fills the same tensor
    assert graphed.param_groups[0]["lr"] is lr and lr.item() == pytest.approx(1e-4)


@pytest.mark.parametrize("script", SCRIPTS)
def test_cuda_graphs_on_the_cpu_change_nothing(script, tmp_path, capsys):
    argv = [*TINY, "--total-timesteps", "96"]
    a = run(script, *argv, cwd=tmp_path / "a")
    b = run(script, *argv, "--cuda-graphs", cwd=tmp_path / "b")
    assert "notice: --cuda-graphs needs CUDA" in capsys.readouterr().out
    assert type(b["update_minibatch"]).__name__ == "function"  # not recorded
    assert not isinstance(b["optimizer"].param_groups[0]["lr"], torch.Tensor)
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
    envs = module.make_vector_env(module.Args(num_envs=num_envs, run_dir="runs/test"), num_envs, 0)
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
