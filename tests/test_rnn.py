"""What recurrence adds: state resets at episode starts only, whole-sequence minibatches, replayed
states equal to the rollout's, and the velocity-masked tasks."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.helpers import cli, interrupt_at_call, load, run

rnn = load("ppo_rnn.py")


def make_agent(obs_dim=3, hidden=128):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("tests.envs:Constant-v0")])
    envs.single_observation_space = gym.spaces.Box(-1, 1, (obs_dim,), np.float32)
    torch.manual_seed(0)
    agent = rnn.Agent(envs)
    assert agent.lstm.hidden_size == hidden
    return agent


def test_state_resets_exactly_at_episode_starts():
    """Each output equals a fresh LSTM run over its own episode only: from the initial state for the
    episode in progress when the sequence starts, from zeros for every episode that starts inside."""
    agent = make_agent()
    T, B, H = 12, 3, 128
    x = torch.randn(T * B, 3)
    done = torch.zeros(T, B)
    done[0, 1] = 1  # env 1 starts a new episode at the first step
    done[4, 0] = done[9, 0] = 1  # env 0: two starts inside
    done[11, 2] = 1  # env 2: a start at the last step
    state = (torch.randn(1, B, H), torch.randn(1, B, H))
    with torch.no_grad():
        hidden, final = agent.get_states(x, state, done.flatten())
        hidden = hidden.reshape(T, B, H)
        features = agent.network(x).reshape(T, B, -1)
        for b in range(B):
            starts = [0] + [t for t in range(T) if done[t, b] and t > 0] + [T]
            for begin, end in zip(starts[:-1], starts[1:], strict=True):
                if begin == 0 and not done[0, b]:
                    s = (state[0][:, b : b + 1], state[1][:, b : b + 1])
                else:
                    s = (torch.zeros(1, 1, H), torch.zeros(1, 1, H))
                expected, s = agent.lstm(features[begin:end, b : b + 1], s)
                torch.testing.assert_close(hidden[begin:end, b], expected[:, 0], rtol=0, atol=1e-6)
            torch.testing.assert_close(final[0][:, b], s[0][:, 0], rtol=0, atol=1e-6)
            torch.testing.assert_close(final[1][:, b], s[1][:, 0], rtol=0, atol=1e-6)


def test_one_step_at_a_time_equals_the_sequence():
    """The rollout steps one observation at a time; the update replays whole sequences."""
    agent = make_agent()
    T, B = 10, 2
    x, done = torch.randn(T, B, 3), (torch.rand(T, B) < 0.2).float()
    state = (torch.zeros(1, B, 128), torch.zeros(1, B, 128))
    with torch.no_grad():
        whole, whole_state = agent.get_states(x.flatten(0, 1), state, done.flatten())
        steps, s = [], state
        for t in range(T):
            h, s = agent.get_states(x[t], s, done[t])
            steps.append(h)
    torch.testing.assert_close(torch.cat(steps), whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(s, whole_state, rtol=0, atol=1e-6)


def test_lstm_init():
    agent = make_agent()
    for name, param in agent.lstm.named_parameters():
        if "bias" in name:
            assert torch.all(param == 0)
        else:  # orthogonal with gain 1: the (4H, in) matrix has orthonormal columns
            w = param.detach()
            assert w.shape[0] >= w.shape[1]
            torch.testing.assert_close(w.T @ w, torch.eye(w.shape[1]), atol=1e-5, rtol=0)


def test_minibatches_are_whole_env_sequences(tmp_path, monkeypatch):
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 2)  # the second minibatch of the first epoch
    g = run("ppo_rnn.py", "--num-envs", "4", "--num-minibatches", "2", "--total-timesteps", "512", cwd=tmp_path)
    mbenvinds, mb_inds = g["mbenvinds"], g["mb_inds"]
    assert len(mbenvinds) == 2
    np.testing.assert_array_equal(mb_inds, g["flatinds"][:, mbenvinds].ravel())
    assert torch.equal(g["b_obs"][mb_inds].reshape(128, 2, -1), g["obs"][:, mbenvinds])
    assert torch.equal(g["b_dones"][mb_inds].reshape(128, 2), g["dones"][:, mbenvinds])
    # the two minibatches of the epoch split the envs between them
    first = set(g["envinds"][:2].tolist())
    assert first.isdisjoint(mbenvinds) and first | set(mbenvinds.tolist()) == {0, 1, 2, 3}


def test_replay_reproduces_the_rollout_state(tmp_path, monkeypatch):
    """Replaying the rollout from the kept initial state with the stored dones ends in the state the
    rollout carries into the next iteration (here iteration 2, which starts from a carried state), to
    float32 rounding: the replay runs the LSTM over whole stretches, the rollout one step at a time,
    and those matrix shapes need not round alike on every CPU (test_training.py, CPU_LOGPROB_BOUND)."""
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 5)  # first step of iteration 2
    g = run("ppo_rnn.py", "--num-minibatches", "2", "--update-epochs", "2", "--total-timesteps", "1024", cwd=tmp_path)
    assert g["iteration"] == 2
    assert g["initial_lstm_state"][0].abs().sum() > 0  # carried over, not reset between rollouts
    with torch.no_grad():
        _, state = g["agent"].get_states(g["b_obs"], g["initial_lstm_state"], g["b_dones"])
    torch.testing.assert_close(state, g["next_lstm_state"], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "masked_id,env_id,keep",
    [
        ("CartPoleNoVel-v1", "CartPole-v1", [0, 2]),
        ("AcrobotNoVel-v1", "Acrobot-v1", [0, 1, 2, 3]),
    ],
)
def test_masked_envs_hide_velocities(masked_id, env_id, keep):
    masked, full = gym.make(masked_id), gym.make(env_id)
    assert masked.observation_space.shape == (len(keep),)
    obs_m, _ = masked.reset(seed=3)
    obs_f, _ = full.reset(seed=3)
    np.testing.assert_array_equal(obs_m, obs_f[keep])
    for _ in range(5):
        obs_m, *_ = masked.step(1)
        obs_f, *_ = full.step(1)
        np.testing.assert_array_equal(obs_m, obs_f[keep])


def test_ppo_reaches_the_masked_tasks(tmp_path):
    """The benchmark runs the memoryless ppo.py on the same masked task through its module-qualified id."""
    result = cli("ppo.py", "--env-id", "ppo_rnn:CartPoleNoVel-v1", "--total-timesteps", "1024", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
