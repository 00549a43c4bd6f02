#!/usr/bin/env bash
# IaC scan of the Kubernetes objects a stack emits (default p5en-prod): renders them from the
# program's recorded graph, scans them with checkov and compares with
# policy/checkov-justifications.yaml. Exit 1 on a new finding or a stale justification.
#
#   bash policy/scan.sh [--stack NAME] [--keep DIR]      # scan
#   bash policy/scan.sh --install-only                   # only create checkov's virtualenv
#
# checkov gets its own virtualenv (its pins conflict with pulumi's), kept in
# ${XDG_CACHE_HOME:-~/.cache}/moe-rl-platform/checkov-<version>; the project's Python runs the
# program (PYTHON, default .venv/bin/python or venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^checkov==//p' policy/requirements-scan.txt)
venv="${XDG_CACHE_HOME:-$HOME/.cache}/moe-rl-platform/checkov-${version}"
if [ ! -x "$venv/bin/checkov" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet -r policy/requirements-scan.txt
fi
if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi
python="${PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in .venv/bin/python venv/bin/python; do
    if [ -x "$candidate" ]; then python=$candidate; break; fi
  done
fi
exec "${python:-python3}" -m policy.scan --checkov "$venv/bin/checkov" "$@"
