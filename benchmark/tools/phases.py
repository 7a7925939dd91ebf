"""Where a script's time goes: runs one of the four scripts in this process, times every line of its
top-level code (wall clock from one line to the next, so a line's time includes everything it calls),
and prints the time per iteration of each section of the training loop (the script's banners:
ROLLOUT, ADVANTAGES, FLATTEN, UPDATE, LOGGING, ...) and the costliest lines.

    python benchmark/tools/phases.py ppo_atari.py --no-cuda --total-timesteps 20480
    python benchmark/tools/phases.py --sync ppo_atari.py --cuda --num-envs 128 --num-steps 32 --num-minibatches 16 --total-timesteps 307200

Everything after the script's name goes to the script. On CUDA the GPU runs what a line queued while
the CPU goes on, so the GPU's time lands on the line that waits for it (a `.cpu()`, `.item()` or
`.tolist()`): in the rollout, on the env step's line, which hands the actions to the host. With
`--sync`, `torch.cuda.synchronize()` after every line of the top-level code puts it on the line that
queued it, at the cost of the overlap between the CPU and the GPU across lines (compare the SPS the
script prints with and without). The tracing itself costs one Python call per Python function call.
"""

import argparse
import ast
import re
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

BANNER = re.compile(r"^\s*# ([A-Z][A-Z -]*[A-Z])\s*$")  # the scripts' section banners, e.g. "# ROLLOUT"


def trace(path: str, argv: list, sync: bool = False, clock=time.perf_counter, init_globals=None) -> tuple:
    """Run the script at `path` as `python path *argv` would, in this process; return ({line: seconds},
    {line: times reached}, the script's globals or None if it exited early)."""
    spent, hits, last = defaultdict(float), defaultdict(int), [None, 0.0]
    if sync:
        import torch  # the script imports it anyway; synchronizing waits until the script has made a CUDA context
    cuda = torch.cuda if sync else None

    def on_line(frame, event, arg):
        if cuda is not None and cuda.is_initialized():
            cuda.synchronize()
        now = clock()
        if last[0] is not None:
            spent[last[0]] += now - last[1]
        last[0] = None if event == "return" else frame.f_lineno
        last[1] = now
        if event == "line":
            hits[frame.f_lineno] += 1
        return on_line

    # run it as `python path` would (what runpy.run_path sets up), compiled here so that the tracer
    # can find its top-level frame by identity, the cheapest test for the one call per function call
    code = compile(Path(path).read_text(), path, "exec")

    def on_call(frame, event, arg):
        return on_line if frame.f_code is code else None

    main = types.ModuleType("__main__")  # the script's classes live in sys.modules["__main__"], as under python
    main.__dict__.update({**(init_globals or {}), "__file__": path, "__builtins__": __builtins__})
    scope = main.__dict__
    saved_argv, sys.argv = sys.argv, [path, *argv]
    saved_path, sys.path = sys.path, [str(Path(path).parent), *sys.path[1:]]
    saved_main, sys.modules["__main__"] = sys.modules["__main__"], main
    finished = False
    sys.settrace(on_call)
    try:
        exec(code, scope)
        finished = True
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    finally:
        sys.settrace(None)
        sys.argv, sys.path, sys.modules["__main__"] = saved_argv, saved_path, saved_main
    return dict(spent), dict(hits), scope if finished else None


def summarize(path: str, spent: dict, hits: dict, top: int = 12) -> str:
    """The per-iteration table by section and the costliest lines of the loop, as text."""
    text = Path(path).read_text()
    source = text.splitlines()
    loops = [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.For) and getattr(node.target, "id", None) == "iteration"
    ]
    if not loops:
        raise SystemExit(f"{path}: no `for iteration in ...` loop to time")
    head = loops[0]
    loop, end = head.lineno, head.body[-1].end_lineno + 1  # the body's lines (not an else: clause)
    # iterations: how often the loop body's first statement that is not itself a loop ran
    first = next((node.lineno for node in head.body if not isinstance(node, (ast.For, ast.While))), None)
    iterations = hits.get(first, 0)
    if iterations == 0:
        raise SystemExit(f"{path}: the training loop did not run")
    section_of, name = {}, "loop head"
    for n in range(loop + 1, end):
        banner = BANNER.match(source[n - 1])
        name = banner.group(1) if banner else name
        section_of[n] = name
    in_loop = {n: s for n, s in spent.items() if n in section_of}
    loop_total = sum(in_loop.values())
    by_section = defaultdict(float)
    for n, seconds in in_loop.items():
        by_section[section_of[n]] += seconds
    lines = [
        f"{Path(path).name}: {iterations} iterations, {loop_total:.2f} s in the loop ({loop_total / iterations:.4f} s per iteration), "
        f"{sum(spent.values()) - loop_total:.2f} s outside it",
        "",
        "| section | s per iteration | share |",
        "|---|---|---|",
    ]
    for section in dict.fromkeys(section_of.values()):
        if section in by_section:
            share = by_section[section] / loop_total if loop_total else 0.0
            lines.append(f"| {section} | {by_section[section] / iterations:.4f} | {share:.1%} |")
    lines += ["", "| line | section | s per iteration | share | runs per iteration | code |", "|---|---|---|---|---|---|"]
    for n, seconds in sorted(in_loop.items(), key=lambda item: -item[1])[:top]:
        share = seconds / loop_total if loop_total else 0.0
        code = source[n - 1].strip().replace("|", "\\|")
        lines.append(
            f"| {n} | {section_of[n]} | {seconds / iterations:.4f} | {share:.1%} | {hits.get(n, 0) / iterations:g} | `{code}` |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sync", action="store_true", help="torch.cuda.synchronize() after every top-level line (CUDA)")
    parser.add_argument("--top", type=int, default=12, help="how many of the costliest lines to list")
    parser.add_argument("--out", help="also write the tables to this file")
    parser.add_argument("script", help="ppo.py, ppo_atari.py, ppo_continuous_action.py or ppo_rnn.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    opts = parser.parse_args()
    path = str(Path(opts.script).resolve())
    if not Path(path).is_file():
        raise SystemExit(f"{opts.script}: no such script; give the path to one of the four scripts")
    spent, hits, _ = trace(path, opts.args, sync=opts.sync)
    text = summarize(path, spent, hits, opts.top)
    command = " ".join(["phases.py", *(["--sync"] if opts.sync else []), Path(path).name, *opts.args])
    print(f"\n{command}\n\n{text}")
    if opts.out:
        Path(opts.out).write_text(f"{command}\n\n{text}\n")


if __name__ == "__main__":
    main()
