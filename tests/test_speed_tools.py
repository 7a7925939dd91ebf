"""The speed tools that load a script and drive its own vector env (benchmark/tools/raw_env_sps.py, which
benchmark/speed.sh and benchmark/gpu.sh run): they must follow the scripts' signatures, or a GPU session's one
prepared call fails there."""

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
