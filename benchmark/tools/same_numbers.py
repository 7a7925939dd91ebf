"""Do two versions of the scripts compute the same numbers? Runs each case in tree A and in tree B (a git worktree of
another commit, say), each in a process of its own on the CPU, and compares the final parameters and every logged
TensorBoard scalar but SPS, bit for bit. For refactors that must not move a number.

    git worktree add /tmp/before main
    python benchmark/tools/same_numbers.py /tmp/before . [CASE ...]    # every case when none is named

Exit status 1 where any case differs."""

import subprocess
import sys
import tempfile
from pathlib import Path

# default settings of each script (both Atari paths), a few iterations each; ppo_kl stops updates at --target-kl;
# cont_ent: the entropy bonus the continuous script has by default on the DeepMind Control Suite
CASES = {
    "ppo": ["ppo.py", "--total-timesteps", "5120"],
    "ppo_kl": ["ppo.py", "--total-timesteps", "2560", "--target-kl", "0.002", "--no-clip-vloss"],
    "rnn": ["ppo_rnn.py", "--total-timesteps", "5120"],
    "rnn_gru": ["ppo_rnn.py", "--cell", "gru", "--total-timesteps", "2560", "--num-minibatches", "2"],
    "cont": ["ppo_continuous_action.py", "--total-timesteps", "6144"],
    "cont_ent": ["ppo_continuous_action.py", "--total-timesteps", "6144", "--ent-coef", "0.01"],  # DMC's default bonus
    "atari_native": ["ppo_atari.py", "--total-timesteps", "3072"],
    "atari_gym": ["ppo_atari.py", "--total-timesteps", "3072", "--no-native-envs"],
}

# run in the child: the script as `python SCRIPT ARGS` would run it, then its parameters and scalars into out.pt
DUMP = r"""
import glob, runpy, sys, torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
sys.argv = sys.argv[1:]
g = runpy.run_path(sys.argv[0], run_name="__main__")
(run_dir,) = glob.glob("runs/*")
events = EventAccumulator(run_dir, size_guidance={"scalars": 0}).Reload()
scalars = {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"] if t != "charts/SPS"}
torch.save({"params": [p.detach().cpu().clone() for p in g["agent"].parameters()], "scalars": scalars}, "out.pt")
"""


def run(tree: Path, argv: list, cwd: Path) -> dict:
    import torch

    cwd.mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-c", DUMP, str(tree / argv[0]), *argv[1:], "--no-cuda"], cwd=cwd, capture_output=True, text=True
    )
    if result.returncode:
        raise SystemExit(f"{tree / argv[0]} failed:\n{result.stderr[-3000:]}")
    return torch.load(cwd / "out.pt")


def main():
    import torch

    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    a, b, names = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), sys.argv[3:] or list(CASES)
    unknown = set(names) - set(CASES)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; the cases: {', '.join(CASES)}")
    differ = False
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            ra, rb = run(a, CASES[name], Path(tmp) / "a" / name), run(b, CASES[name], Path(tmp) / "b" / name)
            same_params = len(ra["params"]) == len(rb["params"]) and all(map(torch.equal, ra["params"], rb["params"]))
            same_scalars = ra["scalars"] == rb["scalars"]
            count = sum(len(v) for v in ra["scalars"].values())
            print(
                f"{name}: parameters {'identical' if same_params else 'DIFFER'}, {count} scalars {'identical' if same_scalars else 'DIFFER'}"
            )
            for tag in sorted(set(ra["scalars"]) | set(rb["scalars"])):
                if ra["scalars"].get(tag) != rb["scalars"].get(tag):
                    print(f"    {tag}: {ra['scalars'].get(tag, [])[:3]} against {rb['scalars'].get(tag, [])[:3]}")
            differ |= not (same_params and same_scalars)
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
