#!/usr/bin/env bash
# Wheels for a machine whose Python (3.12, x86-64) has torch, numpy and tensorboard but not the env stack:
# gymnasium, ale-py, mujoco and tyro at the versions pinned in requirements.txt, with the small packages they
# need, downloaded into .whl/ (kept out of git through .git/info/exclude). Run it in the repo root:
#   bash benchmark/fetch_gpu_wheels.sh
# and on the other machine, before anything else: benchmark/gpu.sh installs .whl/ into /tmp/site itself.
set -euo pipefail
cd "$(dirname "$0")/.."
pin() { grep -m1 "^$1==" requirements.txt | cut -d= -f3; }
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo '/.whl/' >>.git/info/exclude; }
mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# mujoco imports mujoco-core, glfw and pyopengl; tyro needs docstring-parser, typeguard and shtab
for pkg in "gymnasium==$(pin gymnasium)" farama-notifications "ale-py==$(pin ale-py)" "mujoco==$(pin mujoco)" \
  "mujoco-core==$(pin mujoco)" glfw pyopengl "tyro==$(pin tyro)" docstring-parser typeguard shtab; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d .whl "$pkg"
done
du -sh .whl
