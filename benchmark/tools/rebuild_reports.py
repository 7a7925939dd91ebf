"""Does each committed report rebuild from what git holds? Every report that benchmark/report.py made under
benchmark/results/ is listed below with the command that made it, its inputs and its arguments. Each is rebuilt with
this tree's report.py from a commit's copy of its inputs (`git archive`: neither runs/, which git does not keep, nor
uncommitted files count) into a temporary folder, and its .md and .png files are compared byte for byte with the
commit's own.

    python benchmark/tools/rebuild_reports.py [NAME ...] [--rebuildable] [--commit REV] [--keep DIR] [--list]

Prints one line per report: identical, different (with the files), or, for the reports listed as not rebuildable,
why not (after trying, unless git holds none of their inputs). Exit status 1 where a report listed as rebuildable
differs. NAME: a results folder's name, or FOLDER/STEM for a report not called report (ppo_atari_1m_native/stats).
"""

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "benchmark/results"
# The reports that predate --save-scalars (45719ca, 2026-11-27) were made from their runs' TensorBoard events (runs/),
# which git does not keep: the logs give no wall time and no episodes (n/a where the events gave figures).
EVENTS = "made from its runs' TensorBoard events (runs/, not kept) before --save-scalars kept them (45719ca)"
OLDER = "by a report.py before rliable's table (its 'return (last 100 episodes)' column)"


@dataclass
class Report:
    made_by: str  # the command that made it
    inputs: list  # folders under benchmark/results/ that report.py reads: the command's (and the logs git holds instead)
    args: list  # report.py's other arguments (--save-scalars, which changes nothing without runs/, left out)
    why_not: str = ""  # why it cannot rebuild from git; "" for a report that does
    stem: str = "report"


REPORTS = {
    "ppo_continuous_action_v4": Report(
        "bash benchmark/ppo_continuous_action_v4.sh",
        ["ppo_continuous_action_v4/runs", "ppo_continuous_action_v4/scalars"],
        ["--title", "MuJoCo v4, 1M steps"],
    ),
    "ppo_continuous_action_dmc": Report(
        "bash benchmark/ppo_continuous_action_dmc.sh",
        ["ppo_continuous_action_dmc/runs", "ppo_continuous_action_dmc/scalars"],
        ["--title", "DeepMind Control Suite, 1M steps", "--published", "--peaks"]
        + ["--compare", "ppo_continuous_action", "ppo_continuous_action_no_bootstrap"],
    ),
    "ppo_continuous_action_dmc_heldout": Report(
        "HELDOUT=1 bash benchmark/ppo_continuous_action_dmc.sh",
        ["ppo_continuous_action_dmc_heldout/runs", "ppo_continuous_action_dmc_heldout/scalars"],
        ["--title", "DeepMind Control Suite, 1M steps: held-out tasks, --ent-coef 0.01 and 0", "--published", "--peaks"]
        + ["--compare", "ppo_continuous_action_ent_coef_0.01", "ppo_continuous_action_ent_coef_0.0"],
    ),
    "ppo_atari_1m_native/stats": Report(
        "benchmark/README.md's report.py command (rliable statistics of the Breakout 1M runs; 371941e)",
        ["ppo_atari_1m_native/logs"],
        ["--title", "ppo_atari.py, Breakout 1M, CPU: default and throughput settings (stats by report.py from the run logs)"]
        + ["--compare", "ppo_atari__throughput", "ppo_atari"],
        stem="stats",
    ),
    "ppo": Report(
        "bash benchmark/ppo.sh (deb578a)",
        ["ppo/runs", "ppo/scalars", "ppo/logs"],
        ["--title", "ppo.py, classic control, 500k steps"],
        EVENTS,
    ),
    "ppo_rnn": Report(
        "bash benchmark/ppo_rnn.sh (75cd0e9)",
        ["ppo_rnn/runs", "ppo_rnn/scalars", "ppo_rnn/logs"],
        ["--title", "memory tasks, 500k steps (100k: the checkpoints evaluated in eval_100k.txt)"]
        + ["--threshold", "solved", "--success"],
        EVENTS,
    ),
    "ppo_continuous_action": Report(
        "bash benchmark/ppo_continuous_action.sh (8a818a6)",
        ["ppo_continuous_action/runs", "ppo_continuous_action/scalars", "ppo_continuous_action/logs"],
        ["--title", "MuJoCo v5, 1M steps", "--compare", "ppo_continuous_action", "ppo_continuous_action_no_bootstrap"],
        EVENTS,
    ),
    "ppo_continuous_action_ent_coef": Report(
        "VARIANT=ent_coef_0.01 bash benchmark/ppo_continuous_action.sh (9622660)",
        ["ppo_continuous_action_ent_coef/runs", "ppo_continuous_action_ent_coef/scalars"]
        + ["ppo_continuous_action_ent_coef/logs", "ppo_continuous_action/logs"],
        ["--peaks", "--title", "MuJoCo v5, 1M steps: the default and --ent-coef 0.01"]
        + ["--compare", "ppo_continuous_action_ent_coef_0.01", "ppo_continuous_action"],
        f"its variant's rows were {EVENTS}",
    ),
    "ppo_continuous_action_target_kl": Report(
        "TARGET_KL=0.1 bash benchmark/ppo_continuous_action.sh (a3b271f)",
        ["ppo_continuous_action_target_kl/runs", "ppo_continuous_action_target_kl/scalars"]
        + ["ppo_continuous_action_target_kl/logs", "ppo_continuous_action/logs"],
        ["--peaks", "--title", "MuJoCo v5, 1M steps: the default and --target-kl 0.1"]
        + ["--compare", "ppo_continuous_action_target_kl_0.1", "ppo_continuous_action"],
        f"its variant's rows were {EVENTS}",
    ),
    "ppo_continuous_action_dmc_fall": Report(
        'FALL=1 [TASKS="..."] bash benchmark/ppo_continuous_action_dmc.sh (525fd1a)',
        [
            "ppo_continuous_action_dmc_fall/runs",
            "ppo_continuous_action_dmc_fall/scalars",
            "ppo_continuous_action_dmc_fall/logs",
        ]
        + ["ppo_continuous_action_dmc/runs", "ppo_continuous_action_dmc/scalars"],
        ["--peaks", "--published", "--title", "DeepMind Control Suite, 1M steps: the default and settings changed"],
        f"{EVENTS}, by a report.py with one published column",
    ),
    "ppo_atari_1m_native": Report(
        'SHORT=1 SEEDS="..." bash benchmark/ppo_atari.sh (53f7939)',
        ["ppo_atari_1m_native/runs", "ppo_atari_1m_native/scalars", "ppo_atari_1m_native/logs"],
        ["--title", "Breakout, 1M steps, CPU, native path", "--at", "100000,300000,500000,800000,999424"],
        f"{EVENTS}, {OLDER}",
    ),
    "ppo_atari_1m": Report(
        "SHORT=1 bash benchmark/ppo_atari.sh on the gymnasium path (e847a3b)",
        ["ppo_atari_1m/runs", "ppo_atari_1m/logs"],
        ["--title", "Breakout, 1M steps, CPU"],
        f"{EVENTS}, {OLDER}; git holds none of its runs' logs",
    ),
    "ppo_atari_gpu": Report(
        "report.py on the events of `bash benchmark/gpu.sh start` (f945b96)",
        ["ppo_atari_gpu/tb"],
        ["--title", "Breakout, throughput settings, one H100 (stopped at 5.6M of 10M)"]
        + ["--at", "1000000,2000000,3000000,4000000,5000000,5627904"],
        f"made {OLDER}; its events are kept (tb/), so a report of today's form rebuilds from them",
    ),
    "torchrun": Report(
        "bash benchmark/torchrun.sh cartpole, then atari (bf79f06)",
        ["torchrun/runs", "torchrun/scalars", "torchrun/logs"],
        ["--title", "torchrun, 2 processes", "--at", "100000,300000,500000,800000,999424"],
        f"{EVENTS}, {OLDER}; git holds none of the CartPole runs' logs",
    ),
}


def committed(commit: str, paths: list) -> list:
    """The paths (files or folders) that the commit holds."""
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, "--", *paths], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return listed.stdout.split()


def extract(commit: str, paths: list, into: Path):
    """The commit's copy of the paths (those it holds), under `into`, as on a clone."""
    paths = committed(commit, paths)
    if not paths:
        return
    archive = into / "inputs.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", commit, "--", *paths], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()


def outputs(name: str, report: Report) -> list:
    """The report's files, from the results folder: PREFIX.md, PREFIX.png and PREFIX_profile.png."""
    folder = name.split("/")[0]
    return [f"{RESULTS}/{folder}/{report.stem}{suffix}" for suffix in (".md", ".png", "_profile.png")]


def rebuild(name: str, report: Report, commit: str, work: Path) -> tuple:
    """(identical, what to print): the report rebuilt from the commit's inputs into `work`, compared with the commit's."""
    clone, out = work / "clone", work / "rebuilt"
    clone.mkdir(parents=True, exist_ok=True)
    inputs = [f"{RESULTS}/{path}" for path in report.inputs]
    extract(commit, [*inputs, *outputs(name, report)], clone)
    if not any((clone / path).exists() for path in inputs):
        return False, "no input in git"
    argv = [sys.executable, str(ROOT / "benchmark" / "report.py"), *inputs, *report.args, "--out", str(out / report.stem)]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(argv, cwd=clone, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        return False, f"report.py failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}"
    differ = []
    for path in outputs(name, report):
        old, new = clone / path, out / Path(path).name
        if old.exists() != new.exists() or (old.exists() and old.read_bytes() != new.read_bytes()):
            differ.append(Path(path).name)
    return not differ, "identical" if not differ else f"different: {', '.join(differ)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"reports to rebuild (default: all): {', '.join(REPORTS)}")
    parser.add_argument("--rebuildable", action="store_true", help="only the reports listed as rebuildable")
    parser.add_argument("--commit", default="HEAD", help="the commit whose inputs and reports are compared (default HEAD)")
    parser.add_argument("--keep", type=Path, default=None, help="rebuild into this folder and keep it")
    parser.add_argument("--list", action="store_true", help="print each report's command, inputs and arguments; rebuild none")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in REPORTS]
    if unknown:
        raise SystemExit(f"error: no report {', '.join(unknown)}; the reports: {', '.join(REPORTS)}")
    names = args.names or [name for name, report in REPORTS.items() if not (args.rebuildable and report.why_not)]
    if args.list:
        for name in names:
            report = REPORTS[name]
            print(f"{name}: {report.made_by}")
            inputs = " ".join(f"{RESULTS}/{path}" for path in report.inputs)
            prefix = f"{RESULTS}/{name.split('/')[0]}/{report.stem}"
            print(f"  python benchmark/report.py {inputs} {shlex.join(report.args)} --out {prefix}")
            print(f"  {'not rebuildable: ' + report.why_not if report.why_not else 'rebuildable'}")
        return 0
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            report = REPORTS[name]
            work = (args.keep or Path(tmp)) / name.replace("/", "__")
            same, what = rebuild(name, report, args.commit, work)
            if report.why_not:
                print(f"{name}: {what} (not rebuildable: {report.why_not})", flush=True)
            else:
                failed += not same
                print(f"{name}: {what}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
