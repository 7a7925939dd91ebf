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


SLOW = {line.strip() for line in (ROOT / "tests" / "slow_tests.txt").read_text().splitlines() if line[:1] not in "#"}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: 5 s or more (tests/slow_tests.txt); -m 'not slow' is the quick tier")


def pytest_collection_modifyitems(config, items):
    """Mark the tests named in tests/slow_tests.txt; a name there that no test has is an error, not a silent no-op."""
    names = {item.originalname for item in items}
    whole = not any(Path(arg.split("::")[0]).exists() for arg in config.invocation_params.args)  # no paths given
    if whole and SLOW - names:  # the whole suite collected: every listed name must exist
        raise pytest.UsageError(f"tests/slow_tests.txt names tests that do not exist: {sorted(SLOW - names)}")
    for item in items:
        if item.originalname in SLOW:
            item.add_marker(pytest.mark.slow)
