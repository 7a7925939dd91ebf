"""What recurrence adds, with either cell (LSTM, GRU): state resets at episode starts only, whole-sequence
minibatches, replayed states equal to the rollout's; and the memory tasks (velocity-masked classic control,
the cue to recall)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.helpers import TINY, checkpoint_path, error_of, interrupt_at_call, load, run

rnn = load("ppo_rnn.py")


CELLS = ["lstm", "gru"]


def make_agent(cell: str, obs_dim=3, hidden=128, **args):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("tests.envs:Constant-v0")])
    envs.single_observation_space = gym.spaces.Box(-1, 1, (obs_dim,), np.float32)
    torch.manual_seed(0)
    agent = rnn.Agent(envs, rnn.Args(cell=cell, **args))
    assert isinstance(agent.rnn, {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell]) and agent.rnn.hidden_size == hidden
    return agent


def as_module_state(state: tuple):
    """nn.LSTM takes (h, c), nn.GRU h alone."""
    return state if len(state) == 2 else state[0]


@pytest.mark.parametrize("cell", CELLS)
def test_state_is_h_and_c_or_h(cell):
    state = make_agent(cell).initial_state(5, torch.device("cpu"))
    assert len(state) == {"lstm": 2, "gru": 1}[cell]
    assert all(s.shape == (1, 5, 128) and not s.any() for s in state)


@pytest.mark.parametrize("cell", CELLS)
def test_state_resets_exactly_at_episode_starts(cell):
    """Each output equals a fresh LSTM run over its own episode only: from the initial state for the
    episode in progress when the sequence starts, from zeros for every episode that starts inside."""
    agent = make_agent(cell)
    T, B, H = 12, 3, 128
    x = torch.randn(T * B, 3)
    done = torch.zeros(T, B)
    done[0, 1] = 1  # env 1 starts a new episode at the first step
    done[4, 0] = done[9, 0] = 1  # env 0: two starts inside
    done[11, 2] = 1  # env 2: a start at the last step
    state = tuple(torch.randn(1, B, H) for _ in agent.initial_state(B, x.device))
    with torch.no_grad():
        hidden, final = agent.get_states(x, state, done.flatten())
        hidden = hidden.reshape(T, B, H)
        features = agent.network(x).reshape(T, B, -1)
        for b in range(B):
            starts = [0] + [t for t in range(T) if done[t, b] and t > 0] + [T]
            for begin, end in zip(starts[:-1], starts[1:], strict=True):
                if begin == 0 and not done[0, b]:
                    s = tuple(part[:, b : b + 1] for part in state)
                else:
                    s = tuple(torch.zeros(1, 1, H) for _ in state)
                expected, s = agent.rnn(features[begin:end, b : b + 1], as_module_state(s))
                s = s if isinstance(s, tuple) else (s,)
                torch.testing.assert_close(hidden[begin:end, b], expected[:, 0], rtol=0, atol=1e-6)
            for part, expected_part in zip(final, s, strict=True):
                torch.testing.assert_close(part[:, b], expected_part[:, 0], rtol=0, atol=1e-6)


def plain_stretches(done: torch.Tensor) -> list:
    """The stretches of a (T, B) rollout by a plain loop over its steps: a new one at each step where an env starts
    an episode (the first step's starts are handled inside its stretch, by zeroing those envs' state)."""
    spans, begin = [], 0
    for t in range(1, len(done)):
        if done[t].any():
            spans.append((begin, t))
            begin = t
    return [*spans, (begin, len(done))]


@pytest.mark.parametrize("seed", range(20))
def test_stretches_are_those_of_a_plain_loop_over_the_steps(seed):
    gen = torch.Generator().manual_seed(seed)
    T, B = 1 + seed % 7 * 5, 1 + seed % 3
    done = (torch.rand(T, B, generator=gen) < [0.0, 0.05, 0.3, 1.0][seed % 4]).float()
    assert rnn.stretches(done) == plain_stretches(done)


@pytest.mark.parametrize("cell", CELLS)
def test_one_step_at_a_time_equals_the_sequence(cell):
    """The rollout steps one observation at a time; the update replays whole sequences."""
    agent = make_agent(cell)
    T, B = 10, 2
    x, done = torch.randn(T, B, 3), (torch.rand(T, B) < 0.2).float()
    state = agent.initial_state(B, x.device)
    with torch.no_grad():
        whole, whole_state = agent.get_states(x.flatten(0, 1), state, done.flatten())
        steps, s = [], state
        for t in range(T):
            h, s = agent.get_states(x[t], s, done[t])
            steps.append(h)
    torch.testing.assert_close(torch.cat(steps), whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(s, whole_state, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_rnn_init(cell):
    agent = make_agent(cell)
    for name, param in agent.rnn.named_parameters():
        if "bias" in name:
            assert torch.all(param == 0)
        else:  # orthogonal with gain 1: the (4H or 3H, in) matrix has orthonormal columns
            w = param.detach()
            assert w.shape[0] >= w.shape[1]
            torch.testing.assert_close(w.T @ w, torch.eye(w.shape[1]), atol=1e-5, rtol=0)


def test_forget_bias_sets_the_lstm_forget_gate_alone():
    """--forget-bias b: the forget gate's input bias (rows H to 2H of bias_ih, gate order i, f, g, o) starts at b,
    every other parameter is what the default (all biases 0) draws from the same seed, bit for bit."""
    default, biased = make_agent("lstm"), make_agent("lstm", forget_bias=1.0)
    hidden = biased.rnn.hidden_size
    expected = torch.zeros(4 * hidden)
    expected[hidden : 2 * hidden] = 1.0
    assert torch.equal(biased.rnn.bias_ih_l0.detach(), expected)
    for (name, a), (_, b) in zip(default.named_parameters(), biased.named_parameters(), strict=True):
        assert name == "rnn.bias_ih_l0" or torch.equal(a, b), name
    # the gate it sets is the forget gate: with zero input and state, c_1 = f * c_0 + i * g with g = tanh(0) = 0,
    # so one step from c_0 = 1 leaves sigmoid(b) = 0.731 (b = 1) where the default leaves sigmoid(0) = 0.5
    for agent, kept in ((default, 0.5), (biased, torch.sigmoid(torch.tensor(1.0)).item())):
        zeros = torch.zeros(1, 1, hidden)
        with torch.no_grad():
            _, (_, c) = agent.rnn(torch.zeros(1, 1, 64), (zeros, torch.ones(1, 1, hidden)))
        torch.testing.assert_close(c, torch.full_like(c, kept))


def test_forget_bias_with_a_gru_is_one_line(tmp_path):
    message = error_of("ppo_rnn.py", *TINY, "--cell", "gru", "--forget-bias", "1", cwd=tmp_path)
    assert "--forget-bias" in message and "the GRU has no forget gate" in message


def test_minibatches_are_whole_env_sequences(tmp_path, monkeypatch):
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 2)  # the second minibatch of the first epoch
    g = run("ppo_rnn.py", "--num-envs", "4", "--num-minibatches", "2", "--total-timesteps", "512", cwd=tmp_path)
    mb_envs, mb_inds = g["mbenvinds"], g["mb_inds"]
    assert len(mb_envs) == 2
    assert torch.equal(mb_inds, g["flatinds"][:, mb_envs].flatten())
    assert torch.equal(g["b_obs"][mb_inds].reshape(128, 2, -1), g["obs"][:, mb_envs])
    assert torch.equal(g["b_dones"][mb_inds].reshape(128, 2), g["dones"][:, mb_envs])
    assert all(torch.equal(m, s[:, mb_envs]) for m, s in zip(g["mb_state"], g["initial_rnn_state"], strict=True))
    # the two minibatches of the epoch split the envs between them
    first = set(g["envinds"][:2].tolist())
    assert first.isdisjoint(mb_envs.tolist()) and first | set(mb_envs.tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("cell", CELLS)
def test_replay_reproduces_the_rollout_state(cell, tmp_path, monkeypatch):
    """Replaying the rollout from the kept initial state with the stored dones ends in the state the
    rollout carries into the next iteration (here iteration 2, which starts from a carried state), to
    float32 rounding: the replay runs the LSTM over whole stretches, the rollout one step at a time,
    and those matrix shapes need not round alike on every CPU (test_training.py, CPU_LOGPROB_BOUND)."""
    interrupt_at_call(monkeypatch, torch.optim.Adam, "step", 5)  # first step of iteration 2
    g = run(
        "ppo_rnn.py",
        "--cell",
        cell,
        "--num-minibatches",
        "2",
        "--update-epochs",
        "2",
        "--total-timesteps",
        "1024",
        cwd=tmp_path,
    )
    assert g["iteration"] == 2 and len(g["next_rnn_state"]) == {"lstm": 2, "gru": 1}[cell]
    assert g["initial_rnn_state"][0].abs().sum() > 0  # carried over, not reset between rollouts
    with torch.no_grad():
        _, state = g["agent"].get_states(g["b_obs"], g["initial_rnn_state"], g["b_dones"])
    torch.testing.assert_close(state, g["next_rnn_state"], rtol=0, atol=1e-6)


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
    """The benchmark runs the memoryless ppo.py on the same masked task through its module-qualified id: it trains there,
    on CartPole's positions alone (2 entries an observation, not 4)."""
    g = run("ppo.py", "--env-id", "ppo_rnn:CartPoleNoVel-v1", "--total-timesteps", "1024", cwd=tmp_path)
    assert g["envs"].single_observation_space.shape == (2,) and g["b_obs"].shape == (512, 2)
    assert g["global_step"] == 1024 and g["run"].recent_returns


@pytest.mark.parametrize("length,num_cues", [(1, 2), (3, 4), (30, 2)])
def test_memory_task_dynamics(length, num_cues):
    """The cue at the first step only, blanks, the question after `length` steps; only the action there counts."""
    env = gym.make(f"MemoryL{length}K{num_cues}-v0")
    assert env.observation_space.shape == (num_cues + 1,) and env.action_space.n == num_cues
    for seed in range(6):
        for answer_right in (True, False):
            obs, _ = env.reset(seed=seed)
            (cue,) = np.flatnonzero(obs)
            assert cue < num_cues and obs[cue] == 1.0
            rng = np.random.default_rng(seed)
            for t in range(1, length + 1):  # actions before the question are ignored, whatever they are
                obs, reward, terminated, truncated, _ = env.step(int(rng.integers(num_cues)))
                assert reward == 0.0 and not terminated and not truncated
                expected = np.zeros(num_cues + 1, np.float32)
                expected[-1] = float(t == length)
                np.testing.assert_array_equal(obs, expected)
            wrong = (cue + 1 + int(rng.integers(num_cues - 1))) % num_cues
            obs, reward, terminated, truncated, _ = env.step(cue if answer_right else wrong)
            assert reward == (1.0 if answer_right else -1.0) and terminated and not truncated
            assert not obs.any()


def test_memory_task_is_seeded_and_uses_every_cue():
    env = gym.make("MemoryL3K4-v0")
    cues = [int(np.argmax(env.reset(seed=seed)[0])) for seed in range(200)]
    assert cues == [int(np.argmax(env.reset(seed=seed)[0])) for seed in range(200)]
    assert sorted(set(cues)) == [0, 1, 2, 3] and min(np.bincount(cues)) > 30
    assert gym.make("MemoryL3K4-v0", length=7, num_cues=3).unwrapped.length == 7  # any L and k through gym.make
    with pytest.raises(ValueError, match="length >= 1 and num_cues >= 2"):
        gym.make("MemoryL3K2-v0", num_cues=1)


@pytest.mark.parametrize("cell", CELLS)
def test_both_cells_learn_to_recall_a_cue(cell, tmp_path):
    """Seeded and small: a cue shown 3 steps before the question, recalled every time (mean return 1) by a recurrent
    policy, while the memoryless ppo.py on the same task can only guess (mean return near 0)."""
    # 5,120 steps (20 iterations of 64 episodes): the mean return of the last 100 episodes is 0.98 for the LSTM, 1.0 for the
    # GRU (seed 1; seeds 2-4 all 0.96 or more; at 10,240 steps 0.98 and 1.0 as well), the memoryless ppo.py's 0.06
    argv = [
        "--env-id",
        "MemoryL3K2-v0",
        "--total-timesteps",
        "5120",
        "--num-envs",
        "8",
        "--num-steps",
        "32",
        "--num-minibatches",
        "2",
    ]
    g = run("ppo_rnn.py", *argv, "--cell", cell, cwd=tmp_path / cell)
    assert np.mean(g["run"].recent_returns) >= 0.9
    if cell == "lstm":  # once: the memoryless baseline
        g = run("ppo.py", "--env-id", "ppo_rnn:MemoryL3K2-v0", *argv[2:], cwd=tmp_path / "ppo")
        assert abs(np.mean(g["run"].recent_returns)) <= 0.3


def test_checkpoint_that_does_not_fit_the_agent_is_one_line(tmp_path):
    """A checkpoint of an older ppo_rnn.py (its cell was `agent.lstm`) or of an edited Agent: one line, not torch's."""
    run("ppo_rnn.py", *TINY, "--total-timesteps", "32", "--save-model", cwd=tmp_path)
    path = checkpoint_path(tmp_path)
    ckpt = torch.load(path, weights_only=False)
    ckpt["agent"] = {name.replace("rnn.", "lstm."): value for name, value in ckpt["agent"].items()}
    torch.save(ckpt, tmp_path / "older.pt")
    for argv in (["--eval-checkpoint", "older.pt"], [*TINY, "--total-timesteps", "64", "--resume", "older.pt"]):
        message = error_of("ppo_rnn.py", *argv, cwd=tmp_path)
        assert "'older.pt' does not fit this Agent (" in message and "rnn." in message  # torch names the missing keys
        assert message.endswith("; an edited Agent, or another version's")
