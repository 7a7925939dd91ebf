"""Summarize benchmark runs: markdown tables with rliable's statistics and PNGs of learning curves and profiles.

    python benchmark/report.py benchmark/results/ppo/runs --title "ppo.py" --out benchmark/results/ppo/report
    python benchmark/report.py benchmark/results/ppo_atari_1m_played/logs --out ... --compare ppo_atari ppo_atari__native
    python benchmark/report.py DIR1 DIR2 --env dm_control_cartpole-swingup-v0 --peaks --out ...  (several folders, one env)

Runs come from TensorBoard run directories, `{env_id}__{exp_name}__{seed}__{time}` (the scripts' and sweep.py's),
from the compact scalars that `--save-scalars` keeps of them, `scalars/{run directory's name}.json.gz` beside the
`runs/` folder (what git keeps of a benchmark's runs: a clean clone rebuilds its report from them, byte for byte), or
from the scripts' stdout logs, `{script}[__{tag}]__{env_id}__{seed}.log` (run_many.sh's and sweep.py's), grouped
by env id and experiment; a run's events take the place of its scalars. A run's score: the mean return of its last 100 episodes (from a log: the last iteration's
"return X (last 100)"). Per group, the table gives the interquartile mean (IQM) of the runs' scores with its 95%
stratified-bootstrap confidence interval (rliable; with fewer than 4 runs the IQM is the mean) and, as CleanRL's
tables do, mean ± std (ddof=0). Over the tasks of an experiment: the aggregate IQM, median and mean of normalized
scores with CIs, and a performance profile (PREFIX_profile.png); NORMALIZATION says what each task is normalized
by. `--compare A B`: the probability that experiment A improves on B, over the tasks both ran, with its CI. The
learning curves are the IQM over runs with a 95% CI band. With `--at 100000,300000,...`, a table gives each run's
mean of the last 100 episodes at the end of the first iteration at or past each of those steps: the figure the
script printed for that iteration. Bootstraps are seeded (`--seed`): the same runs give the same intervals.
"""

import argparse
import gzip
import json
import re
import warnings
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rliable import library as rly  # noqa: E402
from rliable import metrics, plot_utils  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

# (low, high): a normalized score is (score - low) / (high - low).
# Atari: random and human scores (the human-normalized score of Mnih et al. 2015; the values of Badia et al. 2020,
# Agent57, which rliable's Atari data uses). Classic control: the lowest return the time limit allows, and
# gymnasium's reward_threshold (1.0 = "solved"); ppo_rnn.py's cue-recall task: always wrong (-1) to 95% right (0.9).
# MuJoCo: D4RL's random and expert reference returns (Fu et al. 2020).
ATARI = {
    "Asterix": (210.0, 8503.3),
    "BeamRider": (363.9, 16926.5),
    "Breakout": (1.7, 30.5),
    "DemonAttack": (152.1, 1971.0),
    "Enduro": (0.0, 860.5),
    "MsPacman": (307.3, 6951.6),
    "Pong": (-20.7, 14.6),
    "Qbert": (163.9, 13455.0),
    "Seaquest": (68.4, 42054.7),
    "SpaceInvaders": (148.0, 1668.7),
}
NORMALIZATION = {
    "CartPole-v1": (0.0, 475.0),
    "CartPoleNoVel-v1": (0.0, 475.0),
    "Acrobot-v1": (-500.0, -100.0),
    "AcrobotNoVel-v1": (-500.0, -100.0),
    "MountainCar-v0": (-200.0, -110.0),
    "HalfCheetah-v5": (-280.178953, 12135.0),
    "Hopper-v5": (-20.272305, 3234.3),
    "Walker2d-v5": (1.629008, 4592.3),
    "Ant-v5": (-325.6, 3879.7),
}
# MuJoCo v4 (CleanRL's table's versions): the v5 bounds, the same bodies and rewards
NORMALIZATION.update({f"{name}-v4": NORMALIZATION[f"{name}-v5"] for name in ("HalfCheetah", "Hopper", "Walker2d", "Ant")})
NORMALIZATION.update({f"MemoryL{length}K{cues}-v0": (-1.0, 0.9) for length in (1, 3, 10, 30, 100, 300) for cues in (2, 4)})
NORMALIZATION.update({f"{game}NoFrameskip-v4": bounds for game, bounds in ATARI.items()})
NORMALIZATION.update({f"ALE/{game}-v5": bounds for game, bounds in ATARI.items()})
# Published figures beside a table (--published): CleanRL's ppo_continuous_action.py on the DeepMind Control Suite
# through Shimmy, mean ± std over seeds, at its default 1M steps and at 8M: {column: (where, {task: (mean, std)})}.
PUBLISHED = {
    "CleanRL, 1M steps, 3 seeds": (
        "CleanRL's docs/rl-algorithms/ppo.md, the table its benchmark/ppo.sh made at b558b2b4",
        {
            "cartpole-swingup": (640.86, 11.44),
            "walker-walk": (392.51, 56.25),
            "cheetah-run": (432.56, 82.54),
            "reacher-easy": (626.28, 15.51),
            "finger-spin": (590.49, 171.09),
            "ball_in_cup-catch": (900.78, 5.26),
            "cartpole-balance": (855.47, 22.06),
            "pendulum-swingup": (242.81, 245.95),
            "point_mass-easy": (273.95, 362.28),
            "finger-turn_easy": (180.42, 44.91),
            "fish-upright": (516.21, 59.52),
            "reacher-hard": (443.80, 9.64),
        },
    ),
    "CleanRL, 8M steps, 10 seeds": (
        "CleanRL's docs/rl-algorithms/rpo.md at 17a2406f, column ppo_continuous_action_8M",
        {
            "cartpole-swingup": (590.21, 16.72),
            "walker-walk": (305.74, 92.15),
            "cheetah-run": (472.14, 99.62),
            "reacher-easy": (773.01, 56.70),
            "finger-spin": (630.06, 252.99),
            "ball_in_cup-catch": (935.26, 12.57),
            "cartpole-balance": (790.36, 17.64),
            "pendulum-swingup": (472.19, 385.47),
            "point_mass-easy": (534.23, 264.35),
            "finger-turn_easy": (237.76, 78.10),
            "fish-upright": (559.72, 65.79),
            "reacher-hard": (637.84, 81.15),
        },
    ),
}


def published_figure(env_id: str, column: str):
    """(mean, std) of PUBLISHED's column for a dm_control/ id (or its run directories' dm_control_ form), or None."""
    task = env_id.removeprefix("dm_control/").removeprefix("dm_control_").removesuffix("-v0")
    return PUBLISHED[column][1].get(task) if env_id.startswith("dm_control") else None


# rliable seeds arch's bootstraps with a RandomState, which arch 7 still takes (and warns it will not)
warnings.filterwarnings("ignore", message="random_state is deprecated", category=FutureWarning)


def learning_curve(steps: np.ndarray, returns: np.ndarray) -> tuple:
    """(steps, the mean of the last (up to) 100 episodes at each logged episode)."""
    return steps, np.array([returns[max(0, i - 99) : i + 1].mean() for i in range(len(returns))])


def scalars_of(run_dir: Path) -> dict:
    """What the report reads of a run's TensorBoard events, as plain numbers: each episode's step and return, each
    iteration's last step (SPS is logged once per iteration, there), the last SPS, the time from the first event to the
    last, and the largest approximate KL (None where the run logged none)."""
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()
    tags = events.Tags()["scalars"]
    episodes = events.Scalars("charts/episodic_return") if "charts/episodic_return" in tags else []
    sps = events.Scalars("charts/SPS") if "charts/SPS" in tags else []
    kls = [e.value for e in events.Scalars("losses/approx_kl")] if "losses/approx_kl" in tags else []
    walls = [e.wall_time for tag in tags for e in events.Scalars(tag)]
    return {
        "steps": [e.step for e in episodes],
        "returns": [e.value for e in episodes],
        "iteration_steps": [e.step for e in sps],
        "sps": sps[-1].value if sps else None,
        "wall": max(walls) - min(walls) if walls else None,
        "max_kl": max(kls) if kls else None,
    }


def from_scalars(scalars: dict) -> dict:
    """A run as the tables and plots read it, from scalars_of's numbers (from the events, or from their saved copy)."""
    steps, values = np.array(scalars["steps"], dtype=np.int64), np.array(scalars["returns"], dtype=np.float64)
    iteration_steps = np.array(scalars["iteration_steps"], dtype=np.int64)
    return {
        "steps": steps,
        "returns": values,
        "final": float(np.mean(values[-100:])) if len(values) else float("nan"),
        "curve": learning_curve(steps, values),
        "sps": float("nan") if scalars["sps"] is None else scalars["sps"],
        "wall": float("nan") if scalars["wall"] is None else scalars["wall"],
        "last_step": int(iteration_steps.max()) if len(iteration_steps) else 0,
        "iteration_steps": iteration_steps,
        "max_kl": float("nan") if scalars["max_kl"] is None else scalars["max_kl"],
    }


def read_run(run_dir: Path) -> dict:
    return from_scalars(scalars_of(run_dir))


SCALARS = ".json.gz"  # scalars/{run directory's name}.json.gz: a run's scalars_of, gzipped JSON (the same bytes each time)


def save_scalars(run_dir: Path, scalars: dict):
    """Keep a run's scalars where git keeps them: in a `scalars` folder beside the nearest `runs` folder above it."""
    runs = next((folder for folder in run_dir.parents if folder.name == "runs"), None)
    if runs is None:
        raise SystemExit(f"error: --save-scalars keeps them beside a runs/ folder, and {run_dir} is in none")
    path = runs.parent / "scalars" / f"{run_dir.name}{SCALARS}"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(scalars).encode(), mtime=0))


def run_key(name: str) -> tuple:
    """(env id, experiment, seed) of a run directory's name, `{env_id}__{exp_name}__{seed}__{time}`."""
    env_id, exp_name, seed, _ = name.rsplit("__", 3)
    return env_id.split(":")[-1], exp_name, int(seed)  # `ppo_rnn:CartPoleNoVel-v1` is the task `CartPoleNoVel-v1`


# the scripts' progress line; "(last N)" is how logs before the run-management redesign named the return's window
LOG_LINE = re.compile(r"^iter \d+/\d+ step (\d+) SPS (\d+) return ([-\d.]+) \((?:last \d+|\d+ episodes?)\)", re.M)


def read_log(path: Path) -> dict:
    """A run from the script's stdout: each iteration's "step S SPS X return R (k episodes)" line (no episodes)."""
    lines = [(int(step), int(sps), float(ret)) for step, sps, ret in LOG_LINE.findall(path.read_text())]
    steps = np.array([step for step, _, _ in lines])
    means = np.array([ret for _, _, ret in lines])
    return {
        "final": float(means[-1]) if len(lines) else float("nan"),
        "curve": (steps, means),
        "sps": lines[-1][1] if lines else float("nan"),
        "wall": float("nan"),
        "last_step": int(steps[-1]) if len(lines) else 0,
    }


def collect(runs_dir: Path, save: bool = False) -> dict:
    """{(env_id, exp_name): {seed: run}} for every run directory with an event file, saved scalars or run log (the events
    first, then the scalars); `save`: keep the scalars of each run read from its events (save_scalars)."""
    groups = defaultdict(dict)
    for log in sorted(runs_dir.rglob("*.log")):
        parts = log.stem.split("__")
        if len(parts) < 3 or not parts[-1].isdigit():  # not a run's log (torchrun.sh's speed_ppo_1proc.log)
            continue
        *name, env_id, seed = parts
        run = read_log(log)
        if np.isfinite(run["final"]):
            groups[(env_id.split(":")[-1], "__".join(name))][int(seed)] = run
    for path in sorted(runs_dir.rglob(f"*{SCALARS}")):  # a run's saved scalars take the place of its log
        env_id, exp_name, seed = run_key(path.name.removesuffix(SCALARS))
        run = from_scalars(json.loads(gzip.decompress(path.read_bytes())))
        if len(run["returns"]):
            groups[(env_id, exp_name)][seed] = run
    for event_file in sorted(runs_dir.rglob("events.out.tfevents.*")):  # and its events take the place of both
        run_dir = event_file.parent
        parts = run_dir.relative_to(runs_dir).parts
        parts = parts[len(parts) - parts[::-1].index("runs") :] if "runs" in parts else parts  # ALE/Pong-v5__... stays
        env_id, exp_name, seed = run_key("/".join(parts))
        scalars = scalars_of(run_dir)
        if save:
            save_scalars(run_dir, scalars)
        run = from_scalars(scalars)
        if len(run["returns"]):
            groups[(env_id, exp_name)][seed] = run
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
            lines.append(
                f"| {env_id} | {exp_name} | {seed} | " + " | ".join("n/a" if c is None else f"{c:.2f}" for c in cells) + " |"
            )
    return "\n".join(lines)


def estimates(scores: dict, func, reps: int, seed: int) -> tuple:
    """rliable's point estimates and 95% stratified-bootstrap CIs, seeded: rliable 1.2.0 draws the resampled runs from
    numpy's global generator (its random_state reaches only arch's), so that generator is seeded here first."""
    np.random.seed(seed)
    return rly.get_interval_estimates(scores, func, reps=reps, random_state=np.random.RandomState(seed))


def interval(scores: dict, func, reps: int, seed: int) -> dict:
    """{key: (point, low, high)}: func's point estimate and 95% stratified-bootstrap CI for each key's
    (runs x tasks) score matrix (a pair of matrices for the probability of improvement)."""
    points, cis = estimates(scores, func, reps, seed)
    return {key: (float(points[key][0]), float(cis[key][0][0]), float(cis[key][1][0])) for key in scores}


def trim_mean_25(x: np.ndarray, axis=None):
    """scipy.stats.trim_mean(x, 0.25, axis), which rliable's aggregate_iqm is, without the argument handling that took
    most of its time over a bootstrap's thousands of calls: the same partition and mean, so the same numbers, bit for
    bit, for the finite scores here (a report rebuilds byte for byte: benchmark/tools/rebuild_reports.py)."""
    x = np.asarray(x)
    if axis is None:
        x, axis = x.ravel(), 0
    low = int(0.25 * x.shape[axis])
    high = x.shape[axis] - low
    kept = [slice(None)] * x.ndim
    kept[axis] = slice(low, high)
    return np.mean(np.partition(x, (low, high - 1), axis)[tuple(kept)], axis=axis)


def iqm(x: np.ndarray) -> np.ndarray:
    return np.array([trim_mean_25(x)])  # metrics.aggregate_iqm(x)


def curve_iqm(x: np.ndarray) -> np.ndarray:
    """rliable's IQM at each point of (runs x tasks x points) curves, in one call: metrics.aggregate_iqm(x[..., t])."""
    return trim_mean_25(x.reshape(-1, x.shape[-1]), axis=0)


def group_iqms(groups: dict, reps: int, seed: int) -> dict:
    """{(env_id, exp_name): (IQM, low, high)} of each group's final scores."""
    scores = {key: np.array([[run["final"]] for _, run in sorted(runs.items())]) for key, runs in groups.items()}
    return {key: interval({key: m}, iqm, reps, seed)[key] for key, m in scores.items()}


def task_threshold(threshold, env_id: str):
    """A number, or "solved": the task's own (the top of its NORMALIZATION; None where it has none)."""
    if threshold != "solved":
        return float(threshold)
    return NORMALIZATION[env_id][1] if env_id in NORMALIZATION else None


def success_rate(run: dict):
    """A run's share of its last 100 episodes that succeeded, on a task whose every episode returns +1 (success)
    or -1 (failure), such as ppo_rnn.py's MemoryL*; None for other tasks and for runs read from logs."""
    returns = run.get("returns")
    if returns is None or not len(returns) or not np.all(np.abs(returns) == 1):
        return None
    return float(np.mean(returns[-100:] == 1))


def table(
    groups: dict, threshold=None, reps: int = 5000, seed: int = 0, success: bool = False, published: bool = False
) -> str:
    iqms = group_iqms(groups, reps, seed)
    head = "| env | experiment | seeds | steps | IQM [95% CI] | mean ± std | wall time (min) | SPS |"
    rule = "|---|---|---|---|---|---|---|---|"
    if threshold is not None:
        head += (
            " first step at mean ≥ the task's solved level |"
            if threshold == "solved"
            else f" first step at mean ≥ {float(threshold):g} |"
        )
        rule += "---|"
    if success:
        head += " success, last 100 episodes (%) |"
        rule += "---|"
    if published:
        head += "".join(f" {column}: mean ± std |" for column in PUBLISHED)
        rule += "---|" * len(PUBLISHED)
    lines = [head, rule]
    for (env_id, exp_name), runs in sorted(groups.items()):
        finals = [run["final"] for run in runs.values()]
        walls = [run["wall"] / 60 for run in runs.values()]
        sps = [run["sps"] for run in runs.values()]
        steps = max(run["last_step"] for run in runs.values())
        point, low, high = iqms[(env_id, exp_name)]
        wall = "n/a" if np.isnan(walls).all() else f"{np.nanmean(walls):.1f}"
        line = (
            f"| {env_id} | {exp_name} | {','.join(map(str, sorted(runs)))} | {steps:,} | {point:.2f} [{low:.2f}, {high:.2f}] | "
            f"{np.mean(finals):.2f} ± {np.std(finals):.2f} | {wall} | {np.mean(sps):,.0f} |"
        )
        level = None if threshold is None else task_threshold(threshold, env_id)
        if level is not None:
            # a run read from its log has no episodes to count: n/a, not never
            reached = [first_step_reaching(run, level) if "returns" in run else "n/a" for run in runs.values()]
            steps_text = ", ".join("never" if s is None else s if s == "n/a" else f"{s:,}" for s in reached)
            line += f" {level:g}: {steps_text} |" if threshold == "solved" else f" {steps_text} |"
        elif threshold is not None:  # "solved" on a task without a level
            line += " n/a |"
        if success:
            rates = [success_rate(run) for run in runs.values()]
            line += " " + ("n/a" if None in rates else ", ".join(f"{100 * r:.0f}" for r in rates)) + " |"
        if published:
            figures = [published_figure(env_id, column) for column in PUBLISHED]
            line += "".join(" n/a |" if f is None else f" {f[0]:.2f} ± {f[1]:.2f} |" for f in figures)
        lines.append(line)
    return "\n".join(lines)


def peak(run: dict) -> tuple:
    """(the highest mean of 100 episodes in a row, the step of the last of them): the learning curve's top, where its
    window is whole (from a log, where the script printed it)."""
    steps, means = run["curve"]
    if len(run.get("returns", ())) >= 100:  # the curve's first 99 points average fewer episodes
        steps, means = steps[99:], means[99:]
    k = int(np.argmax(means))
    return float(means[k]), int(steps[k])


# A run falls when its end (the mean of its last 100 episodes) is under FALL_RATIO of its peak (the best mean of 100
# episodes in a row) and under the peak by at least FALL_ERRORS standard errors of the end (the last 100's standard
# deviation over 10), so that the noise of a peak picked from hundreds of windows is not a fall. Fixed before the DMC
# runs it counts (docs/continuous.md, "The fall, counted").
FALL_RATIO = 0.8
FALL_ERRORS = 3.0


def drop_in_errors(run: dict) -> float:
    """How far the run's peak is above its end, in standard errors of the end (nan from a log: no episodes)."""
    returns = run.get("returns", np.array([np.nan]))[-100:]
    with np.errstate(divide="ignore", invalid="ignore"):
        return (peak(run)[0] - run["final"]) / (np.std(returns) / np.sqrt(len(returns)))


def fell(run: dict):
    """Whether the run fell after its peak (FALL_RATIO and FALL_ERRORS); None from a log."""
    drop = drop_in_errors(run)
    return None if np.isnan(drop) else bool(run["final"] < FALL_RATIO * peak(run)[0] and drop >= FALL_ERRORS)


def peaks_table(groups: dict) -> str:
    """Per run: its score (the last 100), its peak (the best 100 in a row), the end over the peak, the drop in standard
    errors of the end, whether it fell (fell()), and the largest approximate KL an update logged (losses/approx_kl, the
    mean over its minibatches); then, per experiment, how many of its runs fell."""
    lines = [
        "| env | experiment | seed | end (last 100) | peak (100 in a row) | peak's step | end / peak | drop in standard errors | fell "
        "| largest update KL |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    falls = defaultdict(list)
    for (env_id, exp_name), runs in sorted(groups.items()):
        for seed, run in sorted(runs.items()):
            top, step = peak(run)
            kl = run.get("max_kl", float("nan"))
            drop, down = drop_in_errors(run), fell(run)
            falls[exp_name].append(down)
            lines.append(
                f"| {env_id} | {exp_name} | {seed} | {run['final']:.2f} | {top:.2f} | {step:,} | {run['final'] / top:.3f} | "
                f"{'n/a' if np.isnan(drop) else f'{drop:.1f}'} | {'n/a' if down is None else 'yes' if down else 'no'} | "
                + ("n/a" if np.isnan(kl) else f"{kl:.3f}")
                + " |"
            )
    lines.append(
        f"\nFalls (end under {FALL_RATIO:g} of the peak by at least {FALL_ERRORS:g} standard errors), per experiment:"
    )
    for exp_name, downs in sorted(falls.items()):
        counted = [d for d in downs if d is not None]
        lines.append(
            f"- {exp_name}: {sum(counted)} of {len(counted)} runs"
            + (f" ({len(downs) - len(counted)} from logs: n/a)" if len(counted) < len(downs) else "")
        )
    return "\n".join(lines)


def normalized(groups: dict) -> dict:
    """{exp_name: (tasks, runs x tasks matrix)} of normalized scores, for the experiments whose every task has a
    normalization and the same number of runs (rliable's matrices); the others are left out."""
    by_exp = defaultdict(dict)
    for (env_id, exp_name), runs in groups.items():
        by_exp[exp_name][env_id] = runs
    out = {}
    for exp_name, tasks in sorted(by_exp.items()):
        counts = {len(runs) for runs in tasks.values()}
        if not all(env_id in NORMALIZATION for env_id in tasks) or len(counts) != 1:
            continue
        names = sorted(tasks)
        columns = []
        for env_id in names:
            low, high = NORMALIZATION[env_id]
            columns.append([(run["final"] - low) / (high - low) for _, run in sorted(tasks[env_id].items())])
        out[exp_name] = (names, np.array(columns).T)
    return out


def aggregate_table(scores: dict, reps: int, seed: int) -> str:
    def three(x):
        return np.array([trim_mean_25(x), metrics.aggregate_median(x), metrics.aggregate_mean(x)])  # trim_mean_25: IQM

    lines = [
        "| experiment | tasks | runs per task | IQM [95% CI] | median [95% CI] | mean [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for exp_name, (names, matrix) in scores.items():
        points, cis = estimates({exp_name: matrix}, three, reps, seed)
        cells = [f"{points[exp_name][i]:.3f} [{cis[exp_name][0][i]:.3f}, {cis[exp_name][1][i]:.3f}]" for i in range(3)]
        lines.append(f"| {exp_name} | {', '.join(names)} | {matrix.shape[0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare(groups: dict, a: str, b: str, reps: int, seed: int) -> str:
    """The probability that experiment a improves on b (rliable: over the tasks both ran, the chance that a random
    run of a beats a random run of b on the same task, averaged over tasks), with its 95% CI."""
    tasks = sorted({env for env, exp in groups if exp == a} & {env for env, exp in groups if exp == b})
    if not tasks:
        raise SystemExit(
            f"error: experiments {a!r} and {b!r} have no task in common; the experiments: {', '.join(sorted({e for _, e in groups}))}"
        )

    def matrix(exp_name):  # runs x tasks; rliable pads nothing, so each task gives the experiment's fewest runs
        n = min(len(groups[(env, exp_name)]) for env in tasks)
        return np.array(
            [[groups[(env, exp_name)][s]["final"] for s in sorted(groups[(env, exp_name)])[:n]] for env in tasks]
        ).T

    point, low, high = interval(
        {f"{a},{b}": (matrix(a), matrix(b))}, lambda x, y: np.array([metrics.probability_of_improvement(x, y)]), reps, seed
    )[f"{a},{b}"]
    return f"P({a} > {b}) = {point:.3f} [{low:.3f}, {high:.3f}] (95% CI) over {', '.join(tasks)}"


def colours(names: list) -> dict:
    """A distinct colour for each name (tab10 up to 10, tab20 up to 20, then evenly spaced on viridis)."""
    if len(names) <= 20:
        cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
        return {name: cmap(i) for i, name in enumerate(names)}
    return {name: plt.get_cmap("viridis")(i / (len(names) - 1)) for i, name in enumerate(names)}


def plot_profiles(scores: dict, path: Path, seed: int):
    taus = np.linspace(-0.5, 2.0, 101)
    np.random.seed(seed)  # as in estimates()
    dists, cis = rly.create_performance_profile({k: m for k, (_, m) in scores.items()}, taus, reps=2000)
    fig, ax = plt.subplots(figsize=(6, 4))
    colour = colours(list(dists))
    plot_utils.plot_performance_profiles(
        dists, taus, performance_profile_cis=cis, colors=colour, xlabel=r"normalized score $(\tau)$", ax=ax
    )
    # rliable's own legend finds no labelled lines; this one goes to the right of the axes, off the curves
    ax.legend(ax.get_lines()[: len(dists)], list(dists), fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    ax.set_ylabel(r"fraction of runs with score $> \tau$")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot(groups: dict, title: str, path: Path, reps: int = 2000, seed: int = 0):
    """Per env, each experiment's IQM over runs of the last-100 mean, with its 95% bootstrap CI, on 100 steps: the envs
    in a grid of up to 3 columns, one colour per experiment in every panel, one legend below them."""
    env_ids = sorted({env_id for env_id, _ in groups})
    experiments = sorted({exp_name for _, exp_name in groups})
    colour = colours(experiments)
    columns = min(3, len(env_ids))
    rows = -(-len(env_ids) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    counts = defaultdict(set)  # the runs each experiment has per env, for its legend entry
    for ax, env_id in zip(axes.flat[: len(env_ids)], env_ids, strict=True):
        for (group_env, exp_name), runs in sorted(groups.items()):
            if group_env != env_id:
                continue
            grid = np.linspace(0, max(run["last_step"] for run in runs.values()), 100)
            curves = np.array([np.interp(grid, *run["curve"]) for run in runs.values()])  # runs x points
            points, cis = estimates({exp_name: curves[:, None, :]}, curve_iqm, reps, seed)
            ax.plot(grid, points[exp_name], color=colour[exp_name])
            ax.fill_between(grid, cis[exp_name][0], cis[exp_name][1], color=colour[exp_name], alpha=0.2)
            counts[exp_name].add(len(runs))
        ax.set_title(env_id)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episodic return (last 100), IQM")
    for ax in axes.flat[len(env_ids) :]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colour[name]) for name in experiments]
    labels = [f"{name} ({'-'.join(map(str, sorted({min(counts[name]), max(counts[name])})))} runs)" for name in experiments]
    fig.suptitle(title)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=min(3, len(labels)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs_dir", type=Path, nargs="+", help="folders of run directories or run logs, searched at any depth")
    parser.add_argument("--env", action="append", default=None, help="only this env id, as the runs name it (repeatable)")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True, help="prefix of the .md and .png written")
    parser.add_argument(
        "--threshold",
        default=None,
        help="add the first step reaching this mean; `solved`: each task's own (NORMALIZATION's top)",
    )
    parser.add_argument("--success", action="store_true", help="add the success rate on tasks whose episodes return +1 or -1")
    parser.add_argument("--at", default=None, help="comma-separated steps: add each run's mean of the last 100 there")
    parser.add_argument("--published", action="store_true", help="add the published figures of PUBLISHED beside each task")
    parser.add_argument(
        "--save-scalars",
        action="store_true",
        help="keep the scalars of each run read from its events in scalars/ beside its runs/ folder (what git keeps)",
    )
    parser.add_argument(
        "--peaks", action="store_true", help="add each run's peak, its end over the peak, and its largest update KL"
    )
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), default=None, help="P(experiment A improves on B)")
    parser.add_argument("--reps", type=int, default=5000, help="bootstrap resamples (curves: 2,000)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstraps' random seed")
    args = parser.parse_args(argv)
    if args.threshold not in (None, "solved"):
        try:
            float(args.threshold)
        except ValueError:
            raise SystemExit(f"error: --threshold takes a number or `solved`, not {args.threshold!r}") from None
    groups = defaultdict(dict)
    for runs_dir in args.runs_dir:  # one group's runs may lie in several folders
        for key, runs in collect(runs_dir, args.save_scalars).items():
            if args.env is None or key[0] in args.env:
                groups[key].update(runs)
    if not groups:
        where = ", ".join(map(str, args.runs_dir)) + (f" for {', '.join(args.env)}" if args.env else "")
        raise SystemExit(f"error: no runs with episodes under {where}")
    markdown = f"### {args.title}\n\n{table(groups, args.threshold, args.reps, args.seed, args.success, args.published)}\n"
    markdown += (
        "\nIQM: the interquartile mean of the runs' scores (with fewer than 4 runs, their mean); 95% CI: rliable's "
        f"stratified bootstrap, {args.reps:,} resamples, seed {args.seed}. mean ± std: over the runs (ddof=0).\n"
    )
    if args.published:
        markdown += "".join(f"\n{column}: {where}." for column, (where, _) in PUBLISHED.items()) + "\n"
    scores = normalized(groups)
    if scores:
        markdown += (
            f"\nNormalized scores over tasks (report.py's NORMALIZATION):\n\n{aggregate_table(scores, args.reps, args.seed)}\n"
        )
    if args.compare:
        markdown += f"\n{compare(groups, *args.compare, args.reps, args.seed)}\n"
    if args.peaks:
        markdown += f"\nEach run's peak (the best mean of 100 episodes in a row) and its end:\n\n{peaks_table(groups)}\n"
    if args.at:
        at = [int(float(s)) for s in args.at.split(",")]
        markdown += f"\nMean of the last 100 episodes at the end of the first iteration at or past each step:\n\n{table_at(groups, at)}\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(markdown)
    plot(groups, args.title, args.out.with_suffix(".png"), seed=args.seed)
    written = [args.out.with_suffix(".md"), args.out.with_suffix(".png")]
    if scores:
        written.append(args.out.parent / f"{args.out.name}_profile.png")
        plot_profiles(scores, written[-1], args.seed)
    print(markdown)
    print("wrote " + ", ".join(map(str, written)))


if __name__ == "__main__":
    main()
