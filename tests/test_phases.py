"""The per-line timing tool (benchmark/tools/phases.py) on a script with a known clock, and on a real script."""

import re
import sys
import textwrap

import pytest

from tests.helpers import ROOT, SCRIPTS, TINY, cli

sys.path.insert(0, str(ROOT / "benchmark" / "tools"))
import phases  # noqa: E402

# the shape of the four scripts' main block; each line advances a fake clock by a known amount
TOY = textwrap.dedent(
    """\
    import sys
    if __name__ == "__main__":
        # SETUP
        clock.t += 100.0
        n = int(sys.argv[1])
        try:
            for iteration in range(1, n + 1):
                # ROLLOUT
                for step in range(4):
                    clock.t += 0.5
                # UPDATE
                clock.t += 3.0
                # LOGGING
                clock.t += 0.25
        except KeyboardInterrupt:
            pass
        # SAVE AND CLOSE
        clock.t += 7.0
    """
)


class Clock:
    t = 0.0


def test_lines_and_sections_get_their_own_time(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY)
    clock, argv = Clock(), list(sys.argv)
    spent, hits, scope = phases.trace(str(path), ["3"], clock=lambda: clock.t, init_globals={"clock": clock})
    assert sys.argv == argv and scope["n"] == 3 and scope["__name__"] == "__main__"
    assert spent[10] == 3 * 4 * 0.5 and hits[10] == 12  # the rollout line, 4 times per iteration
    assert spent[12] == 3 * 3.0 and spent[14] == 3 * 0.25 and spent[4] == 100.0 and spent[18] == 7.0
    text = phases.summarize(str(path), spent, hits)
    assert "3 iterations, 15.75 s in the loop (5.2500 s per iteration), 107.00 s outside it" in text
    rows = re.findall(r"^\| (\S+) \| ([\d.]+) \| ([\d.]+)% \|$", text, re.M)
    assert rows == [("ROLLOUT", "2.0000", "38.1"), ("UPDATE", "3.0000", "57.1"), ("LOGGING", "0.2500", "4.8")]
    costliest = re.findall(r"^\| (\d+) \| (\S+) \| ([\d.]+) \| [\d.]+% \| (\S+) \|", text, re.M)
    assert costliest[:3] == [
        ("12", "UPDATE", "3.0000", "1"),
        ("10", "ROLLOUT", "2.0000", "4"),
        ("14", "LOGGING", "0.2500", "1"),
    ]


def test_a_script_that_fails_passes_its_error_on(tmp_path):
    path = tmp_path / "fails.py"
    path.write_text('import sys\nif __name__ == "__main__":\n    sys.exit("error: --foo must be positive")\n')
    with pytest.raises(SystemExit, match="--foo must be positive"):
        phases.trace(str(path), [])


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_has_its_sections_timed(script, tmp_path, monkeypatch):
    """Each script's banners become the table's sections. ppo.py through the command line, as a user runs it; the
    others in this process (phases.trace and summarize, what the command line prints), without a start of their own."""
    argv = [*TINY, "--total-timesteps", "96", "--no-cuda"]  # 3 iterations
    if script == "ppo.py":
        result = cli(script, *argv, cwd=tmp_path, via=[str(ROOT / "benchmark" / "tools" / "phases.py")])
        assert result.returncode == 0, result.stderr
        text = result.stdout
    else:
        monkeypatch.chdir(tmp_path)
        text = phases.summarize(str(ROOT / script), *phases.trace(str(ROOT / script), argv)[:2])
    assert f"{script}: 3 iterations," in text
    sections = re.findall(r"^\| ([A-Z][A-Z -]*) \| [\d.]+ \| [\d.]+% \|$", text, re.M)
    assert sections == ["LEARNING-RATE ANNEALING", "ROLLOUT", "ADVANTAGES", "FLATTEN", "UPDATE", "LOGGING"]
    # the env's step among the rollout's lines: ppo_atari.py receives a group's step just before sending its next one
    # (15 of 16 steps in the loop; the tracer counts a call written over three lines twice)
    env_step = r"\| (15|30) \| `.*receive\(" if script == "ppo_atari.py" else r"\| 16 \| `.*envs\.step\("
    assert re.search(r"^\| \d+ \| ROLLOUT \| [\d.]+ \| [\d.]+% " + env_step, text, re.M)
