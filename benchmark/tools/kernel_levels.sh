#!/usr/bin/env bash
# The suite's exactness claims under every ATen CPU kernel level this CPU has (ATEN_CPU_CAPABILITY:
# default, avx2, avx512 where the CPU has it) and under 1 and 2 threads (OMP_NUM_THREADS; ppo.py,
# ppo_rnn.py and ppo_continuous_action.py set one torch thread themselves). Prints one line per
# combination; the pytest output goes to benchmark/results/kernel_levels/.
# usage: bash benchmark/tools/kernel_levels.sh [extra pytest args]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=benchmark/results/kernel_levels
mkdir -p "$out"
tests=(tests/test_training.py tests/test_rnn.py tests/test_continuous.py tests/test_episodes.py tests/test_gae.py tests/test_losses.py)
select="ratio or same_seed or resumed or replay or bit_for_bit or truncation or phantom or gae or gradient or statistics"
levels=(default avx2)
if grep -qw avx512f /proc/cpuinfo; then levels+=(avx512); fi
cpu=$(lscpu | sed -n 's/^Model name: *//p')
echo "CPU: $cpu; levels: ${levels[*]}" | tee "$out/summary.txt"
for level in "${levels[@]}"; do
  for threads in 1 2; do
    log="$out/${level}_${threads}threads.log"
    ATEN_CPU_CAPABILITY=$level OMP_NUM_THREADS=$threads python -m pytest -p no:cacheprovider -q "${tests[@]}" \
      tests/test_atari.py::test_native_truncation_is_bootstrapped -k "$select or native_truncation" -s "$@" >"$log" 2>&1
    cap=$(ATEN_CPU_CAPABILITY=$level python -c "import torch; print(torch.backends.cpu.get_cpu_capability())")
    echo "ATEN_CPU_CAPABILITY=$level (torch reports $cap) OMP_NUM_THREADS=$threads: $(tail -n 1 "$log")" | tee -a "$out/summary.txt"
    grep -o "[a-z_]*\.py iteration [12]: max |log-prob difference| [0-9.e+-]*" "$log" | sed 's/^/    /' | tee -a "$out/summary.txt"
  done
done
