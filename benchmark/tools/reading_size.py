"""How much a reader reads: the research layer plus `__main__` of each script (every line above the
run-management banner's top rule, and from `if __name__` to the end), comments and docstrings
included, beside the run-management layer between them.

    python benchmark/tools/reading_size.py [TREE]            # TREE: a checkout (default: this one)
    python benchmark/tools/reading_size.py --cleanrl PPO_PY  # a CleanRL file, measured whole

Prints one markdown table. tests/test_style.py holds the ceilings."""

import sys
from pathlib import Path

SCRIPTS = ["ppo.py", "ppo_atari.py", "ppo_continuous_action.py", "ppo_rnn.py"]
MAIN = 'if __name__ == "__main__":'


def layers(source: str) -> tuple:
    """(research layer + __main__, run-management layer) of a script's text, as lists of lines."""
    lines = source.splitlines()
    banner = next(i for i, line in enumerate(lines) if line.startswith("# RUN MANAGEMENT")) - 1
    main = lines.index(MAIN)
    return lines[:banner] + lines[main:], lines[banner:main]


def measure(lines: list) -> dict:
    text = [line for line in lines if line.strip()]
    return {
        "lines": len(lines),
        "characters": sum(len(line) for line in lines),  # newlines not counted
        "over 100": sum(len(line) > 100 for line in lines),
        "average non-blank line": sum(len(line) for line in text) / max(len(text), 1),
    }


def row(name: str, sizes: dict) -> str:
    average = f"{sizes['average non-blank line']:.1f}"
    return f"| {name} | {sizes['lines']} | {sizes['characters']:,} | {sizes['over 100']} | {average} |"


def main():
    argv = sys.argv[1:]
    header = "| lines | characters | lines over 100 characters | average non-blank line |"
    if argv[:1] == ["--cleanrl"]:
        print(f"| CleanRL file (whole) {header}\n|---|---|---|---|---|")
        print(row(argv[1], measure(Path(argv[1]).read_text().splitlines())))
        return
    tree = Path(argv[0] if argv else Path(__file__).resolve().parents[2])
    print(f"| research layer + `__main__` {header} run management (characters) |")
    print("|---|---|---|---|---|---|")
    for script in SCRIPTS:
        research, management = layers((tree / script).read_text())
        management_chars = measure(management)["characters"]
        print(f"{row(f'`{script}`', measure(research))} {management_chars:,} |")


if __name__ == "__main__":
    main()
