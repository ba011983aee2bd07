"""The CPU pin (``baselines.determinism``): whatever a user's environment says of torch's CPU code
paths, a baseline run uses the pinned ones, so the same config and seed give the same rows on
every x86-64 machine; without the pin, the same outside settings give other rows here (the
control: it shows this test can see a difference, so it would fail if the pin were removed).
And ``compare_rows``, which says exactly what a comparison with a reference checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from baselines.common import compare_rows
from baselines.determinism import OPT_OUT, PINNED_ENV, check_pin, cpu_info, describe

REPO = Path(__file__).resolve().parents[1]
TINY = ["grpo.steps=3", "grpo.prompts_per_step=3", "grpo.group_size=4", "grpo.eval_interval=0", "env.n_eval_tasks=4",
        "env.n_tasks=30", "grpo.hidden=32"]  # fmt: skip


def _best_capability() -> str | None:
    flags = set(cpu_info()["flags"])
    return "avx512" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else "avx2" if "avx2" in flags else None


def _start(tmp: Path, name: str, env: dict[str, str]) -> tuple[Path, subprocess.Popen[bytes]]:
    out = tmp / name
    argv = [sys.executable, "-m", "baselines.grpo", "--quiet", "--out", str(out)]
    for pair in TINY:
        argv += ["--set", pair]
    full = {k: v for k, v in os.environ.items() if k not in PINNED_ENV and k != OPT_OUT} | env
    with open(tmp / f"{name}.stderr", "w") as err:  # a file: no pipe to fill while another run is awaited
        proc = subprocess.Popen(argv, cwd=REPO, env=full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    return out, proc


def _runs(tmp: Path, runs: dict[str, dict[str, str]]) -> dict[str, tuple[list[str], dict[str, object]]]:
    """Each named run of the tiny GRPO config (its outside settings), all at once in processes of
    their own (each one's rows depend on its settings and seed only, not on what runs beside it):
    its curve's rows and its meta's ``numerics``."""
    started = {name: _start(tmp, name, env) for name, env in runs.items()}
    done: dict[str, tuple[list[str], dict[str, object]]] = {}
    try:
        for name, (out, proc) in started.items():
            assert proc.wait(timeout=600) == 0, (name, (tmp / f"{name}.stderr").read_text()[-3000:])
            meta = json.loads((out / "meta.json").read_text())
            done[name] = (out / "curve.csv").read_text().splitlines(), meta["numerics"]
    finally:
        for _, proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


@pytest.mark.slow
def test_two_outside_settings_of_the_cpu_paths_give_identical_rows(tmp_path: Path) -> None:
    best = _best_capability()
    if best is None:
        pytest.skip("this CPU has no AVX2: ATen's default kernels are its only ones, nothing to pin against")
    # a user's own settings, as different as this machine allows: the scalar kernels, MKL's portable
    # branch and one thread, against the CPU's best kernels, MKL's own choice and two threads
    plain = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"}
    fast = {"ATEN_CPU_CAPABILITY": best, "MKL_CBWR": "AUTO", "OMP_NUM_THREADS": "2"}
    runs = _runs(tmp_path, {"pinned-plain": plain, "pinned-fast": fast, "unpinned-plain": plain | {OPT_OUT: "off"},
                            "unpinned-fast": fast | {OPT_OUT: "off"}})  # fmt: skip
    (rows_a, num_a), (rows_b, num_b) = runs["pinned-plain"], runs["pinned-fast"]
    assert len(rows_a) == 4  # the header and 3 steps
    assert rows_a == rows_b
    for num, outside in ((num_a, plain), (num_b, fast)):
        pin = num["pin"]  # type: ignore[index]
        assert pin["pinned"] is True and pin["effective"]["aten_cpu_capability"] == "DEFAULT"
        assert pin["settings"] == PINNED_ENV
        assert {k: pin["outside"][k] for k in outside} == outside  # the user's values, recorded
        assert num["cpu"]["model"] and num["torch"]["build"]  # type: ignore[index]
    # the control: the same two settings without the pin give other rows on this machine
    (off_a, numoff), (off_b, _) = runs["unpinned-plain"], runs["unpinned-fast"]
    assert numoff["pin"]["pinned"] is False  # type: ignore[index]
    assert off_a != off_b, "without the pin these settings should change the floats: the test could not see a breach"


def test_the_pin_is_in_force_in_the_test_process() -> None:
    # conftest imports baselines before anything imports torch, as python -m baselines.<name> does
    state = check_pin()
    assert state["pinned"], state
    assert state["effective"]["mkldnn_enabled"] is False
    assert os.environ["ATEN_CPU_CAPABILITY"] == "default"
    d = describe()
    assert d["pin"]["requested"] and d["cpu"]["flags"] and any("Math Kernel" in b for b in d["torch"]["build"])


def _csv(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(["step,reward,loss", *rows]) + "\n")
    return path


@pytest.mark.parametrize(("mine", "identical", "outcomes", "says"), [
    pytest.param(["1,0.5,0.25", "2,0.75,0.125"], True, True, "2 rows identical", id="identical"),
    pytest.param(["1,0.5,0.25", "2,0.75,0.12500001"], False, True, "outcomes identical", id="loss-within-tolerance"),
    pytest.param(["1,0.5,0.25", "2,0.75,0.2"], False, True, "NOT the same", id="loss-beyond-tolerance"),
    pytest.param(["1,0.5,0.25", "2,0.5,0.125"], False, False, "row 2, reward: 0.5 vs 0.75", id="reward-differs"),
])  # fmt: skip
def test_compare_rows_says_exactly_what_it_checked(tmp_path: Path, mine: list[str], identical: bool, outcomes: bool,
                                                   says: str) -> None:  # fmt: skip
    ref = _csv(tmp_path / "ref.csv", ["1,0.5,0.25", "2,0.75,0.125", "3,1.0,0.0"])
    got = compare_rows(_csv(tmp_path / "mine.csv", mine), ref, tolerant=("loss",), rtol=1e-6)
    assert (got.identical, got.outcomes_identical) == (identical, outcomes)
    assert says in got.message and got.rows == 2
    if not identical:
        assert "NOT" in got.message  # never claims more than it checked
