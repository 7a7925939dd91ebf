"""Nothing lost at the edges of a run: a full or read-only disk, two runs in one run dir, a directory or a part missing
where the checkpoint should be, arguments that would only fail late. Each is a one-line error, exit status 1, said
before anything is written wherever start-up can see it, and the last good checkpoint stays loadable.

The disks are real where the suite runs as root (a small tmpfs, as CI has); a fault injected into the write stands in
for them elsewhere, and for the failures a tmpfs cannot make on cue (TensorBoard's writer thread)."""

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import threading

import pytest
import torch

from tests.helpers import QUICK_ENV, TINY, cli, error_of, run, start, wait_for

RUN = [*TINY, "--save-model", "--save-every", "0"]  # the checkpoint written after every iteration


@contextlib.contextmanager
def tmpfs(path, size: str, *options: str):
    """A real filesystem of `size` mounted at path for the test's duration (root only: skipped elsewhere)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root; the injected-fault tests cover this without it")
    path.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The error a run stopped with: exit status 1 and one line on stderr, no traceback."""
    assert result.returncode == 1 and result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.strip()


def written(run_dir) -> list:
    return sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []


def says(message: str, *parts: str):
    """One `error: ` line holding each of parts: the values and key words that matter, not the whole sentence."""
    assert message.startswith("error: ") and "\n" not in message, message
    assert all(part in message for part in parts), (message, [part for part in parts if part not in message])


def settled(run_dir) -> list:
    """written(run_dir) but the files a running run is writing at that moment (`*.tmp`, renamed once synced)."""
    return [name for name in written(run_dir) if not name.endswith(".tmp")]


def test_a_full_disk_stops_in_one_line_keeps_the_last_checkpoint_and_resumes_once_freed(tmp_path, capsys):
    with tmpfs(tmp_path / "disk", "300k") as disk:
        run_dir = disk / "run"
        # 20 iterations: the disk is full at the checkpoint of iteration 2 (a checkpoint and its model file take 190k)
        argv = [*RUN, "--total-timesteps", "640", "--run-dir", str(run_dir), "--resume", "auto"]
        message = one_line_error(cli("ppo.py", *argv, cwd=tmp_path))
        ckpt = torch.load(run_dir / "ppo.pt", weights_only=False)  # the last checkpoint written whole
        says(message, f"'{run_dir}/ppo.pt'", f"iteration {ckpt['iteration'] + 1}", "No space left on device", "free space")
        assert message.endswith(f"--resume {run_dir}/ppo.pt continues after iteration {ckpt['iteration']}")
        assert not [name for name in written(run_dir) if name.endswith(".tmp")]  # no partial file left to keep the disk full
        subprocess.run(["mount", "-o", "remount,size=2m", str(disk)], check=True)  # space freed
        capsys.readouterr()
        run("ppo.py", *argv, cwd=tmp_path)  # the resumed run, in this process: it ends without an error
        assert f"resumed from {run_dir}/ppo.pt at iteration {ckpt['iteration']}" in capsys.readouterr().out
        assert torch.load(run_dir / "ppo.pt", weights_only=False)["global_step"] == 640


def test_a_failed_checkpoint_write_is_one_line_and_leaves_the_previous_one(tmp_path, monkeypatch):
    """The same without root: the disk fills up (ENOSPC) as the 4th checkpoint is synced."""
    fsync, calls = os.fsync, [0]

    def fills_up(fd):
        calls[0] += 1
        if calls[0] >= 7:  # checkpoints 1, 2, 3 and their model files synced; the 4th and every later one not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", fills_up)
    with pytest.raises(SystemExit) as stop:
        run(
            "ppo.py", *RUN, "--total-timesteps", "320", "--run-dir", str(tmp_path / "run"), cwd=tmp_path
        )  # saves every iteration
    says(stop.value.code, f"'{tmp_path}/run/ppo.pt'", "iteration 4", "No space left on device", "free space")
    assert stop.value.code.endswith(f"--resume {tmp_path}/run/ppo.pt continues after iteration 3")
    assert (
        torch.load(tmp_path / "run" / "ppo.pt", weights_only=False)["iteration"] == 3
        and not (tmp_path / "run" / "ppo.pt.tmp").exists()
    )


def test_tensorboard_failing_mid_run_is_one_line_and_the_checkpoint_is_saved(tmp_path, monkeypatch, capfd):
    """A filesystem that goes read-only mid-run, as TensorBoard's writer thread meets it: no thread traceback, one
    line, and the checkpoint of the last whole iteration (--save-every 0: written after each; to another disk, here:
    the same one, still able)."""
    from tensorboard.compat.tensorflow_stub.io.gfile import LocalFileSystem

    append, checkpoint = LocalFileSystem.append, tmp_path / "run" / "ppo.pt"

    def read_only(self, *a, **kw):  # the writer appends each record: read-only from the first one after a checkpoint
        if checkpoint.exists():
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return append(self, *a, **kw)

    monkeypatch.setattr(LocalFileSystem, "append", read_only)
    hook = threading.excepthook
    with pytest.raises(SystemExit) as stop:
        argv = [*TINY, "--save-model", "--save-every", "0", "--total-timesteps", "6400", "--run-dir", str(tmp_path / "run")]
        run("ppo.py", *argv, cwd=tmp_path)
    assert threading.excepthook is hook  # the run's quiet hook for TensorBoard's thread is gone with the run
    assert stop.value.code.startswith(f"error: '{tmp_path}/run': Read-only file system; free space there, or make it writable")
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "Exception in thread" not in err, err
    # when the main thread meets the writer's error depends on the threads' timing: the checkpoint holds the last
    # iteration that completed (at least the first, saved before the disk went read-only), and the message says so
    completed = [int(line.split("/")[0].removeprefix("iter ")) for line in out.splitlines() if line.startswith("iter ")]
    assert stop.value.code.endswith(f"; then --resume {checkpoint} continues after iteration {max(completed)}")
    ckpt = torch.load(checkpoint, weights_only=False)
    assert ckpt["iteration"] == max(completed) < 200 and ckpt["global_step"] == 32 * ckpt["iteration"]


def test_a_read_only_run_dir_is_one_line_at_start_up(tmp_path, capfd):
    with tmpfs(tmp_path / "disk", "1m", "ro"):
        capfd.readouterr()
        message = error_of(
            "ppo.py", *RUN, "--total-timesteps", "64", "--run-dir", str(tmp_path / "disk" / "run"), cwd=tmp_path
        )
        says(message, f"--run-dir '{tmp_path}/disk/run'", "Read-only file system", "pass one this user can write")
        assert capfd.readouterr() == ("", "")  # before the first env step, and nothing but the error (in this process)


def test_two_runs_in_one_run_dir_the_second_is_refused_until_the_first_is_gone(tmp_path):
    run_dir = tmp_path / "run"
    argv = [*RUN, "--total-timesteps", "1000000", "--run-dir", str(run_dir), "--resume", "auto"]
    first = start("ppo.py", argv, tmp_path / "a")
    try:
        wait_for(first, "iter 2/")
        before = settled(run_dir)
        second = cli("ppo.py", *argv, cwd=tmp_path)
        says(one_line_error(second), f"--run-dir '{run_dir}'", "in use by another run", "another --run-dir")
        assert second.stdout == "" and settled(run_dir) == before  # nothing written by the second
    finally:
        first.kill()  # SIGKILL: no clean-up, and the lock dies with the process
        first.communicate(timeout=60)
    # the lock died with the first: what refuses another experiment now is the first's files, not a run in progress
    third = error_of("ppo.py", *argv[:-4], "--run-dir", str(run_dir), "--exp-name", "third", cwd=tmp_path)  # in this process
    assert third.startswith(f"error: --run-dir '{run_dir}' holds another run's ppo.")


def test_a_directory_where_the_checkpoint_goes_is_one_line_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "ppo.pt").mkdir(parents=True)
    argv = [*RUN, "--total-timesteps", "64", "--run-dir", str(run_dir)]
    says(error_of("ppo.py", *argv, "--resume", "auto", cwd=tmp_path), f"'{run_dir}/ppo.pt' is not a file", "--save-model")
    assert error_of("ppo.py", *argv, "--resume", str(run_dir / "ppo.pt"), cwd=tmp_path).startswith(
        f"error: checkpoint '{run_dir}/ppo.pt' is not a file"
    )
    says(error_of("ppo.py", *argv, cwd=tmp_path), f"--run-dir '{run_dir}' holds ppo.pt", "--resume auto", "another --run-dir")
    assert written(run_dir) == ["ppo.pt"]


def test_a_checkpoint_without_its_parts_or_parameters_that_do_not_fit_is_one_line_before_anything_is_written(tmp_path):
    saved = tmp_path / "saved"
    run("ppo.py", *RUN, "--total-timesteps", "64", "--run-dir", str(saved), cwd=tmp_path)
    ckpt = torch.load(saved / "ppo.pt", weights_only=False)
    del ckpt["ranks"]
    torch.save(ckpt, tmp_path / "partial.pt")
    run_dir = tmp_path / "run"
    argv = [*RUN, "--total-timesteps", "96", "--run-dir", str(run_dir)]  # one iteration more than it trained
    message = error_of("ppo.py", *argv, "--resume", str(tmp_path / "partial.pt"), cwd=tmp_path)
    assert f"'{tmp_path}/partial.pt' is not a whole checkpoint of this ppo.py" in message and "--save-model" in message
    ckpt = torch.load(saved / "ppo.pt", weights_only=False)
    ckpt["agent"]["critic.0.weight"] = torch.zeros(32, 4)  # an edited Agent's
    torch.save(ckpt, tmp_path / "edited.pt")
    message = error_of("ppo.py", *argv, "--resume", str(tmp_path / "edited.pt"), cwd=tmp_path)
    assert f"'{tmp_path}/edited.pt' does not fit this Agent (" in message and "critic.0.weight" in message  # torch's words
    assert not run_dir.exists()  # no run dir, no event file, no purge of an earlier log


def test_save_every_nan_and_capture_video_without_moviepy_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    assert (
        error_of("ppo.py", "--save-model", "--save-every", "nan", cwd=tmp_path)
        == "error: --save-every must be non-negative, got nan"
    )
    monkeypatch.setitem(sys.modules, "moviepy", None)  # as where it is not installed: `import moviepy` raises ImportError
    says(error_of("ppo.py", "--capture-video", cwd=tmp_path), "--capture-video", "moviepy", "pip install moviepy")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("script", ["ppo.py"])  # run management, the same in all four (tests/test_drift.py)
def test_a_run_that_reached_its_end_exits_0_and_releases_its_run_dir(script, tmp_path):
    """The exit status is 0 for a finished run (a stopped one's is 128 + the signal: tests/test_signals.py), and a run
    in this process (IPython's %run) releases its run dir when it ends: another process can continue there."""
    argv = ["--env-id", QUICK_ENV[script], *RUN, "--run-dir", str(tmp_path / "run"), "--resume", "auto"]
    assert cli(script, *argv, "--total-timesteps", "64", cwd=tmp_path).returncode == 0
    assert run(script, *argv, "--total-timesteps", "96", cwd=tmp_path)["start_iteration"] == 3  # trained further
    again = cli(script, *argv, "--total-timesteps", "128", cwd=tmp_path)
    assert again.returncode == 0 and "resumed from" in again.stdout, again.stderr


def test_sigterm_to_one_process_fails_the_torchrun_job(tmp_path):
    """torchrun reports a job stopped by a signal as failed (so a retry loop or a scheduler does not take it for
    done), after rank 0 saved the last whole iteration."""
    from tests.helpers import ROOT
    from tests.test_distributed import SMALL, pid_of_rank, torchrun

    run_dir = tmp_path / "run"
    argv = [
        str(ROOT / "ppo.py"),
        *SMALL,
        "--total-timesteps",
        "1000000",
        "--no-cuda",
        "--save-model",
        "--run-dir",
        str(run_dir),
    ]
    proc = torchrun("--standalone", "--nproc-per-node", "2", *argv, cwd=tmp_path)
    lines = wait_for(proc, "iter 3/")
    os.kill(pid_of_rank(1, str(run_dir)), signal.SIGTERM)
    out = "".join(lines) + proc.communicate(timeout=300)[0]
    assert proc.returncode != 0, out[-3000:]
    (stopped,) = [line for line in out.splitlines() if line.startswith("stopped by SIGTERM after iteration")]
    ckpt = torch.load(run_dir / "ppo.pt", weights_only=False)
    assert (
        stopped == f"stopped by SIGTERM after iteration {ckpt['iteration']}, saved to {run_dir}/ppo.pt"
        and len(ckpt["ranks"]) == 2
    )
