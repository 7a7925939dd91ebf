# Sourced by the benchmark scripts: variant_flags NAME sets the array `flags` to the script options that NAME stands for.
# NAME_VALUE: --NAME VALUE (target_kl_0.1: --target-kl 0.1; ent_coef_0.01: --ent-coef 0.01); no_FLAG: --no-FLAG
# (no_anneal_lr: --no-anneal-lr); several joined by + (ent_coef_0.0+target_kl_0.1: --ent-coef 0.0 --target-kl 0.1).
# The name is also the runs' log tag and the end of their exp name.
variant_flags() {
  flags=()
  local part name
  for part in ${1//+/ }; do
    case $part in
      no_[a-z]*) flags+=(--"${part//_/-}") ;;
      [a-z]*_[0-9.]*) name=${part%_*} && flags+=(--"${name//_/-}" "${part##*_}") ;;
      *) echo "error: unknown variant '$1' (NAME_VALUE such as target_kl_0.1 or ent_coef_0.01, or no_FLAG such as no_norm_reward, joined by +)" >&2
         return 1 ;;
    esac
  done
}
