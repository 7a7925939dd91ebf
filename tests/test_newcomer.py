"""What a newcomer meets around a run: a resume with nothing to do, the progress line's window across a resume, one run per
TensorBoard directory, the messages that name a fix, CleanRL's --upload-model, and the model file that is safe to share.
The run-management layer is the same in all four scripts (tests/test_drift.py), so most of this runs ppo.py only."""

import ast
import importlib
import itertools
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch
import tyro

from tests.helpers import ROOT, SCRIPTS, TINY, checkpoint_path, cli, error_of, load, python_path, run, signal_at_call

QUICK = [*TINY, "--no-cuda"]  # 32 steps an iteration


def progress(out: str) -> list:
    """Each progress line without its speed and ETA: iteration, step, and the return with its episode count."""
    return [re.sub(r" SPS \d+| ETA .*", "", line) for line in out.splitlines() if line.startswith("iter ")]


def test_a_finished_checkpoint_resumes_to_one_line_and_writes_nothing(tmp_path):
    """`--resume` of a run at its last iteration: one line that says so and how to train further, exit 0, and the run
    directory as it was (no new TensorBoard file, no lock file written again)."""
    run("ppo.py", *QUICK, "--total-timesteps", "64", "--save-model", cwd=tmp_path)  # in this process: the run to resume
    path = checkpoint_path(tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in path.parent.iterdir()}
    again = cli("ppo.py", "--resume", str(path), "--no-cuda", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    (line,) = again.stdout.splitlines()
    assert "is finished (iteration 2 of 2)" in line and "--total-timesteps 96 or more" in line
    assert {p.name: p.stat().st_mtime_ns for p in path.parent.iterdir()} == before


def test_the_printed_return_continues_across_a_resume(tmp_path, monkeypatch, capsys):
    """The last-100-episode window travels in the checkpoint: a run stopped by Ctrl-C after iteration 3 of 6 and
    resumed prints, from iteration 4 on, the progress lines of the run that never stopped, episode counts included."""
    argv = [*QUICK, "--env-id", "CartPole-v1", "--total-timesteps", "192", "--save-model"]
    run("ppo.py", *argv, cwd=tmp_path / "straight")
    straight = progress(capsys.readouterr().out)
    with monkeypatch.context() as m, pytest.raises(SystemExit):
        signal_at_call(m, torch.optim.Adam, "step", 4 * 2 + 2)  # in iteration 3 (4 minibatch steps an iteration)
        run("ppo.py", *argv, cwd=tmp_path / "stopped")
    first = progress(capsys.readouterr().out)
    path = checkpoint_path(tmp_path / "stopped")
    assert 0 < len(torch.load(path, weights_only=False)["recent_returns"]) <= 100
    run("ppo.py", "--resume", str(path), cwd=tmp_path / "stopped")
    then = progress(capsys.readouterr().out)
    assert len(first) == len(then) == 3 and first + then == straight


def test_a_run_dir_holding_another_run_is_refused(tmp_path):
    """--run-dir of another experiment's events or checkpoint: one line, nothing written; a restart by --resume auto
    before its first checkpoint may log on over its own dead run's events."""
    run_dir = tmp_path / "shared"
    run("ppo.py", *QUICK, "--total-timesteps", "32", "--run-dir", str(run_dir), cwd=tmp_path)
    (events,) = [p.name for p in run_dir.iterdir() if p.name.startswith("events.out.tfevents.")]
    message = error_of("ppo.py", *QUICK, "--run-dir", str(run_dir), "--exp-name", "other", cwd=tmp_path)
    assert f"holds another run's {events}" in message and "another --run-dir" in message
    restart = [*QUICK, "--total-timesteps", "32", "--run-dir", str(run_dir), "--save-model", "--resume", "auto"]
    run("ppo.py", *restart, cwd=tmp_path)  # its own events: allowed
    (run_dir / "ppo.pt").rename(run_dir / "mine.pt")
    message = error_of("ppo.py", *restart[:-2], "--exp-name", "other", cwd=tmp_path)
    assert "holds another run's mine.pt" in message


def test_default_run_dirs_do_not_collide_within_one_second(tmp_path, monkeypatch):
    """Two runs started in the same second (two `%run`s in one IPython) get two directories, not one."""
    clock = itertools.count(1795000000.0, 1e-4)  # both runs start within the same second
    monkeypatch.setattr(time, "time", lambda: next(clock))
    dirs = [run("ppo.py", *QUICK, "--total-timesteps", "32", cwd=tmp_path)["args"].run_dir for _ in range(2)]
    assert dirs == ["runs/CartPole-v1__ppo__1__1795000000", "runs/CartPole-v1__ppo__1__1795000000-2"]
    assert all(any(p.name.startswith("events.out") for p in (tmp_path / d).iterdir()) for d in dirs)


def test_resume_of_a_directory_takes_its_checkpoint(tmp_path, capsys):
    """--resume DIR continues the one checkpoint in it; a directory without one names what it holds."""
    run("ppo.py", *QUICK, "--total-timesteps", "32", "--save-model", cwd=tmp_path)
    path = checkpoint_path(tmp_path)
    resumed = run("ppo.py", "--resume", str(path.parent), "--total-timesteps", "64", cwd=tmp_path)
    assert resumed["args"].resume == str(path) and resumed["global_step"] == 64
    message = error_of("ppo.py", "--resume", str(tmp_path), cwd=tmp_path)
    assert "no checkpoint (*.pt)" in message and repr(str(tmp_path)) in message


@pytest.mark.parametrize(
    "argv, fits",
    [
        (["--num-steps", "128", "--num-envs", "4", "--num-minibatches", "3"], ["2", "4"]),  # 512
        (["--num-steps", "10", "--num-envs", "3", "--num-minibatches", "4"], ["3", "5"]),  # 30
        (["--num-steps", "3", "--num-envs", "1", "--num-minibatches", "2"], ["1"]),  # 3: not 3 of 1
        (["--num-steps", "3", "--num-envs", "1", "--num-minibatches", "4"], ["1"]),  # nor below 4
    ],
)
def test_the_minibatch_error_names_values_that_work(argv, fits, tmp_path):
    """The error names the nearest --num-minibatches that divide the batch into minibatches of 2 or more
    samples (one sample cannot normalize advantages), and they do."""
    message = error_of("ppo.py", *argv, cwd=tmp_path)
    assert message.endswith(f"try {' or '.join(fits)} of them")
    for fit in fits:
        batch = int(argv[1]) * int(argv[3])
        assert batch % int(fit) == 0 and batch // int(fit) >= 2


@pytest.mark.parametrize(
    "world_size, num_envs, envs, fits",
    [(1, 6, "6 envs", "3 or 6"), (2, 6, "6 envs a process", "3 or 6"), (1, 1, "1 env", "1")],
)
def test_ppo_rnn_minibatch_error_names_the_envs_and_values_that_work(world_size, num_envs, envs, fits, monkeypatch):
    """ppo_rnn.py's minibatches are whole env sequences: the error counts this process's envs (under torchrun, a share
    of --num-envs) and names the nearest minibatch counts that divide them, one env a minibatch included."""
    module = load("ppo_rnn.py")
    monkeypatch.setattr(module, "WORLD_SIZE", world_size)
    argv = ["--num-envs", str(num_envs * world_size), "--num-minibatches", "4"]
    with pytest.raises(SystemExit) as exc:
        module.check_env(tyro.cli(module.Args, args=argv))
    assert exc.value.code == f"error: {envs} cannot split into --num-minibatches 4; try {fits}"


def test_total_timesteps_that_is_not_whole_batches_is_rounded_with_a_notice(tmp_path, capsys):
    """20 steps of 2 envs x 16: one iteration, 32 steps, said once; the progress line counts seconds and one episode."""
    run("ppo.py", *QUICK, "--total-timesteps", "70", cwd=tmp_path)
    stdout = capsys.readouterr().out
    notices = [line for line in stdout.splitlines() if "--total-timesteps 70" in line]
    assert len(notices) == 1 and "64 steps are trained" in notices[0]
    assert "2 iterations" in stdout and re.search(r"ETA \d+ s$", stdout.splitlines()[-2])


def test_singular_nouns(tmp_path, capsys):
    """One iteration and one episode are said in the singular, in the sizes line and the progress line."""
    argv = ["--num-envs", "1", "--num-steps", "64", "--num-minibatches", "2", "--total-timesteps", "64", "--no-cuda"]
    run("ppo.py", *argv, cwd=tmp_path)
    assert ", 1 iteration, cpu" in capsys.readouterr().out
    plural = load("ppo.py").plural
    assert (plural(1, "episode"), plural(0, "episode"), plural(2, "episode")) == ("1 episode", "0 episodes", "2 episodes")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_has_no_hard_breaks(script):
    """Each flag's help is one line of source, which --help wraps to the terminal: no sentence broken by a newline."""
    tree = ast.parse((ROOT / script).read_text())
    (args,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args"]
    docs = [node.value.value for node in args.body if isinstance(node, ast.Expr) and isinstance(node.value.value, str)]
    assert docs and not [doc for doc in docs if "\n" in doc]


def test_capture_video_does_not_show_sdl_display_errors(tmp_path):
    """pygame, which draws the classic-control frames, probes for a display and prints `XDG_RUNTIME_DIR is invalid or
    not set` where the session has none: recording needs no display, and the script says so to SDL."""
    env = {k: v for k, v in os.environ.items() if k not in ("SDL_VIDEODRIVER", "XDG_RUNTIME_DIR")}
    argv = [sys.executable, str(ROOT / "ppo.py"), *QUICK, "--total-timesteps", "32", "--capture-video"]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "XDG_RUNTIME_DIR" not in result.stderr + result.stdout
    assert list(tmp_path.glob("videos/*/*.mp4"))


def fake_hub(folder, fail_with=None):
    """A stand-in huggingface_hub that records each call in calls.json (or raises fail_with at create_repo)."""
    package = folder / "huggingface_hub"
    package.mkdir(parents=True)
    raising = f"raise {fail_with}('Failed to resolve huggingface.co')" if fail_with else "pass"
    (package / "__init__.py").write_text(
        "import json, os\n"
        f"LOG = {str(folder / 'calls.json')!r}\n"
        "def record(name, *args, **kwargs):\n"
        "    calls = json.load(open(LOG)) if os.path.exists(LOG) else []\n"
        "    calls.append([name, list(args), kwargs])\n"
        "    json.dump(calls, open(LOG, 'w'))\n"
        "class HfApi:\n"
        "    def create_repo(self, repo_id, **kwargs):\n"
        f"        {raising}\n"
        "        record('create_repo', repo_id, **kwargs)\n"
        "        return type('RepoUrl', (), {'repo_id': repo_id if '/' in repo_id else 'login/' + repo_id})\n"
        "    def upload_folder(self, **kwargs):\n"
        "        record('upload_folder', **kwargs)\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(folder), python_path()])}


def hub_here(monkeypatch, folder, fail_with=None):
    """fake_hub's stand-in as this process imports it, for a run in this process: what `import huggingface_hub` gives."""
    fake_hub(folder, fail_with)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "huggingface_hub", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", importlib.import_module("huggingface_hub"))


def test_upload_model_pushes_the_model_its_evaluation_and_a_card(tmp_path, monkeypatch, capsys):
    """--upload-model, up to the upload call (huggingface_hub stood in for): the folder it pushes holds the model file,
    the TensorBoard log and a model card with the evaluation; the repository is CleanRL's name under --hf-entity. The run
    in this process (its evaluation is a process of its own all the same)."""
    hub_here(monkeypatch, tmp_path / "hub")
    argv = [*QUICK, "--total-timesteps", "64", "--save-model", "--upload-model", "--hf-entity", "me", "--eval-episodes", "2"]
    capsys.readouterr()
    run("ppo.py", *argv, cwd=tmp_path)
    stdout = capsys.readouterr().out
    calls = json.loads((tmp_path / "hub" / "calls.json").read_text())
    assert [name for name, _, _ in calls] == ["create_repo", "upload_folder"]
    assert calls[0][1] == ["me/CartPole-v1-ppo-seed1"] and calls[1][2]["repo_id"] == "me/CartPole-v1-ppo-seed1"
    folder = tmp_path / calls[1][2]["folder_path"]
    names = sorted(p.name for p in folder.iterdir())
    assert "ppo.cleanrl_model" in names and any(n.startswith("events.out.tfevents.") for n in names)
    card = (folder / "README.md").read_text()
    assert re.search(r"^eval: 2 episodes \(sampled\), return [\d.]+ ± [\d.]+$", card, re.M)
    assert "uploaded to https://huggingface.co/me/CartPole-v1-ppo-seed1" in stdout


def test_upload_model_without_the_package_or_the_network_says_which(tmp_path, monkeypatch):
    """Without huggingface_hub: one line before anything runs; without the network: one line after the run, which
    keeps its model and the folder it would have pushed. Both in this process (error_of: one line, exit status 1)."""
    shadow = tmp_path / "shadow" / "huggingface_hub"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    argv = [*QUICK, "--total-timesteps", "32", "--save-model", "--upload-model"]
    with monkeypatch.context() as m:
        m.syspath_prepend(str(shadow.parent))
        m.delitem(sys.modules, "huggingface_hub", raising=False)
        assert error_of("ppo.py", *argv, cwd=tmp_path).endswith("pip install huggingface_hub")
    assert not (tmp_path / "runs").exists()
    hub_here(monkeypatch, tmp_path / "hub", fail_with="ConnectionError")
    offline = error_of("ppo.py", *argv, cwd=tmp_path)
    assert "the upload to CartPole-v1-ppo-seed1 failed (ConnectionError: Failed to resolve" in offline
    assert checkpoint_path(tmp_path).with_suffix(".cleanrl_model").exists()


def test_a_failed_upload_names_the_command_that_pushes_the_finished_run(tmp_path, monkeypatch, capsys):
    """A failed push ends with the command that tries it again; that command (as --resume auto's restart of the failed
    command line would) finds the run finished, trains nothing and pushes it."""
    hub_here(monkeypatch, tmp_path / "offline", fail_with="ConnectionError")
    argv = [*QUICK, "--total-timesteps", "32", "--save-model", "--upload-model", "--hf-entity", "me"]
    offline = error_of("ppo.py", *argv, cwd=tmp_path)
    assert not (tmp_path / "offline" / "calls.json").exists()
    again = offline.split("; ")[-1].removeprefix("the same command with ").removesuffix(" pushes it").split()
    assert again[0] == "--resume" and tmp_path / again[1] == checkpoint_path(tmp_path).parent
    events = sorted(checkpoint_path(tmp_path).parent.glob("events.out.tfevents.*"))
    hub_here(monkeypatch, tmp_path / "online")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        run("ppo.py", *argv, *again, cwd=tmp_path)
    assert stop.value.code == 0
    stdout = capsys.readouterr().out
    assert "is finished (iteration 1 of 1)" in stdout and "uploaded to https://huggingface.co/me/" in stdout
    calls = json.loads((tmp_path / "online" / "calls.json").read_text())
    assert [name for name, _, _ in calls] == ["create_repo", "upload_folder"]
    assert sorted(checkpoint_path(tmp_path).parent.glob("events.out.tfevents.*")) == events  # nothing trained


def test_the_model_file_loads_as_weights_only_and_is_evaluated_without_the_trust_notice(tmp_path, capsys):
    """{exp_name}.cleanrl_model: tensors and plain values, read by torch.load(weights_only=True); --eval-checkpoint reads it
    that way and says nothing about trust, which a .pt checkpoint (a pickle) keeps; --resume of it points at the .pt."""
    run("ppo.py", *QUICK, "--total-timesteps", "32", "--save-model", cwd=tmp_path)
    path = checkpoint_path(tmp_path)
    model = torch.load(path.with_suffix(".cleanrl_model"), weights_only=True)
    assert model["agent"].keys() == torch.load(path, weights_only=False)["agent"].keys() and "optimizer" not in model
    for checkpoint, notice in ((path.with_suffix(".cleanrl_model"), False), (path, True)):
        with pytest.raises(SystemExit):
            run("ppo.py", "--eval-checkpoint", str(checkpoint), "--eval-episodes", "1", cwd=tmp_path)
        assert ("notice: a .pt checkpoint is a pickle" in capsys.readouterr().out) == notice
    message = error_of("ppo.py", "--resume", str(path.with_suffix(".cleanrl_model")), cwd=tmp_path)
    assert "holds the model only" in message and ".pt" in message


class PrintsWhenLoaded:
    """A pickle that runs code as it loads: print, here."""

    def __reduce__(self):
        return print, ("code ran as the checkpoint loaded",)


def test_the_pickle_notice_comes_before_the_pickle_loads(tmp_path, capsys):
    """--eval-checkpoint of a .pt: the notice that a pickle can run code, naming the safe file beside it, is printed
    before torch.load runs the pickle, not after."""
    path = tmp_path / "ppo.pt"
    torch.save({"agent": PrintsWhenLoaded()}, path)
    message = error_of("ppo.py", "--eval-checkpoint", str(path), cwd=tmp_path)
    assert "not a whole checkpoint" in message
    lines = capsys.readouterr().out.splitlines()
    notice = "notice: a .pt checkpoint is a pickle, which can run code as it loads; the .cleanrl_model saved beside it cannot"
    assert lines.index(notice) < lines.index("code ran as the checkpoint loaded")


def test_continuous_model_file_keeps_its_normalization_statistics(tmp_path):
    """Unlike CleanRL's, the continuous model file carries the observation and return statistics evaluation needs."""
    argv = [*QUICK, "--env-id", "InvertedPendulum-v5", "--total-timesteps", "32", "--save-model"]
    run("ppo_continuous_action.py", *argv, cwd=tmp_path)
    path = checkpoint_path(tmp_path)
    model = torch.load(path.with_suffix(".cleanrl_model"), weights_only=True)["ranks"][0]["wrapper"]
    saved = torch.load(path, weights_only=False)["ranks"][0]["wrapper"]
    assert torch.equal(model["obs_rms"]["mean"], torch.from_numpy(saved["obs_rms"].mean))
    assert model["obs_rms"]["count"] == saved["obs_rms"].count > 1
