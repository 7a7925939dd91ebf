"""The speed tools that load a script and drive its own vector env (benchmark/tools/raw_env_sps.py, which
benchmark/speed.sh and benchmark/gpu.sh run; benchmark/tools/microbench.py): they must follow the scripts'
signatures, or a GPU session's one prepared call fails there."""

import re
import subprocess
import sys

import pytest

from tests.helpers import QUICK_ENV, ROOT


@pytest.mark.parametrize("script", ["ppo.py", "ppo_atari.py"])
def test_raw_env_sps_steps_each_env_path_of_the_script(script):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmark" / "tools" / "raw_env_sps.py"), script, QUICK_ENV[script], "2", "100"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    paths = re.findall(r"^raw \S+ x2 (.+), random actions drawn in advance: (\d+) steps/s$", result.stdout, re.MULTILINE)
    expected = ["native AtariVectorEnv", "SyncVectorEnv"] if script == "ppo_atari.py" else ["SyncVectorEnv"]
    assert [name.split(" (")[0] for name, _ in paths] == expected and all(int(rate) > 0 for _, rate in paths)


def test_microbench_times_each_piece_and_finds_foreach_adam_bit_exact():
    """The scripts take Adam's foreach implementation because it keeps the single-tensor numbers; the tool reports it."""
    tool = ROOT / "benchmark" / "tools" / "microbench.py"
    args = ["--number", "20", "--repeat", "1", "--cnn-batch", "2"]
    result = subprocess.run([sys.executable, str(tool), *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = dict(re.findall(r"^\| (.+) \| ([\d,.]+) \|$", result.stdout, re.MULTILINE))
    pieces = ["rollout policy step", "SyncVectorEnv step", "clip_grad_norm_", "update_minibatch", "Adam step", "Nature CNN"]
    assert all(any(name.startswith(piece) for name in rows) for piece in pieces), list(rows)  # each piece, by its name
    assert all(float(us.replace(",", "")) > 0 for us in rows.values())
    gaps = {
        re.search(r"Adam step, ([a-z ]+) \(", name)[1]: float(name.split(": ")[1].rstrip(")"))
        for name in rows
        if "Adam" in name
    }
    assert gaps["foreach"] == gaps["single tensor"] == 0.0 and set(gaps) == {"foreach", "single tensor", "fused"}
