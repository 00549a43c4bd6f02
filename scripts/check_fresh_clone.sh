#!/usr/bin/env bash
# Clone the repository into an empty temporary folder and run README.md's two set-up commands
# there, exactly as written (the lines after "# 1." and "# 2." in its Set-up block).
# Usage: bash scripts/check_fresh_clone.sh [ref]   (default: HEAD)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
git clone --quiet "$repo" "$dir/clone"
cd "$dir/clone"
git checkout --quiet "${1:-HEAD}"
mapfile -t commands < <(awk '/^## Set-up/{s=1} s && /^# [12]\./{getline; print} /^## Plan offline/{exit}' README.md)
[ "${#commands[@]}" -eq 2 ] || { echo "expected 2 set-up commands in README.md, found ${#commands[@]}"; exit 1; }
for c in "${commands[@]}"; do
  echo "+ $c"
  start=$(date +%s)
  bash -c "$c"
  echo "  ($(( $(date +%s) - start )) s)"
done
