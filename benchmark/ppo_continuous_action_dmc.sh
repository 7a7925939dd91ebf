#!/usr/bin/env bash
# The DeepMind Control Suite, 1M steps: six tasks, seeds 1-5 (SEEDS="...") with the default settings (the truncation
# bootstrap, no entropy bonus), then the same six without the bootstrap (exp name ppo_continuous_action_no_bootstrap;
# seeds 1-3, or NO_BOOTSTRAP_SEEDS="..."); one report with P(bootstrap improves on no bootstrap), beside CleanRL's
# figures at 1M steps (3 seeds) and at 8M (10 seeds) (report.py's PUBLISHED says where each is published). CONTINUE=1
# skips a run whose log has its last iteration, so the table can be completed over several sittings. Runs in
# requirements-dmc.txt's venv (README: The DeepMind Control Suite). About 8 hours on a 2-core Intel Xeon (2026-11-28:
# the 48 runs' wall times in scalars/, 14.9-33.6 minutes a run, add up to 947 minutes, two at a time).
# The logs tagged ent_coef_0.01 in results/ppo_continuous_action_dmc/ are the runs made when --ent-coef 0.01 was the
# default on the suite; FALL=1 FALL_VARIANTS=ent_coef_0.01 TASKS="..." runs that setting again (in ..._dmc_fall/).
# HELDOUT=1: the entropy bonus tested where it was not chosen: six other tasks of CleanRL's list (cartpole-balance,
# pendulum-swingup, point_mass-easy, finger-turn_easy, fish-upright, reacher-hard), seeds 1-2, with --ent-coef 0.01 and
# --ent-coef 0, and P(0.01 > 0) (results/ppo_continuous_action_dmc_heldout/): about 4.5 hours on the same machine
# (2026-11-28: 17.8-29.9 minutes a run, two or three at a time; scalars/).
# usage: [OUT=DIR] [CONTINUE=1] bash benchmark/ppo_continuous_action_dmc.sh [flags for every run, after the script's own:
#        they win]   (OUT replaces results/ppo_continuous_action_dmc, and the _heldout and _fall folders follow it;
#        JOBS=1 for one run at a time; TASKS="..." for some of them;
#        FALL=1 [FALL_SEEDS="1 2 3"] [FALL_VARIANTS="ent_coef_0.0 ent_coef_0.0+target_kl_0.1"; benchmark/variant.sh's
#        names, such as target_kl_0.1 or ent_coef_0.0+no_norm_reward]: settings changed instead, on cartpole-swingup or
#        on TASKS; the default variants are the fall after the peak without the entropy bonus, docs/continuous.md;
#        about an hour on cartpole-swingup, from the wall times of those runs in results/ppo_continuous_action_dmc_fall/)
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmark/variant.sh
python -c "import shimmy" 2>/dev/null || { echo "error: needs the venv of requirements-dmc.txt (dm-control, shimmy); see README.md" >&2; exit 1; }
out=${OUT:-benchmark/results/ppo_continuous_action_dmc}
export RUN_MANY_SESSION="$$ $(date +%s%N)"
tasks=${TASKS:-"cartpole-swingup walker-walk cheetah-run reacher-easy finger-spin ball_in_cup-catch"}
[ -n "${FALL:-}" ] && tasks=${TASKS:-cartpole-swingup}
ids=$(for t in $tasks; do printf 'dm_control/%s-v0 ' "$t"; done)
if [ -n "${HELDOUT:-}" ]; then  # HELDOUT=1: the entropy bonus on six other tasks of CleanRL's list, seeds 1-2, with and without
  tasks=${TASKS:-"cartpole-balance pendulum-swingup point_mass-easy finger-turn_easy fish-upright reacher-hard"}
  ids=$(for t in $tasks; do printf 'dm_control/%s-v0 ' "$t"; done)
  for variant in ent_coef_0.01 ent_coef_0.0; do
    variant_flags "$variant"
    TAG=$variant bash benchmark/run_many.sh ppo_continuous_action.py "${out}_heldout" "$ids" "${HELDOUT_SEEDS:-1 2}" \
      --total-timesteps 1000000 "${flags[@]}" --exp-name "ppo_continuous_action_$variant" "$@"
  done
  python benchmark/report.py "${out}_heldout/runs" "${out}_heldout/scalars" --save-scalars --title "DeepMind Control Suite, 1M steps: held-out tasks, --ent-coef 0.01 and 0${*:+; extra flags: $*}" \
    --published --peaks --compare ppo_continuous_action_ent_coef_0.01 ppo_continuous_action_ent_coef_0.0 --out "${out}_heldout/report"
  exit 0
fi
if [ -n "${FALL:-}" ]; then  # FALL=1: the fall after the peak (docs/continuous.md): settings changed
  envs=$(for t in $tasks; do printf -- '--env dm_control_%s-v0 ' "$t"; done)
  for variant in ${FALL_VARIANTS:-ent_coef_0.0 ent_coef_0.0+target_kl_0.1}; do
    variant_flags "$variant"
    TAG=$variant bash benchmark/run_many.sh ppo_continuous_action.py "${out}_fall" "$ids" "${FALL_SEEDS:-1 2 3}" \
      --total-timesteps 1000000 "${flags[@]}" --exp-name "ppo_continuous_action_$variant" "$@"
  done
  # shellcheck disable=SC2086
  python benchmark/report.py "${out}_fall/runs" "${out}_fall/scalars" "$out/runs" "$out/scalars" --save-scalars $envs --peaks --published \
    --title "DeepMind Control Suite, 1M steps: the default and settings changed${*:+; extra flags: $*}" --out "${out}_fall/report"
  exit 0
fi
bash benchmark/run_many.sh ppo_continuous_action.py "$out" "$ids" "${SEEDS:-1 2 3 4 5}" --total-timesteps 1000000 "$@"
TAG=no_bootstrap bash benchmark/run_many.sh ppo_continuous_action.py "$out" "$ids" "${NO_BOOTSTRAP_SEEDS:-1 2 3}" --total-timesteps 1000000 \
  --no-bootstrap-truncation --exp-name ppo_continuous_action_no_bootstrap "$@"
python benchmark/report.py "$out/runs" "$out/scalars" --save-scalars --title "DeepMind Control Suite, 1M steps${*:+; extra flags: $*}" --published --peaks \
  --compare ppo_continuous_action ppo_continuous_action_no_bootstrap --out "$out/report"
