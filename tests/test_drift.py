"""The four scripts are copies on purpose: the shared pieces stay identical, the Args fields keep one
order, the phases keep one set of banners, and each diff to ppo.py stays within its budget."""

import ast
import re
import subprocess

import pytest

from tests.helpers import ROOT, SCRIPTS

SIBLINGS = [s for s in SCRIPTS if s != "ppo.py"]
# changed lines, pinned at what each diff is, so that any growth shows up here. The issues aimed at
# about 150 (rnn), 80 (atari) and 80 (continuous); the last two are over: README, "Diff sizes".
BUDGETS = {"ppo_rnn.py": 159, "ppo_atari.py": 221, "ppo_continuous_action.py": 136}
SHARED = [
    "layer_init",
    "compute_gae",
    "policy_loss",
    "fail",
    "init_distributed",
    "all_mean",
    "whole_mean_std",
    "average_gradients",
    "gather",
    "log_episodes",
    "load_checkpoint",
]


def functions(script):
    source = (ROOT / script).read_text()
    tree = ast.parse(source)
    return {node.name: ast.get_source_segment(source, node) for node in tree.body if isinstance(node, ast.FunctionDef)}


def args_fields(script):
    tree = ast.parse((ROOT / script).read_text())
    (args,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args"]
    return [node.target.id for node in args.body if isinstance(node, ast.AnnAssign)]


def banners(script):
    return re.findall(r"^\s*# ([A-Z][A-Z -]+)$", (ROOT / script).read_text(), flags=re.M)


@pytest.mark.parametrize("script", SIBLINGS)
def test_shared_functions_are_identical(script):
    mine, theirs = functions("ppo.py"), functions(script)
    for name in SHARED:
        assert theirs[name] == mine[name], f"{name} differs between ppo.py and {script}"


@pytest.mark.parametrize("script", SIBLINGS)
def test_args_fields_keep_their_order(script):
    base, fields = args_fields("ppo.py"), args_fields(script)
    runtime = base.index("batch_size")
    extra = fields[runtime : len(fields) - (len(base) - runtime)]
    assert fields == base[:runtime] + extra + base[runtime:], "domain-only fields go at the end of the algorithm group"


@pytest.mark.parametrize("script", SIBLINGS)
def test_same_banners(script):
    assert banners(script) == banners("ppo.py")


@pytest.mark.parametrize("script", SIBLINGS)
def test_diff_budget(script):
    diff = subprocess.run(["diff", str(ROOT / "ppo.py"), str(ROOT / script)], capture_output=True, text=True).stdout
    changed = sum(line.startswith(("<", ">")) for line in diff.splitlines())
    assert changed <= BUDGETS[script], f"diff ppo.py {script}: {changed} changed lines"
