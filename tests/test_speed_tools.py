"""The speed tools that load a script and drive its own vector env (benchmark/tools/raw_env_sps.py, which
benchmark/speed.sh and benchmark/gpu.sh run; benchmark/tools/microbench.py): they must follow the scripts'
signatures, or a GPU session's one prepared call fails there."""

import re
import runpy
import sys

import pytest

from tests.helpers import QUICK_ENV, ROOT


def tool(capsys, monkeypatch, name: str, *argv: str) -> str:
    """A tool's command line run in this process, its folder on sys.path as when it runs (no fresh interpreter importing
    torch and the script): what it prints. It fails the test by an exception where a process would exit non-zero."""
    path = ROOT / "benchmark" / "tools" / name
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.setattr(sys, "argv", [str(path), *argv])
    capsys.readouterr()
    runpy.run_path(str(path), run_name="__main__")
    return capsys.readouterr().out


@pytest.mark.parametrize("script", ["ppo.py", "ppo_atari.py"])
def test_raw_env_sps_steps_each_env_path_of_the_script(script, capsys, monkeypatch):
    printed = tool(capsys, monkeypatch, "raw_env_sps.py", script, QUICK_ENV[script], "2", "100")
    paths = re.findall(r"^raw \S+ x2 (.+), random actions drawn in advance: (\d+) steps/s$", printed, re.MULTILINE)
    expected = ["native AtariVectorEnv", "SyncVectorEnv"] if script == "ppo_atari.py" else ["SyncVectorEnv"]
    assert [name.split(" (")[0] for name, _ in paths] == expected and all(int(rate) > 0 for _, rate in paths)


def test_microbench_times_each_piece_and_finds_foreach_adam_bit_exact(capsys, monkeypatch):
    """The scripts take Adam's foreach implementation because it keeps the single-tensor numbers; the tool reports it."""
    printed = tool(capsys, monkeypatch, "microbench.py", "--number", "20", "--repeat", "1", "--cnn-batch", "2")
    rows = dict(re.findall(r"^\| (.+) \| ([\d,.]+) \|$", printed, re.MULTILINE))
    pieces = ["rollout policy step", "SyncVectorEnv step", "clip_grad_norm_", "update_minibatch", "Adam step", "Nature CNN"]
    assert all(any(name.startswith(piece) for name in rows) for piece in pieces), list(rows)  # each piece, by its name
    assert all(float(us.replace(",", "")) > 0 for us in rows.values())
    gaps = {
        re.search(r"Adam step, ([a-z ]+) \(", name)[1]: float(name.split(": ")[1].rstrip(")"))
        for name in rows
        if "Adam" in name
    }
    assert gaps["foreach"] == gaps["single tensor"] == 0.0 and set(gaps) == {"foreach", "single tensor", "fused"}
