"""The README is the user's front door: its quick start must run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests._rayenv import ray_environment

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # (the examples write their files where they run)
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "no python block in the README"
    with ray_environment():  # the Ray example starts a local instance: no token file in the home dir
        for block in blocks:
            exec(compile(block, "README.md", "exec"), {})


def test_generated_tables_are_present() -> None:
    text = README.read_text()
    assert "| `timeout_s` |" in text
    assert "| code-env process backend |" in text, "run scripts/bench.sh to fill the performance table"


def test_the_task_count_it_states_is_true() -> None:
    import registry

    m = re.search(r"`builtin` \((\d+) problems", README.read_text())
    assert m and int(m.group(1)) == len(registry.load("builtin"))
