#!/usr/bin/env bash
# Memory, seeds 1-3, 500k steps: ppo_rnn.py with each cell (LSTM, the default; GRU) on the velocity-masked tasks and
# on the cue-recall task MemoryL{L}K2-v0 at L = 10, 30, 100; the memoryless ppo.py on the same tasks (its default
# settings) as the baseline; LSTM variants on the cue-recall tasks; CartPoleNoVel-v1's 100k-step
# checkpoints of both cells evaluated greedily; one report.
# usage: [OUT=DIR] [CONTINUE=1] [JOBS=1] bash benchmark/ppo_rnn.sh [flags for every run, after the script's own: they win]
#   about 2.5 hours on a 2-core AMD EPYC (the 90 runs of 2026-11-24/25, two at a time: report.md's wall times, 0.6-6.4
#   minutes a run, add up to 294 minutes; the variants' runs shared the machine)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmark/results/ppo_rnn}
export RUN_MANY_SESSION="$$ $(date +%s%N)"
tasks="MemoryL10K2-v0 MemoryL30K2-v0 MemoryL100K2-v0 CartPoleNoVel-v1 AcrobotNoVel-v1"
bash benchmark/run_many.sh ppo_rnn.py "$out" "$tasks" "1 2 3" --total-timesteps 500000 "$@"
TAG=gru bash benchmark/run_many.sh ppo_rnn.py "$out" "$tasks" "1 2 3" --total-timesteps 500000 --cell gru --exp-name ppo_rnn_gru "$@"
bash benchmark/run_many.sh ppo.py "$out" "$(printf 'ppo_rnn:%s ' $tasks)" "1 2 3" --total-timesteps 500000 "$@"
# the LSTM on the cue-recall tasks with an entropy bonus, and at L = 30 without advantage normalization (with the
# defaults, runs there collapse after a perfect stretch: benchmark/README.md)
memory="MemoryL10K2-v0 MemoryL30K2-v0 MemoryL100K2-v0"
TAG=ent_coef_0.01 bash benchmark/run_many.sh ppo_rnn.py "$out" "$memory" "1 2 3" --total-timesteps 500000 --ent-coef 0.01 \
  --exp-name ppo_rnn_ent_coef_0.01 "$@"
TAG=no_norm_adv bash benchmark/run_many.sh ppo_rnn.py "$out" MemoryL30K2-v0 "1 2 3" --total-timesteps 500000 --no-norm-adv \
  --exp-name ppo_rnn_no_norm_adv "$@"
# the LSTM's forget gate (--forget-bias B; default 0, DETAILS.md's zero biases) at L = 30, alone and with 16 envs or
# without advantage normalization; then the two settings that held L = 30 in every seed, on every cue-recall task
for variant in "forget_bias_1|--forget-bias 1" "num_envs_16_forget_bias_1|--num-envs 16 --forget-bias 1" \
  "num_envs_16_forget_bias_3|--num-envs 16 --forget-bias 3"; do
  tag=${variant%%|*}
  # shellcheck disable=SC2086
  TAG=$tag bash benchmark/run_many.sh ppo_rnn.py "$out" MemoryL30K2-v0 "1 2 3" --total-timesteps 500000 ${variant#*|} --exp-name ppo_rnn_$tag "$@"
done
TAG=forget_bias_3_no_norm_adv bash benchmark/run_many.sh ppo_rnn.py "$out" "$memory" "1 2 3" --total-timesteps 500000 \
  --forget-bias 3 --no-norm-adv --exp-name ppo_rnn_forget_bias_3_no_norm_adv "$@"
TAG=num_envs_16_forget_bias_3_no_norm_adv bash benchmark/run_many.sh ppo_rnn.py "$out" "$memory" "1 2 3" --total-timesteps 500000 \
  --num-envs 16 --forget-bias 3 --no-norm-adv --exp-name ppo_rnn_num_envs_16_forget_bias_3_no_norm_adv "$@"
for cell in lstm gru; do
  TAG=${cell}_100k bash benchmark/run_many.sh ppo_rnn.py "$out" CartPoleNoVel-v1 "1 2 3" --total-timesteps 100000 --cell $cell \
    --exp-name ppo_rnn_${cell}_100k --save-model "$@"
done
for ckpt in "$out"/runs/CartPoleNoVel-v1__ppo_rnn_*_100k__*/*.pt; do
  echo "$(basename "$(dirname "$ckpt")" | awk -F__ '{print $1, $2, "seed", $3}') | $(python ppo_rnn.py --eval-checkpoint "$ckpt" --eval-episodes 10 --eval-greedy --no-cuda | tail -n 1)"
done | tee "$out/eval_100k.txt"
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "memory tasks, 500k steps (100k: the checkpoints evaluated in eval_100k.txt)${*:+; extra flags: $*}" \
  --threshold solved --success --out "$out/report"
