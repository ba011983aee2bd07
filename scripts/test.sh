#!/usr/bin/env bash
# Every check: set up (if needed), lint, type-check, then the whole test suite (slow tests
# included) and the benchmarks once each as smoke tests. pytest's "no tests ran" is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
V=.venv/bin
$V/ruff check sandbox code_env registry baselines tests benchmarks scripts
$V/python -m registry.build_builtin --check
$V/mypy
set +e
# On pytest-xdist workers (CODE_ENV_TEST_WORKERS, default 2; 0: in this process): most tests wait
# on sandboxed programs and their timeouts, not on the CPU. The tests that must not run beside each
# other go to one worker together (tests/conftest.py, XDIST_GROUPS), hence --dist loadgroup.
$V/python -m pytest tests -n "${CODE_ENV_TEST_WORKERS:-2}" --dist loadgroup "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
[ $rc -eq 0 ] || exit $rc
$V/python -m pytest benchmarks --benchmark-disable -q
