"""The benchmark report tool on real (tiny) runs and on known numbers."""

import subprocess
import sys

import numpy as np

from tests.helpers import ROOT, TINY, run

sys.path.insert(0, str(ROOT / "benchmark"))
import report  # noqa: E402


def test_first_step_reaching():
    run_data = {"steps": np.arange(1, 201) * 10, "returns": np.r_[np.zeros(100), np.ones(100) * 500]}
    # the mean of the last 100 episodes reaches 250 once 50 of them score 500: the 150th episode
    assert report.first_step_reaching(run_data, 250) == 1500
    assert report.first_step_reaching(run_data, 501) is None


def test_report_from_runs(tmp_path):
    for seed in ("1", "2"):
        run("ppo.py", *TINY, "--total-timesteps", "640", "--seed", seed, cwd=tmp_path)
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "report.py"), str(tmp_path / "runs"), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in out.with_suffix(".md").read_text().splitlines() if line.startswith("| CartPole-v1")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["CartPole-v1", "ppo", "1,2", "640"]
    mean, std = map(float, cells[4].split(" ± "))
    groups = report.collect(tmp_path / "runs")
    finals = [np.mean(r["returns"][-100:]) for r in groups[("CartPole-v1", "ppo")].values()]
    assert (mean, std) == (round(np.mean(finals), 2), round(np.std(finals), 2))
    assert out.with_suffix(".png").stat().st_size > 0
