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


# the longest tests (each 30-110 s on 2 cores), started first: under `-n auto` a worker that drew one of them last would
# run alone at the end while the others wait
LONGEST = (
    "test_slurm_sweep_requeued_and_preempted_jobs_resume_exactly",
    "test_learns_a_small_task",
    "test_cli_smoke_logs_every_tag_and_video_then_evaluates",
    "test_native_env_groups_store_the_transitions_of_one_group",
    "test_resume_under_torchrun_equals_uninterrupted_and_ranks_agree",
    "test_local_sweep_runs_every_run_and_the_report_gives_each_group_an_iqm",
    "test_sigterm_saves_and_the_resumed_run_equals_an_uninterrupted_one",
    "test_a_report_rebuilds_from_its_saved_scalars_byte_for_byte",
    "test_a_full_disk_stops_in_one_line_keeps_the_last_checkpoint_and_resumes_once_freed",
)


def start_order(item) -> int:
    """LONGEST's tests in its order (the longest first), then every other test, each group in the order of collection."""
    return LONGEST.index(item.originalname) if item.originalname in LONGEST else len(LONGEST)


def pytest_collection_modifyitems(items):
    items.sort(key=start_order)  # a stable sort
