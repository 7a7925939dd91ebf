"""benchmark/tools/update_kl.py replays a run's own update: from the state at the first minibatch step of an
iteration, its replay ends with the parameters the run had at the next iteration's first step, bit for bit."""

import sys

import torch

from tests.helpers import ROOT, TINY

sys.path.insert(0, str(ROOT / "benchmark" / "tools"))
import update_kl  # noqa: E402


def test_the_replay_of_an_update_is_the_runs_own(tmp_path):
    argv = ["--env-id", "Pendulum-v1", *TINY, "--num-envs", "1", "--total-timesteps", "128"]
    snapshots = update_kl.run_to([2, 3], argv, cwd=tmp_path)
    assert sorted(snapshots) == [2, 3]
    replayed = update_kl.replay(snapshots[2], None)
    after = snapshots[3]["agent"].state_dict()
    for name, value in replayed["agent"].state_dict().items():
        assert torch.equal(value, after[name]), name
    assert replayed["steps"] == 4 and replayed["kl"].shape == (16,) and (replayed["kl"] >= 0).all()
    again = update_kl.replay(snapshots[2], None)  # a replay leaves the snapshot as it was (Adam's moments included)
    assert torch.equal(again["kl"], replayed["kl"]) and again["mean_kl"] == replayed["mean_kl"]
    stopped = update_kl.replay(snapshots[2], 0.0)  # --target-kl 0: no step past the first minibatch's zero KL
    assert 1 <= stopped["steps"] < 4
