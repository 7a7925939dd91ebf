"""Wall time of two versions of the scripts, side by side: each case runs in tree A and in tree B in turn (A, B, B, A,
A, B, ...: neither always first), n times, pinned to the same cores with taskset and OMP_NUM_THREADS set to their
number, each a fresh `python SCRIPT ...` in a temporary directory, timed from start to exit (imports and start-up
included, as a user waits for them). Prints and writes a markdown table: each case's median wall time in A and in B,
and A's median over B's (B's speed-up over A), with the machine's CPU, the date and both trees' commits. The cases
named `-start` (not run by default) cut each run to one iteration: a run's fixed cost, beside the whole run's.

    git worktree add /tmp/baseline 88f3b48
    python benchmark/tools/side_by_side.py /tmp/baseline . --n 3 --out benchmark/results/speed/side_by_side.md
    python benchmark/tools/side_by_side.py /tmp/baseline . ppo ppo-start cont cont-start rnn rnn-start atari atari-start

Run it on an otherwise idle machine: other work on the pinned cores is timed too."""

import argparse
import datetime
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# name: (cores, script and its arguments): each script's default settings; a short budget, as issue 56 set them
CASES = {
    "ppo": ("0", ["ppo.py", "--env-id", "CartPole-v1", "--total-timesteps", "100000"]),
    "cont": ("0", ["ppo_continuous_action.py", "--env-id", "HalfCheetah-v5", "--total-timesteps", "30720"]),
    "rnn": ("0", ["ppo_rnn.py", "--env-id", "CartPoleNoVel-v1", "--total-timesteps", "100000"]),
    "atari": ("0,1", ["ppo_atari.py", "--env-id", "BreakoutNoFrameskip-v4", "--total-timesteps", "20480"]),
}
# the same runs cut to one iteration (one batch at the default sizes): what a run costs besides its iterations (imports,
# envs, agent, TensorBoard, closing), which no change to the training loop can shorten
STARTS = {
    "ppo-start": ("0", ["ppo.py", "--env-id", "CartPole-v1", "--total-timesteps", "512"]),
    "cont-start": ("0", ["ppo_continuous_action.py", "--env-id", "HalfCheetah-v5", "--total-timesteps", "2048"]),
    "rnn-start": ("0", ["ppo_rnn.py", "--env-id", "CartPoleNoVel-v1", "--total-timesteps", "512"]),
    "atari-start": ("0,1", ["ppo_atari.py", "--env-id", "BreakoutNoFrameskip-v4", "--total-timesteps", "1024"]),
}
ALL_CASES = CASES | STARTS


def commit(tree: Path) -> str:
    result = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return (result.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def load(script: str):
    """One of the four scripts of this tree as a module (its __main__ block does not run): for the tools that time or
    drive its pieces (microbench.py, raw_env_sps.py)."""
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), Path(__file__).resolve().parents[2] / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(tree: Path, cores: str, argv: list) -> float:
    """Seconds from the start of `python SCRIPT ARGS --no-cuda` in tree to its exit (a failed run stops the tool)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(len(cores.split(","))), "WANDB_MODE": "disabled"}
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        result = subprocess.run(
            ["taskset", "-c", cores, sys.executable, str(tree / argv[0]), *argv[1:], "--no-cuda"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"error: {argv[0]} in {tree} exited with {result.returncode}:\n{result.stderr[-2000:]}")
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the baseline tree")
    parser.add_argument("b", type=Path, help="the tree compared with it")
    parser.add_argument(
        "cases", nargs="*", default=list(CASES), help=f"some of {', '.join(ALL_CASES)} (default: {', '.join(CASES)})"
    )
    parser.add_argument("--n", type=int, default=3, help="runs of each case in each tree")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")
    args = parser.parse_args()
    unknown = [case for case in args.cases if case not in ALL_CASES]
    if unknown:
        raise SystemExit(f"error: no case {', '.join(unknown)}; the cases: {', '.join(ALL_CASES)}")
    a, b = args.a.resolve(), args.b.resolve()
    lines = [
        f"Wall time, median of {args.n} runs each, alternated; {cpu()}, {datetime.date.today()}; "
        f"A = {commit(a)}, B = {commit(b)} (benchmark/tools/side_by_side.py)",
        "",
        "| case | command | cores | A (s) | B (s) | A / B | A's runs (s) | B's runs (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in args.cases:
        cores, argv = ALL_CASES[case]
        times = {a: [], b: []}
        for i in range(args.n):
            for tree in (a, b) if i % 2 == 0 else (b, a):
                times[tree].append(timed(tree, cores, argv))
                print(f"{case} {'A' if tree == a else 'B'} run {i + 1}: {times[tree][-1]:.2f} s", flush=True)
        median_a, median_b = statistics.median(times[a]), statistics.median(times[b])
        runs = [", ".join(f"{t:.2f}" for t in times[tree]) for tree in (a, b)]
        lines.append(
            f"| {case} | `{' '.join(argv)}` | {cores} | {median_a:.2f} | {median_b:.2f} | **{median_a / median_b:.2f}** | "
            f"{runs[0]} | {runs[1]} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
