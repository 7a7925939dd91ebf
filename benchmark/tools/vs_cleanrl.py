"""Is it CleanRL's PPO? Runs CleanRL's script from your own checkout of CleanRL and this project's counterpart on the same
seed, env and thread count, in this venv, and compares every parameter of the two agents after every iteration. Prints
the first iteration where they differ, by how much and in which tensors, or that they are identical throughout.

    git clone https://github.com/vwxyzjn/cleanrl ~/cleanrl       # CleanRL itself: nothing of it is in this repository
    python benchmark/tools/vs_cleanrl.py ~/cleanrl ppo.py                                   # CartPole-v1, 500k steps
    python benchmark/tools/vs_cleanrl.py ~/cleanrl ppo_continuous_action.py --env-id HalfCheetah-v4 --total-timesteps 8192
    python benchmark/tools/vs_cleanrl.py ~/cleanrl ppo_atari.py --total-timesteps 4096 --no-native-envs

CleanRL's file runs unmodified on disk. Two things are changed at run time, so that it runs on this venv's gymnasium
1.x: its SyncVectorEnv autoresets in the same step (as gymnasium 0.29, which CleanRL pins, did), and its episode
logging is off (it reads gymnasium 0.29's infos); gymnasium 1.x's TransformObservation takes no observation space of
its own, as 0.29's did; 1.x's renamed Atari wrappers and ids are found; and its NormalizeObservation keeps its statistics in float64, as 0.29's did (1.x: in the
observation space's float32; --float32-statistics keeps that). This project's script runs with --no-bootstrap-truncation (CleanRL treats a time limit as a
termination) unless --bootstrap-truncation is among the extra flags, which are passed to it alone; --shared "FLAGS" go to
both. Both run on the CPU.
Exit status 1 where the parameters differ. Results of runs: benchmark/results/vs_cleanrl/; differences: docs/cleanrl.md.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# CleanRL's parameter names where this project's differ (its Gaussian head is `actor_mean`, ours `actor`)
RENAMED = {"actor_mean.": "actor."}

# run in each child: the script as `python SCRIPT ARGS` runs it, the agent's parameters recorded at each iteration's
# "charts/learning_rate" scalar, which both projects write once per iteration, after its update
DRIVER = r"""
import json, runpy, sys
import gymnasium as gym
import torch
from torch.utils.tensorboard import SummaryWriter

side, out, threads, float64_statistics, as_baselines, script, *argv = sys.argv[1:]
float64_statistics, as_baselines = float64_statistics == "1", as_baselines == "1"
torch.set_num_threads(int(threads))
if side == "cleanrl":
    make_sync = gym.vector.SyncVectorEnv.__init__

    def same_step(self, env_fns, *args, **kwargs):
        make_sync(self, env_fns, *args, **{**kwargs, "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})

    def without_episode_infos(step):
        def stepped(self, actions):
            obs, rewards, terminations, truncations, infos = step(self, actions)
            infos = {k: v for k, v in infos.items() if k not in ("final_info", "_final_info", "final_obs", "_final_obs")}
            return obs, rewards, terminations, truncations, infos
        return stepped

    gym.vector.SyncVectorEnv.__init__ = same_step
    gym.vector.SyncVectorEnv.step = without_episode_infos(gym.vector.SyncVectorEnv.step)
    transform = gym.wrappers.TransformObservation.__init__

    def transform_keeping_the_space(self, env, func, observation_space=None):
        transform(self, env, func, observation_space)

    gym.wrappers.TransformObservation.__init__ = transform_keeping_the_space
    gym.wrappers.GrayScaleObservation = gym.wrappers.GrayscaleObservation  # the names of 0.29
    gym.wrappers.FrameStack = gym.wrappers.FrameStackObservation
    import ale_py  # 0.29 found the Atari ids by a plugin; 1.x registers them when asked

    gym.register_envs(ale_py)
    if float64_statistics:  # gymnasium 1.x's NormalizeObservation keeps float32 statistics; 0.29's, float64
        import gymnasium.wrappers.stateful_observation as stateful
        from gymnasium.wrappers.utils import RunningMeanStd

        stateful.RunningMeanStd = lambda epsilon=1e-4, shape=(), dtype=None: RunningMeanStd(epsilon, shape)

if side == "cleanrl" and as_baselines:  # gymnasium's per-env normalization as baselines' VecNormalize does it
    import copy
    import gymnasium.wrappers.stateful_observation as stateful_observation
    import gymnasium.wrappers.stateful_reward as stateful_reward

    reward_step, observation_step = stateful_reward.NormalizeReward.step, stateful_observation.NormalizeObservation.step

    def reward_then_reset(self, action):  # the discounted return reset after an episode's last step, any
        obs, reward, terminated, truncated, info = reward_step(self, action)
        if truncated:  # (at a termination 1.x already dropped it, one step early: not matched here)
            self.discounted_reward = self.discounted_reward * 0
        return obs, reward, terminated, truncated, info

    def without_the_final_observation(self, action):  # the statistics see the reset observation only
        saved = copy.deepcopy(self.obs_rms)
        obs, reward, terminated, truncated, info = observation_step(self, action)
        if terminated or truncated:
            self.obs_rms = saved
        return obs, reward, terminated, truncated, info

    stateful_reward.NormalizeReward.step = reward_then_reset
    stateful_observation.NormalizeObservation.step = without_the_final_observation

iterations, names = [], []
add_scalar = SummaryWriter.add_scalar


def record(self, tag, value, *args, **kwargs):
    if tag == "charts/learning_rate":
        frame = sys._getframe(1)
        while "agent" not in frame.f_globals:
            frame = frame.f_back
        named = list(frame.f_globals["agent"].named_parameters())
        names[:] = [name for name, _ in named]
        iterations.append([p.detach().cpu().clone() for _, p in named])
    return add_scalar(self, tag, value, *args, **kwargs)


SummaryWriter.add_scalar = record
sys.argv = [script, *argv]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as stop:
    if stop.code not in (0, None):
        raise
torch.save({"names": names, "iterations": iterations}, out)
"""


def run(side: str, script: Path, argv: list, threads: int, workdir: Path, float64=True, as_baselines=False) -> dict:
    import torch

    workdir.mkdir(parents=True)
    out = workdir / "params.pt"
    command = [
        sys.executable,
        "-c",
        DRIVER,
        side,
        str(out),
        str(threads),
        str(int(float64)),
        str(int(as_baselines)),
        str(script),
        *argv,
        "--no-cuda",
    ]
    env = {**os.environ, "PYTHONPATH": str(script.parents[1])}  # CleanRL's scripts import its cleanrl_utils
    result = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env if side == "cleanrl" else None)
    if result.returncode:
        raise SystemExit(f"error: {side}'s {script.name} failed:\n{result.stderr[-3000:]}")
    return torch.load(out)


def compare(ours: dict, theirs: dict) -> dict:
    """The first iteration (1-based) where any parameter differs, with each differing tensor's largest difference."""
    import torch

    names = ours["names"]
    renamed = []
    for name in theirs["names"]:
        for old, new in RENAMED.items():
            name = name.replace(old, new)
        renamed.append(name)
    if sorted(renamed) != sorted(names):
        raise SystemExit(f"error: the agents have different parameters: {sorted(renamed)} against {sorted(names)}")
    order = [renamed.index(name) for name in names]
    count = min(len(ours["iterations"]), len(theirs["iterations"]))
    for i in range(count):
        mine, other = ours["iterations"][i], [theirs["iterations"][i][j] for j in order]
        differ = {n: (a - b).abs().max().item() for n, a, b in zip(names, mine, other, strict=True) if not torch.equal(a, b)}
        if differ:
            return {"iterations": count, "first_difference": i + 1, "tensors": differ}
    lengths = (len(ours["iterations"]), len(theirs["iterations"]))
    return {"iterations": count, "first_difference": None, "tensors": {}, "lengths": lengths}


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("cleanrl_dir", type=Path, help="a checkout of CleanRL (git clone https://github.com/vwxyzjn/cleanrl)")
    parser.add_argument("script", choices=["ppo.py", "ppo_continuous_action.py", "ppo_atari.py"])
    parser.add_argument("--env-id", help="for both (default: this project's script's default)")
    parser.add_argument("--total-timesteps", type=int, help="for both (default: CleanRL's default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in both processes")
    parser.add_argument("--shared", default="", help='flags for both scripts, quoted: --shared "--num-steps 512"')
    parser.add_argument("--float32-statistics", action="store_true", help="CleanRL's observation statistics as 1.x keeps them")
    parser.add_argument(
        "--as-baselines-vecnormalize",
        action="store_true",
        help="CleanRL's normalization at an episode's end as baselines' VecNormalize and this project's: the return "
        "reset after a time limit too, the final observation out of the statistics",
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    opts, ours_extra = parser.parse_known_args()
    theirs_path = opts.cleanrl_dir / "cleanrl" / opts.script
    if not theirs_path.is_file():
        raise SystemExit(
            f"error: {theirs_path} is not a file; pass a checkout of CleanRL (git clone https://github.com/vwxyzjn/cleanrl)"
        )
    common = ["--seed", str(opts.seed), *shlex.split(opts.shared)]
    if opts.env_id:
        common += ["--env-id", opts.env_id]
    else:
        default_env = {
            "ppo.py": "CartPole-v1",
            "ppo_continuous_action.py": "HalfCheetah-v5",
            "ppo_atari.py": "BreakoutNoFrameskip-v4",
        }
        common += ["--env-id", default_env[opts.script]]
    if opts.total_timesteps:
        common += ["--total-timesteps", str(opts.total_timesteps)]
    if "--bootstrap-truncation" not in ours_extra:
        ours_extra = [*ours_extra, "--no-bootstrap-truncation"]
    with tempfile.TemporaryDirectory() as tmp:
        theirs_dir, float64 = Path(tmp) / "cleanrl", not opts.float32_statistics
        theirs = run("cleanrl", theirs_path, common, opts.threads, theirs_dir, float64, opts.as_baselines_vecnormalize)
        ours = run("ours", ROOT / opts.script, [*common, *ours_extra], opts.threads, Path(tmp) / "ours")
    result = compare(ours, theirs)
    commit = subprocess.run(
        ["git", "-C", str(opts.cleanrl_dir), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result.update(float64_statistics=not opts.float32_statistics, as_baselines_vecnormalize=opts.as_baselines_vecnormalize)
    result.update(
        script=opts.script, cleanrl_commit=commit or "unknown", ours=[opts.script, *common, *ours_extra], theirs=common
    )
    if result["first_difference"] is None:
        print(f"{opts.script}: identical to CleanRL's after each of {result['iterations']} iterations (CleanRL {commit[:7]})")
        if len(set(result["lengths"])) > 1:
            print(f"    (iterations run: ours {result['lengths'][0]}, CleanRL's {result['lengths'][1]})")
    else:
        print(
            f"{opts.script}: parameters differ from CleanRL's after iteration {result['first_difference']} of {result['iterations']}"
        )
        for name, diff in sorted(result["tensors"].items(), key=lambda item: -item[1]):
            print(f"    {name}: largest difference {diff:.3g}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1) + "\n")
    raise SystemExit(0 if result["first_difference"] is None else 1)


if __name__ == "__main__":
    main()
