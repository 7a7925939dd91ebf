"""One ruff configuration for the four scripts, so that diffs between them carry no formatting noise; and
ceilings on what a reader reads (benchmark/tools/reading_size.py measures it): ceilings, not targets."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT, SCRIPTS

sys.path.insert(0, str(ROOT / "benchmark" / "tools"))
import reading_size  # noqa: E402

# characters of the research layer plus __main__, comments and docstrings included (CleanRL's ppo.py: 12,593 in all),
# and of the run-management layer: issue 67's targets
TARGETS = {"ppo.py": 22000, "ppo_atari.py": 32000, "ppo_continuous_action.py": 27000, "ppo_rnn.py": 29500}
MANAGEMENT_TARGET = 24000
# where a target is not met yet, the size it has now, which only goes down (benchmark/results/reading/report.md)
NOW = {"ppo_atari.py": 33681}
# issue 68 added to the management layer what a newcomer needs (the shareable model file, --upload-model, one run per
# run dir, a finished resume, messages that name a fix): 26,441 characters before it, 36,271 after; the size it has
# now, which only goes down
MANAGEMENT_NOW = 34330


def sizes(script: str) -> tuple:
    research, management = reading_size.layers((ROOT / script).read_text())
    return reading_size.measure(research), reading_size.measure(management)


def test_ruff_lint_and_format():
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    fmt = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_line_over_100_characters_and_no_growth(script):
    research, management = sizes(script)
    assert research["over 100"] == management["over 100"] == 0
    assert research["characters"] <= NOW.get(script, TARGETS[script]), research
    assert management["characters"] <= MANAGEMENT_NOW, management


@pytest.mark.parametrize(
    "script",
    [pytest.param(s, marks=pytest.mark.xfail(s in NOW, reason="not met yet", strict=True)) for s in SCRIPTS],
)
def test_the_research_layer_meets_its_target(script):
    assert sizes(script)[0]["characters"] <= TARGETS[script]


@pytest.mark.xfail(reason="not met yet", strict=True)
def test_the_management_layer_meets_its_target():
    assert sizes("ppo.py")[1]["characters"] <= MANAGEMENT_TARGET
