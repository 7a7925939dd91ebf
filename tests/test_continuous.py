"""ppo_continuous_action.py: the normalization against numpy, what the env receives versus what the
batch stores, the bootstrap through the normalized final observation, and the statistics that travel
with a checkpoint into evaluation."""

import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers.utils import RunningMeanStd
from torch.distributions.normal import Normal

from tests.helpers import TINY, checkpoint_path, interrupt_at_call, load, run, signal_at_call

SCRIPT = "ppo_continuous_action.py"
EPS = 1e-8  # VecNormalize's epsilon


def mean_var(samples: np.ndarray, prior: float = 1e-4):
    """numpy's mean and variance of the samples combined with the running statistics' starting point
    (mean 0, variance 1, weight 1e-4), as the parallel-variance formula combines them."""
    x = np.asarray(samples, np.float64)
    n, mean, var = len(x), x.mean(0), x.var(0)
    total = n + prior
    return mean * n / total, (prior + n * var + mean**2 * prior * n / total) / total


def normalized_vector(module, env_id, num_envs, gamma=0.99):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    return module.NormalizeVector(envs, module.Args(gamma=gamma))


def plain_vector(env_id, num_envs):
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def play(envs, steps, seed=0):
    """Reset with a seed and take zero actions; the stream of (obs, reward, done) the vector env gives."""
    obs, _ = envs.reset(seed=seed)
    stream = [(obs, None, None)]
    for _ in range(steps):
        obs, reward, terminations, truncations, _ = envs.step(np.zeros((envs.num_envs, 2), np.float32))
        stream.append((obs, reward, terminations | truncations))
    return stream


def test_observation_statistics_match_numpy():
    """Running mean and variance over every observation the vector env returned (resets included),
    and each returned observation normalized by the statistics that include it."""
    module = load(SCRIPT)
    envs = normalized_vector(module, "tests.envs:RecorderBox-v0", 3)
    raw = play(plain_vector("tests.envs:RecorderBox-v0", 3), 40)  # the same seeded envs, unnormalized
    for k, (raw_obs, _, _) in enumerate(raw):
        normalized = envs.reset(seed=0)[0] if k == 0 else envs.step(np.zeros((3, 2), np.float32))[0]
        history = np.concatenate([obs for obs, _, _ in raw[: k + 1]])
        mean, var = mean_var(history)
        np.testing.assert_allclose(
            envs.obs_rms.mean, mean, rtol=1e-6, atol=1e-9
        )  # batch moments come from float32 observations
        np.testing.assert_allclose(envs.obs_rms.var, var, rtol=1e-6, atol=1e-9)  # batch moments come from float32 observations
        np.testing.assert_allclose(normalized, np.clip((raw_obs - mean) / np.sqrt(var + EPS), -10, 10), rtol=1e-6, atol=1e-6)
        assert normalized.dtype == np.float32


@pytest.mark.parametrize("num_envs", [1, 3])
def test_statistics_update_is_gymnasiums_bit_for_bit(num_envs):
    """The wrapper's own update (np.var's overhead left out, for speed) gives RunningMeanStd.update's
    numbers exactly, for observations (float32 batches) and for the scalar return statistics."""
    module = load(SCRIPT)
    rng = np.random.default_rng(0)
    ours = RunningMeanStd(shape=(5,)), RunningMeanStd(shape=())
    gyms = RunningMeanStd(shape=(5,)), RunningMeanStd(shape=())
    for k in range(200):
        obs = (rng.normal(size=(num_envs, 5)) * rng.uniform(0.1, 100) + k).astype(np.float32)
        returns = rng.normal(size=num_envs) * 30 - 5
        for batch, mine, theirs in ((obs, ours[0], gyms[0]), (returns, ours[1], gyms[1])):
            module.NormalizeVector.update(mine, batch)
            theirs.update(batch)
            assert np.array_equal(mine.mean, theirs.mean) and np.array_equal(mine.var, theirs.var)
            assert mine.count == theirs.count
    assert ours[0].var.min() > 1 and ours[1].var > 1  # the stream moved the statistics


def test_gaussian_is_torch_normal_bit_for_bit():
    """get_action_and_value writes out Normal's sample, log_prob and entropy: the same sample from the
    same seed, the same numbers, and the same gradients for the update."""
    module = load(SCRIPT)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("Hopper-v5")] * 2)
    torch.manual_seed(3)
    agent = module.Agent(envs)
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.randn_like(agent.actor_logstd))
    x = torch.randn(16, envs.single_observation_space.shape[0])
    params = [*agent.actor.parameters(), agent.actor_logstd]
    torch.manual_seed(7)
    action, logprob, entropy, _ = agent.get_action_and_value(x)
    ours = torch.autograd.grad((logprob - entropy).sum(), params)

    probs = Normal(agent.actor(x), agent.actor_logstd.expand(16, -1).exp())
    torch.manual_seed(7)
    sample = probs.sample()
    reference_logprob, reference_entropy = probs.log_prob(sample).sum(1), probs.entropy().sum(1)
    theirs = torch.autograd.grad((reference_logprob - reference_entropy).sum(), params)
    assert torch.equal(action, sample) and not action.requires_grad
    assert torch.equal(logprob, reference_logprob) and torch.equal(entropy, reference_entropy)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    # with the action given (the update), the log-probability of that action
    given = torch.randn(16, sample.shape[1])
    assert torch.equal(agent.get_action_and_value(x, given)[1], probs.log_prob(given).sum(1))


def test_observations_are_clipped_to_ten():
    module = load(SCRIPT)
    envs = normalized_vector(module, "tests.envs:RecorderBox-v0", 1)
    envs.obs_rms.mean, envs.obs_rms.var = np.zeros(2), np.full(2, 1e-6)
    np.testing.assert_array_equal(envs.normalize(np.array([[1.0, -1.0]])), [[10.0, -10.0]])


@pytest.mark.parametrize("env_id", ["tests.envs:RecorderBox-v0", "tests.envs:ConstantBox-v0"])
def test_reward_scaling_tracks_discounted_returns_across_episode_ends(env_id):
    """Rewards divided by the running std of the discounted return, which restarts at every episode
    end (termination in Recorder, time-limit truncation in Constant)."""
    gamma = 0.9
    module = load(SCRIPT)
    envs = normalized_vector(module, env_id, 2, gamma=gamma)
    raw = play(plain_vector(env_id, 2), 60)
    envs.reset(seed=0)
    ret, rets, unreset, unresets = np.zeros(2), [], np.zeros(2), []
    for _, reward, done in raw[1:]:
        ret = ret * gamma + reward
        unreset = unreset * gamma + reward
        rets.append(ret.copy())
        unresets.append(unreset.copy())
        ret[done] = 0
        _, scaled, *_ = envs.step(np.zeros((2, 2), np.float32))
        var = mean_var(np.concatenate(rets))[1]
        np.testing.assert_allclose(envs.return_rms.var, var, rtol=1e-10)
        np.testing.assert_allclose(scaled, np.clip(reward / np.sqrt(var + EPS), -10, 10), rtol=1e-10)
    assert any(done.any() for _, _, done in raw[1:])
    assert not np.isclose(mean_var(np.concatenate(unresets))[1], var, rtol=1e-3)  # the restarts matter here


def test_frozen_statistics_do_not_move():
    module = load(SCRIPT)
    envs = normalized_vector(module, "tests.envs:RecorderBox-v0", 2)
    play(envs, 10)
    envs.frozen = True
    before = (envs.obs_rms.mean.copy(), envs.obs_rms.var.copy(), envs.return_rms.var)
    play(envs, 10, seed=1)
    assert np.array_equal(envs.obs_rms.mean, before[0]) and np.array_equal(envs.obs_rms.var, before[1])
    assert envs.return_rms.var == before[2]


def test_env_gets_clipped_actions_batch_keeps_the_sample(tmp_path, monkeypatch):
    """Bounds of ±0.5: the env receives the clipped action; the batch stores the unclipped sample and
    its log-probability under the Gaussian."""
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 1)
    argv = ["--env-id", "tests.envs:ClippedRecorder-v0", "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2"]
    g = run(SCRIPT, *argv, "--total-timesteps", "64", "--no-norm-obs", "--no-norm-reward", cwd=tmp_path)
    actions = g["actions"]  # (32, 2, 2)
    assert (actions.abs() > 0.5).float().mean() > 0.3  # a std of 1 samples far outside the bounds
    for i, env in enumerate(g["envs"].envs):
        received = np.stack([a for _, a, _ in env.unwrapped.log])
        np.testing.assert_array_equal(received, np.clip(actions[:, i].numpy(), -0.5, 0.5))
    agent, obs = g["agent"], g["obs"].flatten(0, 1)
    with torch.no_grad():
        mean, std = agent.actor(obs), agent.actor_logstd.exp()
        logprob = Normal(mean, std).log_prob(actions.flatten(0, 1)).sum(1)
        clipped_logprob = Normal(mean, std).log_prob(actions.flatten(0, 1).clamp(-0.5, 0.5)).sum(1)
    torch.testing.assert_close(g["logprobs"].flatten(), logprob, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(g["logprobs"].flatten(), clipped_logprob)


def test_truncation_bootstraps_the_normalized_final_observation(tmp_path, monkeypatch):
    """Observation 3 always, time limit 10: the final observation goes through the same normalization
    as every observation, so gamma * V(final_obs) equals gamma * V of the next stored (normalized) row."""
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 1)
    gamma = 0.9
    argv = ["--env-id", "tests.envs:ConstantThree-v0", "--gamma", str(gamma), "--num-envs", "3", "--num-steps", "32"]
    g = run(SCRIPT, *argv, "--total-timesteps", "96", "--num-minibatches", "1", "--no-norm-reward", cwd=tmp_path)
    ended = torch.cat((g["dones"][1:], g["next_done"][None])).bool()
    assert ended.sum() == 9
    following = torch.cat((g["obs"][1:], g["next_obs"][None]))  # the normalized observation after each step
    with torch.no_grad():
        expected = 1 + gamma * g["agent"].get_value(following.flatten(0, 1)).reshape(ended.shape)
        raw_value = g["agent"].get_value(torch.full((1, 1), 3.0))
    torch.testing.assert_close(g["rewards"][ended], expected[ended], rtol=1e-6, atol=1e-6)
    assert torch.all(g["rewards"][~ended] == 1)
    assert not torch.allclose(1 + gamma * raw_value, expected[ended][:1], atol=1e-3)  # unnormalized would differ


def evaluated_returns(module, ckpt_path: str, capsys) -> list:
    """The returns evaluate() prints for a checkpoint: 2 greedy episodes, in envs made as the script makes them."""
    ckpt = torch.load(ckpt_path, weights_only=False)
    args = module.Args(**{**ckpt["args"], "eval_checkpoint": ckpt_path, "eval_episodes": 2, "eval_greedy": True})
    envs = module.make_vector_env(args, 1, 0)
    with pytest.raises(SystemExit):
        module.evaluate(args, module.Agent(envs), envs, ckpt, torch.device("cpu"))
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("eval episode")]


def test_evaluation_uses_the_saved_statistics_frozen(tmp_path, monkeypatch, capsys):
    module = load(SCRIPT)
    run(SCRIPT, "--env-id", "Hopper-v5", *TINY, "--total-timesteps", "256", "--save-model", cwd=tmp_path)
    path = str(checkpoint_path(tmp_path))
    saved_obs_rms = torch.load(path, weights_only=False)["ranks"][0]["wrapper"]["obs_rms"]

    raws, seen = [], []
    original = gym.vector.SyncVectorEnv.step

    def recording(self, actions):
        out = original(self, actions)
        raws.append(out[0].copy())
        return out

    class Spy(module.NormalizeVector):
        def step(self, actions):
            out = super().step(actions)
            seen.append((raws[-1], out[0], self.obs_rms.mean.copy(), self.obs_rms.var.copy()))
            return out

    monkeypatch.setattr(gym.vector.SyncVectorEnv, "step", recording)
    monkeypatch.setattr(module, "NormalizeVector", Spy)
    returns = evaluated_returns(module, path, capsys)
    assert len(seen) > 10 and len(returns) == 2
    for raw, normalized, mean, var in seen:
        np.testing.assert_array_equal(mean, saved_obs_rms.mean)
        np.testing.assert_array_equal(var, saved_obs_rms.var)
        np.testing.assert_allclose(normalized, np.clip((raw - mean) / np.sqrt(var + EPS), -10, 10), rtol=1e-6)

    # the same checkpoint without its statistics plays differently: they matter to this agent
    ckpt = torch.load(path, weights_only=False)
    ckpt["ranks"][0]["wrapper"]["obs_rms"] = RunningMeanStd(shape=saved_obs_rms.mean.shape)
    torch.save(ckpt, tmp_path / "no_stats.pt")
    assert evaluated_returns(module, str(tmp_path / "no_stats.pt"), capsys) != returns


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_smoke(env_id, tmp_path):
    g = run(SCRIPT, "--env-id", env_id, *TINY, "--total-timesteps", "64", cwd=tmp_path)
    assert g["args"].ent_coef == 0.0  # no entropy bonus by default (docs/continuous.md)
    act_dim = g["envs"].single_action_space.shape[0]
    assert g["actions"].shape == (16, 2, act_dim) and g["actions"].dtype == torch.float32
    assert g["b_logprobs"].shape == (32,)
    assert all(torch.isfinite(p).all() for p in g["agent"].parameters())


def test_loading_the_script_leaves_the_environment_alone(monkeypatch):
    """MUJOCO_GL=egl is set for headless video only, when a recording env is made: set at import, it
    leaked into every child process, and on a machine without libEGL `import mujoco` then fails there."""
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    load("ppo_continuous_action.py")
    assert "MUJOCO_GL" not in os.environ


def test_resume_without_env_state_starts_new_episodes_with_the_saved_statistics(tmp_path, monkeypatch):
    """A checkpoint whose envs did not pickle (--capture-video's recorder): the resumed run's new episodes start with
    their first observation normalized by the checkpoint's statistics (updated with it, as in training), and with no
    discounted return carried over from the episodes the checkpoint's envs were in."""
    raws = []
    original = gym.vector.SyncVectorEnv.reset
    monkeypatch.setattr(gym.vector.SyncVectorEnv, "reset", lambda self, **kw: raws.append(original(self, **kw)) or raws[-1])
    argv = ["--env-id", "Hopper-v5", *TINY, "--total-timesteps", "128", "--save-model"]
    with monkeypatch.context() as m:
        signal_at_call(m, gym.vector.SyncVectorEnv, "step", 16 + 5)  # Ctrl-C in iteration 2: it ends, and is saved
        with pytest.raises(SystemExit):
            run(SCRIPT, *argv, cwd=tmp_path / "a")
    ckpt = torch.load(checkpoint_path(tmp_path / "a"), weights_only=False)
    obs_rms = ckpt["ranks"][0]["wrapper"]["obs_rms"]
    discounted_return = ckpt["ranks"][0]["wrapper"]["discounted_return"]
    assert discounted_return.any()  # episodes in progress: a return that must not reach the new ones
    ckpt["ranks"][0]["envs"] = None
    torch.save(ckpt, tmp_path / "no_envs.pt")
    raws.clear()
    with monkeypatch.context() as m:
        interrupt_at_call(m, gym.vector.SyncVectorEnv, "step", 1)  # right after the restore
        g = run(SCRIPT, "--resume", str(tmp_path / "no_envs.pt"), cwd=tmp_path / "b")
    raw = raws[-1][0]  # the new episodes' first observations, before normalization
    expected = RunningMeanStd(shape=obs_rms.mean.shape)
    expected.mean, expected.var, expected.count = obs_rms.mean.copy(), obs_rms.var.copy(), obs_rms.count
    expected.update(raw)
    envs = g["envs"]
    assert envs.obs_rms.count == obs_rms.count + 2 and not envs.discounted_return.any()
    np.testing.assert_allclose(envs.obs_rms.mean, expected.mean, rtol=1e-12)
    normalized = np.clip((raw - expected.mean) / np.sqrt(expected.var + EPS), -10, 10)
    np.testing.assert_allclose(g["next_obs"].numpy(), normalized, rtol=1e-5, atol=1e-6)
    assert len(raws) == 2 and not np.array_equal(raws[0][0], raw)  # new seeds: not the episodes a fresh run starts with
