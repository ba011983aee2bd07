#!/usr/bin/env bash
# Run the benchmarks for real (pytest-benchmark), save their table to benchmarks/results/ and copy
# it into the README.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python -m pytest benchmarks -q --benchmark-columns=median,ops --save-results "$@"
.venv/bin/python scripts/readme_tables.py
