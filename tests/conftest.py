import os
import signal
import sys
from pathlib import Path

# One torch thread in every process of the suite unless OMP_NUM_THREADS says otherwise (benchmark/tools/kernel_levels.sh
# runs tests at 2): this process, the scripts it starts (subprocesses, torchrun's and tests/distributed.py's workers
# inherit the variable) and the runs in it. ppo.py, ppo_rnn.py and ppo_continuous_action.py set one thread themselves;
# ppo_atari.py takes torch's default, one per core, and under pytest -n auto every worker runs beside the others: two
# ppo_atari.py runs of two threads each on 2 cores spin for each other's cores (a run of 40 iterations took 250 s beside
# another, 19 s at one thread each). One count everywhere also makes ppo_atari.py's convolutions round the same in a
# subprocess and in this process (docs/exactness.md). `nproc` counts OMP_NUM_THREADS too (tests/slurm/start.sh).
os.environ.setdefault("OMP_NUM_THREADS", "1")  # read when torch is imported: before any test module imports it

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # where a plugin imported torch before this file

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
