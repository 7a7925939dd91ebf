"""Summarize benchmark runs from their TensorBoard logs: a markdown table and a PNG of learning curves.

    python benchmark/report.py benchmark/results/ppo/runs --title "ppo.py" --out benchmark/results/ppo/report

Runs are grouped by env id and experiment name (the run directory is `{env_id}__{exp_name}__{seed}__{time}`).
Per run: the mean return of its last 100 episodes, its wall time (first to last event) and its final SPS;
the table gives mean ± std over seeds (std over seeds, ddof=0). With `--at 100000,300000,...`, a second table
gives each run's mean of the last 100 episodes at the end of the first iteration at or past each of those steps:
the figure the script printed for that iteration ("return X (last 100)").
"""

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def read_run(run_dir: Path) -> dict:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    tags = events.Tags()["scalars"]
    returns = events.Scalars("charts/episodic_return") if "charts/episodic_return" in tags else []
    sps = events.Scalars("charts/SPS") if "charts/SPS" in tags else []
    walls = [e.wall_time for tag in tags for e in events.Scalars(tag)]
    iteration_steps = np.array([e.step for e in sps])  # SPS is logged once per iteration, at its last step
    return {
        "steps": np.array([e.step for e in returns]),
        "returns": np.array([e.value for e in returns]),
        "sps": sps[-1].value if sps else float("nan"),
        "wall": max(walls) - min(walls) if walls else float("nan"),
        "last_step": int(iteration_steps.max()) if sps else 0,
        "iteration_steps": iteration_steps,
    }


def collect(runs_dir: Path) -> dict:
    """{(env_id, exp_name): {seed: run}} for every run directory with an event file."""
    groups = defaultdict(dict)
    for event_file in sorted(runs_dir.rglob("events.out.tfevents.*")):
        run_dir = event_file.parent
        env_id, exp_name, seed, _ = str(run_dir.relative_to(runs_dir)).rsplit("__", 3)
        env_id = env_id.split(":")[-1]  # `ppo_rnn:CartPoleNoVel-v1` is the same task as `CartPoleNoVel-v1`
        run = read_run(run_dir)
        if len(run["returns"]):
            groups[(env_id, exp_name)][int(seed)] = run
    return groups


def first_step_reaching(run: dict, threshold: float, window: int = 100):
    """The first step at which the mean of the last `window` episodes reaches threshold, or None."""
    r = run["returns"]
    if len(r) < window:
        return None
    means = np.convolve(r, np.ones(window) / window, mode="valid")
    hits = np.flatnonzero(means >= threshold)
    return int(run["steps"][hits[0] + window - 1]) if len(hits) else None


def mean_at(run: dict, step: int, window: int = 100):
    """The mean of the last `window` episodes logged by the end of the first iteration at or past `step`.

    None if the run never got there or had no episode by then. The scripts log an iteration's episodes at
    its end, each at the step it ended on, so these are the episodes with step <= that iteration's last step.
    """
    past = run["iteration_steps"][run["iteration_steps"] >= step]
    if len(past) == 0:
        return None
    done = run["returns"][run["steps"] <= past.min()]
    return float(np.mean(done[-window:])) if len(done) else None


def table_at(groups: dict, at: list) -> str:
    head = "| env | experiment | seed | " + " | ".join(f"{s:,}" for s in at) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(at)]
    for (env_id, exp_name), runs in sorted(groups.items()):
        for seed, run in sorted(runs.items()):
            cells = [mean_at(run, s) for s in at]
            lines.append(f"| {env_id} | {exp_name} | {seed} | " + " | ".join("n/a" if c is None else f"{c:.2f}" for c in cells) + " |")
    return "\n".join(lines)


def table(groups: dict, threshold=None) -> str:
    head = "| env | experiment | seeds | steps | return (last 100 episodes) | wall time (min) | SPS |"
    rule = "|---|---|---|---|---|---|---|"
    if threshold is not None:
        head += f" first step at mean ≥ {threshold:g} |"
        rule += "---|"
    lines = [head, rule]
    for (env_id, exp_name), runs in sorted(groups.items()):
        finals = [np.mean(run["returns"][-100:]) for run in runs.values()]
        walls = [run["wall"] / 60 for run in runs.values()]
        sps = [run["sps"] for run in runs.values()]
        steps = max(run["last_step"] for run in runs.values())
        line = (
            f"| {env_id} | {exp_name} | {','.join(map(str, sorted(runs)))} | {steps:,} | "
            f"{np.mean(finals):.2f} ± {np.std(finals):.2f} | {np.mean(walls):.1f} | {np.mean(sps):,.0f} |"
        )
        if threshold is not None:
            reached = [first_step_reaching(run, threshold) for run in runs.values()]
            line += " " + ", ".join("never" if s is None else f"{s:,}" for s in reached) + " |"
        lines.append(line)
    return "\n".join(lines)


def plot(groups: dict, title: str, path: Path):
    env_ids = sorted({env_id for env_id, _ in groups})
    fig, axes = plt.subplots(1, len(env_ids), figsize=(5 * len(env_ids), 3.8), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids, strict=True):
        for (group_env, exp_name), runs in sorted(groups.items()):
            if group_env != env_id:
                continue
            grid = np.linspace(0, max(run["last_step"] for run in runs.values()), 200)
            curves = []
            for run in runs.values():
                # mean of the last (up to) 100 episodes at each logged episode, then onto a common grid
                smooth = np.array([run["returns"][max(0, i - 99) : i + 1].mean() for i in range(len(run["returns"]))])
                curves.append(np.interp(grid, run["steps"], smooth))
            mean, std = np.mean(curves, axis=0), np.std(curves, axis=0)
            ax.plot(grid, mean, label=f"{exp_name} ({len(runs)} seeds)")
            ax.fill_between(grid, mean - std, mean + std, alpha=0.2)
        ax.set_title(env_id)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episodic return (last 100)")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True, help="prefix of the .md and .png written")
    parser.add_argument("--threshold", type=float, default=None, help="add the first step reaching this mean")
    parser.add_argument("--at", default=None, help="comma-separated steps: add each run's mean of the last 100 there")
    args = parser.parse_args()
    groups = collect(args.runs_dir)
    if not groups:
        raise SystemExit(f"error: no runs with episodes under {args.runs_dir}")
    markdown = f"### {args.title}\n\n{table(groups, args.threshold)}\n"
    if args.at:
        at = [int(float(s)) for s in args.at.split(",")]
        markdown += f"\nMean of the last 100 episodes at the end of the first iteration at or past each step:\n\n{table_at(groups, at)}\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(markdown)
    plot(groups, args.title, args.out.with_suffix(".png"))
    print(markdown)
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
