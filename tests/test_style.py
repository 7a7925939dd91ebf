"""One ruff configuration for every file, so that diffs between the scripts carry no formatting noise."""

import subprocess
import sys

from tests.helpers import ROOT


def test_ruff_lint_and_format():
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    fmt = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout
