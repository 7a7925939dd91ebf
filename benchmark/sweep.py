"""Run a sweep, one script over env ids x seeds, as one submitit job per run: on Slurm, or on this machine N at a time.

    python benchmark/sweep.py ppo.py --env-ids CartPole-v1 Acrobot-v1 --seeds 1 2 3 --out benchmark/results/ppo \\
        --cluster slurm --partition cpu --time 120 --cpus 2 -- --total-timesteps 500000

Every run has a fixed directory, OUT/runs/{env_id}__{exp_name}__{seed}__sweep (its TensorBoard log and its
checkpoint {exp_name}.pt, where report.py reads them), and runs as

    python SCRIPT --env-id ENV --seed SEED --run-dir DIR --save-model --resume auto ARGS...

with its output appended to OUT/logs/{script}[__{tag}]__{env_id}__{seed}.log. So a job that stops early continues where it
stopped when it runs again:
- Slurm's signal before a time limit or a preemption (submitit's, SIGUSR2, --signal-delay seconds before): the job
  stops the script as SIGTERM does (it saves its last whole iteration) and submitit requeues it;
- `scontrol requeue`, `scancel`, a preemption without that signal: Slurm's SIGTERM reaches the script, which saves;
  Slurm requeues the job (or not, for scancel) and the job leaves no result behind;
- the same sweep command run again: finished runs stop at once, the others continue.
With --fresh (what run_many.sh passes without CONTINUE=1) the sweep is a new one instead: it stops if a run's directory
exists, and each run's log starts empty.
On the gymnasium env paths the continued run equals a run that never stopped (the scripts' exact resume);
ppo_atari.py's native envs continue with fresh games (docs/checkpoints.md).
"""

import argparse
import contextlib
import importlib.util
import io
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("ppo.py", "ppo_atari.py", "ppo_continuous_action.py", "ppo_rnn.py")
SET_BY_THE_SWEEP = ("--env-id", "--seed", "--run-dir", "--resume")


def fail(message: str):
    raise SystemExit(f"error: {message}")


class Run:
    """One run as a submitit job: the script in a child process that ignores SIGUSR2 (Slurm signals the whole job's
    processes; the script stops on SIGTERM, once), its output appended to the run's log."""

    def __init__(self, command: list, log: str, checkpoint: str):
        self.command, self.log, self.checkpoint_path = command, log, checkpoint
        self._child = None

    def __getstate__(self):  # the child process stays with the job that started it
        return {**self.__dict__, "_child": None}

    def __call__(self) -> dict:
        ending = []  # Slurm's SIGTERM: the job ends (scancel, requeue, time limit); the script got it too and saves
        signal.signal(signal.SIGTERM, lambda signum, frame: ending.append(signum))
        with open(self.log, "a") as log:
            self._child = subprocess.Popen(
                self.command,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN),
            )
            while self._child.poll() is None:  # not wait(): checkpoint() waits for the child from a signal handler
                time.sleep(0.2)
            code = self._child.returncode
        if (
            ending or code == 128 + signal.SIGTERM
        ):  # stopped, not finished (code 143): a requeued job's next attempt writes the result
            raise SystemExit(f"stopped by SIGTERM; the script saved {self.checkpoint_path}, which a new attempt resumes")
        if code != 0:
            raise RuntimeError(f"the run exited with code {code}; see {self.log}")
        return {"log": self.log, "checkpoint": self.checkpoint_path}

    def checkpoint(self, *args, **kwargs):
        """submitit calls this on its pre-emption signal: stop the script as SIGTERM does (it saves the last whole
        iteration and exits), then submitit requeues the same run, which resumes from that checkpoint."""
        import submitit

        if self._child is not None and self._child.poll() is None:
            self._child.send_signal(signal.SIGTERM)
            self._child.wait()
        return submitit.helpers.DelayedSubmission(Run(self.command, self.log, self.checkpoint_path))


def check_runs(script: str, env_ids: list, script_args: list) -> str:
    """The script's own start-up checks for each env id (its argument parser, check_args, check_env), here, before
    anything is submitted: a bad argument or env id is one line now, not a failed job later. Returns the runs'
    exp_name, as the script parses it."""
    import tyro

    for arg in script_args:
        if arg.split("=")[0].replace("_", "-") in SET_BY_THE_SWEEP:
            fail(f"the sweep sets {arg.split('=')[0]} itself; give env ids with --env-ids and seeds with --seeds")
    spec = importlib.util.spec_from_file_location(f"sweep_check_{Path(script).stem}", ROOT / script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where tyro looks for Args' source
    spec.loader.exec_module(module)
    for env_id in env_ids:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                args = tyro.cli(module.Args, args=[*script_args, "--env-id", env_id], console_outputs=False)
        except (SystemExit, Exception):
            fail(f"{script} does not take the arguments {' '.join(script_args)!r}; see python {script} --help")
        module.check_args(args)
        module.check_env(args)
    return args.exp_name


def slurm_partitions() -> tuple:
    """(partitions, the default one or None) from sinfo."""
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        fail("sinfo did not answer in 60 s; is the Slurm controller up?")
    if out.returncode != 0:
        fail(
            f"sinfo failed ({out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}); is the Slurm controller up?"
        )
    names = out.stdout.split()
    default = next((p.rstrip("*") for p in names if p.endswith("*")), None)
    return [p.rstrip("*") for p in names], default


def make_executor(args, folder: Path):
    try:
        import submitit
    except ImportError:
        fail("submitit is not installed; pip install -r requirements.txt")
    if args.cluster == "local":
        executor = submitit.LocalExecutor(folder=folder, max_num_timeout=args.max_requeues)
        executor.update_parameters(timeout_min=args.time, gpus_per_node=args.gpus)
        return executor
    if shutil.which("sbatch") is None:
        fail("--cluster slurm needs Slurm's sbatch on the PATH; run the sweep on a Slurm login node, or use --cluster local")
    partitions, default = slurm_partitions()
    if args.partition is None and default is None:
        fail(f"this cluster has no default partition; pass --partition (one of {', '.join(partitions)})")
    if args.partition is not None and args.partition not in partitions:
        fail(f"no partition {args.partition!r} on this cluster; pass one of {', '.join(partitions)}")
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=args.max_requeues)
    options = dict(time=args.time, cpus_per_task=args.cpus, signal_delay_s=args.signal_delay, job_name="sweep")
    options.update(
        {k: v for k, v in dict(partition=args.partition, account=args.account, gpus_per_node=args.gpus or None).items() if v}
    )
    if args.mem is not None:
        options["mem"] = f"{args.mem}G"
    if args.jobs is not None:
        options["array_parallelism"] = args.jobs
    executor.update_parameters(**options)
    return executor


def plan(args, exp_name: str, script_args: list) -> list:
    """(env_id, seed, Run) for every run of the sweep, and the directories they write to."""
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    runs = []
    for env_id in args.env_ids:
        for seed in args.seeds:
            run_dir = out / "runs" / f"{env_id}__{exp_name}__{seed}__sweep"
            if args.fresh and run_dir.exists():
                fail(f"{run_dir} exists, an earlier sweep's run: drop --fresh to continue it, or move it away")
            tag = f"__{args.tag}" if args.tag else ""
            log = out / "logs" / f"{Path(args.script).stem}{tag}__{env_id.replace('/', '_')}__{seed}.log"
            command = [sys.executable, str(ROOT / args.script), "--env-id", env_id, "--seed", str(seed)]
            command += ["--run-dir", str(run_dir), "--save-model", "--resume", "auto", *script_args]
            runs.append((env_id, seed, Run(command, str(log), str(run_dir / f"{exp_name}.pt"))))
    if args.fresh:  # each log starts empty (a requeued job appends to it, as before)
        for _, _, run in runs:
            Path(run.log).write_text("")
    return runs


def submit_local(executor, runs: list, jobs: int) -> list:
    """Start the runs as local jobs, `jobs` at a time, and wait for the last one."""
    started, pending = [], list(runs)
    while pending or any(not job.done() for _, job in started):
        if pending and sum(not job.done() for _, job in started) < jobs:
            env_id, seed, run = pending.pop(0)
            job = executor.submit(run)
            print(f"job {job.job_id}: {env_id} seed {seed}", flush=True)
            started.append(((env_id, seed, run), job))
        else:
            time.sleep(0.2)
    return started


def settle(job, poll: float = 2.0, hold: float = 20.0):
    """Wait for a Slurm job's result, or for squeue to have stopped listing the job `hold` seconds ago. Not submitit's
    watcher: it takes a job for finished, for good, the first time sacct shows a final state, and a requeued job passes
    through one (CANCELLED, FAILED) on its way back to PENDING."""
    since = None
    while not job.paths.result_pickle.exists():
        listed = subprocess.run(["squeue", "-h", "-j", job.job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        since = None if listed else since or time.time()
        if since is not None and time.time() - since > hold:
            return
        time.sleep(poll)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    script_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="After --: the script's own arguments.")
    parser.add_argument("script", help=f"one of {', '.join(SCRIPTS)}")
    parser.add_argument("--env-ids", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the sweep's folder: runs/, logs/ and submitit/ go there")
    parser.add_argument("--cluster", choices=("local", "slurm"), default="local")
    parser.add_argument("--jobs", type=int, default=None, help="runs at a time (local: default 2; Slurm: the array's limit)")
    parser.add_argument(
        "--time", type=int, default=60, help="each job's time limit in minutes (a run longer than it is requeued)"
    )
    parser.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default partition)")
    parser.add_argument("--account", default=None, help="Slurm account, where the cluster needs one")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs per job")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per job")
    parser.add_argument("--mem", type=int, default=None, help="memory per job in GB (default: the partition's)")
    parser.add_argument(
        "--signal-delay", type=int, default=120, help="seconds before the time limit that the job is told to save"
    )
    parser.add_argument("--max-requeues", type=int, default=30, help="time-limit requeues per run before it gives up")
    parser.add_argument("--wait", action="store_true", help="Slurm: wait for every job and print how it ended")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="a new sweep: stop if a run's directory exists, and start each run's log empty (run_many.sh without CONTINUE=1)",
    )
    parser.add_argument("--tag", default=None, help="logs named {script}__{tag}__{env_id}__{seed}.log, as run_many.sh's TAG")
    args = parser.parse_args(argv)
    args.script = Path(args.script).name
    if args.script not in SCRIPTS:
        fail(f"unknown script {args.script!r}; the sweep runs one of {', '.join(SCRIPTS)}")
    if args.cluster == "local" and any(v is not None for v in (args.partition, args.account)):
        fail("--partition and --account are Slurm's; drop them, or use --cluster slurm")
    exp_name = check_runs(args.script, args.env_ids, script_args)
    executor = make_executor(args, args.out.resolve() / "submitit" / "%j")
    runs = plan(args, exp_name, script_args)
    for env_id, seed, run in runs:
        print(f"{env_id} seed {seed}: log {run.log}, checkpoint {run.checkpoint_path}")
    if args.cluster == "local":
        started = submit_local(executor, runs, args.jobs or 2)
    else:
        with executor.batch():
            submitted = [executor.submit(run) for _, _, run in runs]
        started = list(zip(runs, submitted, strict=True))
        for (env_id, seed, _), job in started:
            print(f"job {job.job_id}: {env_id} seed {seed}")
        if not args.wait:
            return started
    failed = 0
    for (env_id, seed, run), job in started:
        try:
            if args.cluster == "slurm":
                settle(job)
            job.result()
            print(f"job {job.job_id}: {env_id} seed {seed} finished")
        except Exception as e:  # noqa: BLE001  (a failed job is reported, the others still are)
            failed += 1
            print(f"job {job.job_id}: {env_id} seed {seed} failed ({str(e).strip().splitlines()[-1]}); see {run.log}")
    if failed:
        raise SystemExit(f"error: {failed} of {len(started)} runs failed")
    return started


if __name__ == "__main__":
    main()
