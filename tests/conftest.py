import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # so that scripts find `tests.envs:...` env ids


@pytest.fixture(autouse=True)
def ctrl_c_as_in_a_terminal():
    """Tests press Ctrl-C in this process (tests/helpers.py, signal_at_call): SIGINT is handled as in a terminal's run,
    also where the suite was started with it ignored (`pytest &` in a non-interactive shell, as a CI runner may start
    it), which the scripts respect (a run started with Ctrl-C ignored keeps ignoring it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
