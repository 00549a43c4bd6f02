#!/usr/bin/env bash
# Stages the pinned Miles and Megatron trees the trainer contract reads (contracts/tests/test_trainer_args.py):
# no package registry has them. Give it clones of radixark/miles and radixark/Megatron-LM (any clone holding the
# commits); each tree below is `git archive`d from the first clone that has its commit, into
# $CONTRACTS_SOURCES/<owner>+<repo>@<commit>/ (default ~/.cache/moe-rl-contracts/src).
#   bash contracts/stage_trees.sh ~/src/miles ~/src/Megatron-LM
set -euo pipefail
dest="${CONTRACTS_SOURCES:-$HOME/.cache/moe-rl-contracts/src}"
trees=(
  "radixark+miles@49cac7b52507fe6953952c3e1d1ad05a01b144a4 miles"
  "radixark+Megatron-LM@37f91617b95c1ef4f01fc66210e502572ad97fda megatron miles_megatron_plugins"
  "radixark+Megatron-LM@235952df607b3820716e5e67728a5ab470ca33ae megatron"
  "radixark+Megatron-LM@3714d81d418c9f1bca4594fc35f9e8289f652862 megatron"
)
missing=0
for line in "${trees[@]}"; do
  read -r tree paths <<<"$line"
  commit="${tree#*@}"
  [ -d "$dest/$tree" ] && { echo "staged: $tree"; continue; }
  for clone in "$@"; do
    if git -C "$clone" cat-file -e "$commit^{commit}" 2>/dev/null; then
      mkdir -p "$dest/$tree.partial"
      # shellcheck disable=SC2086  # the paths are words
      git -C "$clone" archive "$commit" $paths | tar -x -C "$dest/$tree.partial"
      mv "$dest/$tree.partial" "$dest/$tree"
      echo "staged: $tree from $clone"
      continue 2
    fi
  done
  echo "NOT staged: $tree (no clone given holds $commit)" >&2
  missing=1
done
exit "$missing"
