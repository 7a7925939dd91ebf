# Sourced by the benchmark scripts: variant_flags NAME sets the array `flags` to the script options that NAME stands for.
# NAME_VALUE: --NAME VALUE (target_kl_0.1: --target-kl 0.1; ent_coef_0.01: --ent-coef 0.01); no_FLAG: --no-FLAG
# (no_anneal_lr: --no-anneal-lr). The name is also the runs' log tag and the end of their exp name.
variant_flags() {
  case $1 in
    no_[a-z]*) flags=(--"${1//_/-}") ;;
    [a-z]*_[0-9.]*) local name=${1%_*} && flags=(--"${name//_/-}" "${1##*_}") ;;
    *) echo "error: unknown variant '$1' (NAME_VALUE such as target_kl_0.1 or ent_coef_0.01, or no_FLAG such as no_norm_reward)" >&2
       return 1 ;;
  esac
}
