#!/usr/bin/env bash
# The main job: set up (if needed), then run the demonstration on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/code-env demo "$@"
