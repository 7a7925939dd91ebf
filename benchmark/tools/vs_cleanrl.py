"""Is it CleanRL's PPO? Runs CleanRL's script from your own checkout of CleanRL and this project's counterpart on the same
seed, env and thread count, in this venv, and compares every parameter of the two agents, first as initialized and then
after every iteration. Prints the first iteration where they differ (0: initially), by how much and in which tensors, or
that they are identical throughout.

    git clone https://github.com/vwxyzjn/cleanrl ~/cleanrl       # CleanRL itself: nothing of it is in this repository
    python benchmark/tools/vs_cleanrl.py ~/cleanrl ppo.py                                   # CartPole-v1, 500k steps
    python benchmark/tools/vs_cleanrl.py ~/cleanrl ppo_continuous_action.py --env-id HalfCheetah-v4 --total-timesteps 8192
    python benchmark/tools/vs_cleanrl.py ~/cleanrl ppo_atari.py --total-timesteps 4096 --no-native-envs

CleanRL's file runs unmodified on disk. At run time, so that it runs on this venv's gymnasium 1.x: its SyncVectorEnv
autoresets in the same step (as gymnasium 0.29, which CleanRL pins, did); its episode logging is off (it reads 0.29's
infos); 1.x's TransformObservation takes no observation space of its own, as 0.29's did; 1.x's renamed Atari wrappers
and ids are found; its NormalizeObservation keeps float64 statistics, as 0.29's did (--float32-statistics keeps 1.x's
float32). This project's script runs with --no-bootstrap-truncation (CleanRL treats a time limit as a termination)
unless --bootstrap-truncation is among the extra flags, which are passed to it alone; --shared "FLAGS" go to both. Both
run on the CPU.

Each remaining difference can be taken away one at a time, to attribute it: --as-baselines-vecnormalize (CleanRL's
reward and observation normalization at an episode's end as this project's and baselines' VecNormalize),
--gymnasium-screen (CleanRL's Atari screen made as gymnasium's AtariPreprocessing makes ours),
--default-memory-format (this project's Atari network out of channels-last).
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

side, out, threads, switches, script, *argv = sys.argv[1:]
switches = switches.split(",")  # the run-time changes asked for (run's `switches`)
float64_statistics = "float64_statistics" in switches
as_baselines = "as_baselines" in switches
gymnasium_screen = "gymnasium_screen" in switches
default_format = "default_format" in switches
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

    import numpy as np

    observation_step = stateful_observation.NormalizeObservation.step

    def reward_then_reset(self, action):  # the discounted return reset after an episode's last step, any
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.discounted_reward = self.discounted_reward * self.gamma + float(reward)  # 1.x: * (1 - terminated)
        if self._update_running_mean:
            self.return_rms.update(self.discounted_reward)
        reward = reward / np.sqrt(self.return_rms.var + self.epsilon)
        if terminated or truncated:  # after the update, as VecNormalize's ret[done] = 0
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

if side == "cleanrl" and gymnasium_screen:  # the screen as gymnasium's AtariPreprocessing (ours) makes it
    import cleanrl_utils.atari_wrappers as atari_wrappers

    def grayscale_max_then_resize(env, skip=4):  # in MaxAndSkipEnv's place: the emulator's grayscale, max, resize
        return gym.wrappers.AtariPreprocessing(env, noop_max=0, frame_skip=skip)  # no-ops: NoopResetEnv's, below it

    def already_done(env, *args, **kwargs):  # ResizeObservation and GrayScaleObservation: done above
        return env

    atari_wrappers.MaxAndSkipEnv = grayscale_max_then_resize
    gym.wrappers.ResizeObservation = gym.wrappers.GrayScaleObservation = already_done

if side == "ours" and default_format:  # ppo_atari.py's Agent in torch's default memory format, not channels-last
    module_to = torch.nn.Module.to

    def to_in_the_default_format(self, *args, memory_format=None, **kwargs):
        return module_to(self, *args, **kwargs) if args or kwargs else self

    torch.nn.Module.to = to_in_the_default_format

iterations, names, initial, episodes = [], [], [], [0]
add_scalar = SummaryWriter.add_scalar
make_adam = torch.optim.Adam.__init__


def record_initial(self, params, *args, **kwargs):  # the agent's parameters before any update
    params = list(params)
    if not initial:
        initial.extend(p.detach().cpu().clone() for p in params)
    make_adam(self, params, *args, **kwargs)


torch.optim.Adam.__init__ = record_initial


def record(self, tag, value, *args, **kwargs):
    episodes[0] += tag == "charts/episodic_return"  # this project's side logs them
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
torch.save({"names": names, "initial": initial, "iterations": iterations, "episodes": episodes[0]}, out)
"""


def run(side: str, script: Path, argv: list, threads: int, workdir: Path, switches: list) -> dict:
    """One side's run; switches: the names of the driver's run-time changes to make (float64_statistics, as_baselines,
    gymnasium_screen: CleanRL's side; default_format: ours)."""
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
        ",".join(switches),
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
    # iteration 0: the initial parameters, where both runs recorded them
    first = 0 if ours.get("initial") and theirs.get("initial") else 1
    mine_all = ([ours["initial"]] if first == 0 else []) + ours["iterations"][:count]
    theirs_all = ([theirs["initial"]] if first == 0 else []) + theirs["iterations"][:count]
    for i, (mine, other) in enumerate(zip(mine_all, theirs_all, strict=True), start=first):
        other = [other[j] for j in order]
        differ = {n: (a - b).abs().max().item() for n, a, b in zip(names, mine, other, strict=True) if not torch.equal(a, b)}
        if differ:
            return {"iterations": count, "first_difference": i, "tensors": differ}
    lengths = (len(ours["iterations"]), len(theirs["iterations"]))
    return {"iterations": count, "first_difference": None, "tensors": {}, "lengths": lengths, "initial": first == 0}


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
    parser.add_argument(
        "--gymnasium-screen",
        action="store_true",
        help="ppo_atari.py: CleanRL's screen made as gymnasium's AtariPreprocessing (ours) makes it: the emulator's "
        "grayscale screen, the max of the last two, resized (CleanRL's: the max of the RGB frames, resized, then grayscale)",
    )
    parser.add_argument(
        "--default-memory-format",
        action="store_true",
        help="ppo_atari.py: this project's Agent in torch's default memory format, as CleanRL's (ours: channels-last, "
        "faster convolutions on the CPU, which round differently)",
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
        asked = {
            "float64_statistics": not opts.float32_statistics,
            "as_baselines": opts.as_baselines_vecnormalize,
            "gymnasium_screen": opts.gymnasium_screen,
        }
        theirs_switches = [name for name, on in asked.items() if on]
        ours_switches = ["default_format"] if opts.default_memory_format else []
        theirs = run("cleanrl", theirs_path, common, opts.threads, Path(tmp) / "cleanrl", theirs_switches)
        ours = run("ours", ROOT / opts.script, [*common, *ours_extra], opts.threads, Path(tmp) / "ours", ours_switches)
    result = compare(ours, theirs)
    result["episodes_ended"] = ours["episodes"]  # games ended in our run (logged ones; CleanRL's logging is off)
    commit = subprocess.run(
        ["git", "-C", str(opts.cleanrl_dir), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result.update(float64_statistics=not opts.float32_statistics, as_baselines_vecnormalize=opts.as_baselines_vecnormalize)
    result.update(gymnasium_screen=opts.gymnasium_screen, default_memory_format=opts.default_memory_format)
    result.update(
        script=opts.script, cleanrl_commit=commit or "unknown", ours=[opts.script, *common, *ours_extra], theirs=common
    )
    if result["first_difference"] is None:
        initially = "initially and " if result["initial"] else ""
        print(
            f"{opts.script}: identical to CleanRL's {initially}after each of {result['iterations']} iterations (CleanRL {commit[:7]})"
        )
        if len(set(result["lengths"])) > 1:
            print(f"    (iterations run: ours {result['lengths'][0]}, CleanRL's {result['lengths'][1]})")
    else:
        when = f"after iteration {result['first_difference']}" if result["first_difference"] else "initially"
        print(f"{opts.script}: parameters differ from CleanRL's {when} (of {result['iterations']} iterations)")
        for name, diff in sorted(result["tensors"].items(), key=lambda item: -item[1]):
            print(f"    {name}: largest difference {diff:.3g}")
    print(f"    ({result['episodes_ended']} episodes ended in this project's run)")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=1) + "\n")
    raise SystemExit(0 if result["first_difference"] is None else 1)


if __name__ == "__main__":
    main()
