#!/usr/bin/env bash
# The main job: set up (if needed), run the demonstration on the embedded defaults, then train:
# the first steps of the GRPO baseline's reference run, with its curve next to the reference's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/code-env demo "$@"
echo
echo "== Learning: GRPO on synthetic:arith, the first 150 of the reference run's 300 steps (baselines/reference/grpo.csv) =="
exec .venv/bin/python -m baselines.grpo --max-steps 150 --name main-grpo
