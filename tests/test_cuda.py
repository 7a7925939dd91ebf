"""The scripts on CUDA, where `--cuda` (the default) puts them on a GPU machine: training, determinism,
exact resume, the first minibatch's ratio within a bound, checkpoints that cross between CUDA and
the CPU, and --cuda-graphs (a replayed update equal to the eager one for every script; resume with the
learning rate still annealing). Skipped where torch sees no CUDA device; the rest of the suite pins the
CPU (`--no-cuda`)."""

import copy
import re

import gymnasium as gym
import pytest
import torch
from ale_py.vector_env import AtariVectorEnv

from tests.helpers import (
    EXACT_RESUME,
    QUICK_ENV,
    ROOT,
    TINY,
    VARIANTS,
    checkpoint_path,
    cli,
    interrupt_at_call,
    minibatch_ratio,
    params,
    run,
    same_params,
    signal_at_call,
)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (run the suite on a GPU machine for this section)"
)

# cuBLAS and cuDNN pick kernels by shape (and cuDNN convolutions round through TF32 on Ampere and later),
# so the rollout's batch of num_envs and the update's minibatch do not round alike: the recomputed
# log-probabilities match the stored ones to within this, not bit for bit (the CPU bound is in test_training.py).
CUDA_LOGPROB_BOUND = 1e-4


@pytest.mark.parametrize("graphs", [[], ["--cuda-graphs"]], ids=["eager", "graphs"])
@pytest.mark.parametrize("script", VARIANTS)
def test_trains_on_cuda_and_saves(script, graphs, tmp_path):
    # with --cuda-graphs the rollout's policy step is recorded too: nothing in it may wait on the GPU (torch.normal did)
    argv = ["--env-id", QUICK_ENV[script], *TINY, "--total-timesteps", "640", "--save-model", "--cuda", *graphs]
    result = cli(script, *argv, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^batch \d+, minibatch \d+, 20 iterations, cuda:0$", result.stdout, re.M), result.stdout
    assert "iter 20/20 step 640" in result.stdout
    assert ("notice: eager CUDA ran" in result.stdout) == (not graphs)  # the start-up line that points to --cuda-graphs
    ckpt = torch.load(checkpoint_path(tmp_path), map_location="cpu", weights_only=False)
    assert ckpt["ranks"][0]["rng"]["cuda"] is not None and all(torch.isfinite(p).all() for p in ckpt["agent"].values())


@pytest.mark.parametrize("script", VARIANTS)
def test_same_seed_same_parameters_on_cuda(script, tmp_path):
    argv = [*TINY, "--total-timesteps", "320", "--cuda"]
    a = run(script, *argv, "--seed", "3", cwd=tmp_path)["agent"]
    assert all(p.is_cuda for p in a.parameters())
    b = run(script, *argv, "--seed", "3", cwd=tmp_path)["agent"]
    c = run(script, *argv, "--seed", "4", cwd=tmp_path)["agent"]
    assert same_params(params(a), params(b)) and not same_params(params(a), params(c))


@pytest.mark.parametrize("script", VARIANTS)
def test_interrupted_then_resumed_equals_uninterrupted_on_cuda(script, tmp_path, monkeypatch):
    argv = [*TINY, "--total-timesteps", "320", "--save-model", "--cuda", *EXACT_RESUME[script]]
    straight = params(run(script, *argv, cwd=tmp_path / "a")["agent"])
    with monkeypatch.context() as m:
        signal_at_call(m, gym.vector.SyncVectorEnv, "step", 5 * 16 + 7)  # Ctrl-C in iteration 6: it ends, and is saved
        with pytest.raises(SystemExit):
            run(script, *argv, cwd=tmp_path / "b")
    resumed = run(script, "--resume", str(checkpoint_path(tmp_path / "b")), "--cuda", cwd=tmp_path / "c")
    assert resumed["global_step"] == 320
    assert same_params(straight, params(resumed["agent"]))


@pytest.mark.parametrize("script", VARIANTS)
@pytest.mark.parametrize("iteration", [1, 2])
def test_first_minibatch_ratio_is_one_within_a_bound_on_cuda(script, iteration, tmp_path, monkeypatch):
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 1 + 8 * (iteration - 1))  # 4 epochs x 2 minibatches
    argv = [
        "--env-id",
        QUICK_ENV[script],
        "--num-envs",
        "4",
        "--num-steps",
        "128",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "4",
    ]
    g = run(script, *argv, "--total-timesteps", "1024", "--cuda", cwd=tmp_path)
    newlogprob, ratio = minibatch_ratio(g)
    assert g["iteration"] == iteration and newlogprob.is_cuda
    deviation = (newlogprob - g["b_logprobs"][g["mb_inds"]]).abs().max().item()
    print(f"{script} iteration {iteration} on CUDA: max |log-prob difference| {deviation:.3g}")  # seen with pytest -s
    assert deviation <= CUDA_LOGPROB_BOUND, f"max |log-prob difference| {deviation:.3g}"
    assert (ratio - 1).abs().max().item() <= 2 * CUDA_LOGPROB_BOUND


@pytest.mark.parametrize("script", VARIANTS)
@pytest.mark.parametrize("train,evaluate", [("--cuda", "--no-cuda"), ("--no-cuda", "--cuda")])
def test_checkpoint_evaluates_on_the_other_device(script, train, evaluate, tmp_path):
    env = ["--env-id", QUICK_ENV[script]]
    result = cli(script, *env, *TINY, "--total-timesteps", "320", "--save-model", train, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    result = cli(
        script, *env, "--eval-checkpoint", str(checkpoint_path(tmp_path)), "--eval-episodes", "2", evaluate, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^eval: 2 episodes \(sampled\), return -?[\d.]+ ± [\d.]+$", result.stdout, flags=re.M)


def test_phases_times_a_cuda_run_with_sync(tmp_path):
    # benchmark/tools/phases.py --sync synchronizes after every top-level line once the script has made a CUDA context
    result = cli(
        "ppo_atari.py",
        *TINY,
        "--total-timesteps",
        "96",
        "--cuda",
        cwd=tmp_path,
        via=[str(ROOT / "benchmark" / "tools" / "phases.py"), "--sync"],
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^batch \d+, minibatch \d+, 3 iterations, cuda:0$", result.stdout, re.M), result.stdout
    assert "ppo_atari.py: 3 iterations," in result.stdout
    assert re.search(r"^\| ROLLOUT \| [\d.]+ \| [\d.]+% \|$", result.stdout, re.M)


@pytest.mark.parametrize("script", VARIANTS)
def test_cuda_graph_update_step_equals_the_eager_one(script, tmp_path, monkeypatch):
    """--cuda-graphs: a recorded and replayed minibatch step computes what the same step run as it is computes (the graph
    removes launches, nothing else): parameters, Adam's state and the statistics, bit for bit, on a real batch. ppo_rnn.py
    to float rounding: recorded, its replay runs the cell one step at a time where the eager one takes whole stretches;
    its minibatch holds the state (h, c) in a nested tuple, which the replay must take from each call."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)  # as the script sets it
    with monkeypatch.context() as m:
        interrupt_at_call(m, torch.optim.Adam, "step", 1)  # the first rollout's batch, before any step
        argv = ["--env-id", QUICK_ENV[script], "--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2"]
        g = run(script, *argv, "--total-timesteps", "256", "--cuda", cwd=tmp_path)
    gen = torch.Generator().manual_seed(0)

    def minibatch() -> tuple:
        if "mb_state" in g:  # ppo_rnn.py: two envs' whole sequences, replayed from their state at the rollout's start
            envs = torch.randperm(4, generator=gen)[:2].cuda()
            inds = g["flatinds"][:, envs].flatten()
            return (*(b[inds] for b in g["batch"]), tuple(s[:, envs] for s in g["initial_rnn_state"]))
        inds = torch.randperm(128, generator=gen)[:64].cuda()
        return tuple(b[inds] for b in g["batch"])

    minibatches = [minibatch() for _ in range(8)]
    runs = []
    for graphed in (False, True):
        agent = copy.deepcopy(g["agent"])
        lr = torch.tensor(2.5e-4, device="cuda")
        optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, fused=True, capturable=True)
        step = g["CudaGraph"](g["update_minibatch"]) if graphed else g["update_minibatch"]
        stats = []
        for i, mb in enumerate(minibatches):  # 3 as they are, the 4th recorded, then replays with other minibatches and rates
            lr.fill_(2.5e-4 * (1 - i / 8))
            stats.append(torch.stack(list(step(g["args"], agent, optimizer, mb).values())))  # a copy of the outputs
        assert not graphed or step.graph is not None
        runs.append((params(agent), optimizer.state_dict()["state"], torch.stack(stats)))
    (eager, eager_state, eager_stats), (graph, graph_state, graph_stats) = runs
    if "mb_state" in g:
        for a, b in zip(eager, graph, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(eager_stats, graph_stats, rtol=1e-4, atol=1e-6)
    else:
        assert same_params(eager, graph)
        assert all(torch.equal(eager_state[k]["exp_avg_sq"], graph_state[k]["exp_avg_sq"]) for k in eager_state)
        assert torch.equal(eager_stats, graph_stats)


@pytest.mark.parametrize("envs", ["native", "gymnasium"])
def test_cuda_graphs_train_deterministically_and_resume(envs, tmp_path, monkeypatch):
    """ppo_atari.py --cuda-graphs: the same seed gives the same parameters, other numbers than without graphs (fused
    Adam), the learning rate annealed in place on the GPU. Stopped after iteration 4 of 8 and resumed, the run trains
    iterations 5-8 with the graphs recorded anew, the learning rate still the GPU tensor they read and still annealed,
    and (on the gymnasium path, whose envs pickle) ends with the parameters of the run that never stopped."""
    argv = [
        "--num-envs",
        "4",
        "--num-steps",
        "16",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "2",
        "--total-timesteps",
        "512",
    ]
    argv += ["--cuda", "--cuda-graphs", *(["--no-native-envs"] if envs == "gymnasium" else [])]
    a = run("ppo_atari.py", *argv, cwd=tmp_path / "a")
    b = run("ppo_atari.py", *argv, cwd=tmp_path / "b")
    c = run("ppo_atari.py", *[x for x in argv if x != "--cuda-graphs"], cwd=tmp_path / "c")
    assert type(a["update_minibatch"]).__name__ == "CudaGraph" and type(c["update_minibatch"]).__name__ == "function"
    assert len(a["envs"].parts) == (2 if envs == "native" else 1)
    assert same_params(params(a["agent"]), params(b["agent"])) and not same_params(params(a["agent"]), params(c["agent"]))
    assert a["optimizer"].param_groups[0]["lr"].item() == pytest.approx(2.5e-4 / 8)  # annealed in place, as the graph reads it
    per_iteration = 16 * len(a["envs"].parts)  # the rollout's calls of the step method below
    with monkeypatch.context() as m:
        step_class, method = (AtariVectorEnv, "recv") if envs == "native" else (gym.vector.SyncVectorEnv, "step")
        signal_at_call(m, step_class, method, 3 * per_iteration + 7)  # Ctrl-C in iteration 4: it ends, and is saved
        with pytest.raises(SystemExit):
            run("ppo_atari.py", *argv, "--save-model", cwd=tmp_path / "d")
    path = checkpoint_path(tmp_path / "d")
    assert torch.load(path, map_location="cpu", weights_only=False)["iteration"] == 4  # the resumed run has 4 to train
    resumed = run("ppo_atari.py", "--resume", str(path), "--cuda", cwd=tmp_path / "e")
    assert resumed["global_step"] == 512 and resumed["iteration"] == 8 and resumed["update_minibatch"].graph is not None
    lr = resumed["optimizer"].param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.is_cuda and lr.item() == pytest.approx(2.5e-4 / 8)
    assert all(torch.isfinite(p).all() for p in resumed["agent"].parameters())
    if envs == "gymnasium":
        assert same_params(params(a["agent"]), params(resumed["agent"]))


def test_cuda_graphs_checkpoint_from_the_cpu_resumes_on_cuda(tmp_path, monkeypatch):
    """A --cuda-graphs run on the CPU (graphs off there) saves a float learning rate. Resumed on a GPU with the graphs on,
    it goes into the GPU tensor the recorded step reads, which anneals from there to the last iteration's rate."""
    argv = [*TINY, "--total-timesteps", "256", "--cuda-graphs", "--save-model"]  # 8 iterations of 2 envs x 16 steps
    with monkeypatch.context() as m:
        signal_at_call(m, gym.vector.SyncVectorEnv, "step", 3 * 16 + 5)  # Ctrl-C in iteration 4: it ends, and is saved
        with pytest.raises(SystemExit):
            run("ppo.py", *argv, "--no-cuda", cwd=tmp_path / "a")
    path = checkpoint_path(tmp_path / "a")
    assert not isinstance(torch.load(path, weights_only=False)["optimizer"]["param_groups"][0]["lr"], torch.Tensor)
    resumed = run("ppo.py", "--cuda", "--resume", str(path), cwd=tmp_path / "b")
    assert resumed["global_step"] == 256 and type(resumed["update_minibatch"]).__name__ == "CudaGraph"
    lr = resumed["optimizer"].param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.is_cuda and lr.item() == pytest.approx(2.5e-4 / 8)
