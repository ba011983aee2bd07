"""GRPO in the topology of a real harness (``baselines/topology.py``): the learner, rollout actors
and executors as processes joined by a real ``redis-server``. The curve is the thread topology's to
the last digit, with the default staleness bound and with a larger one, and with an actor and an
executor killed mid-run (found and killed from the host side, by their command lines); every
process and every key of the run is gone at its end."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import redis

from baselines.grpo import main
from code_env.samples import SampleStates

from ._redis import REDIS_SERVER, redis_server
from .conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")]

SHORT = ["grpo.steps=8", "grpo.prompts_per_step=3", "grpo.group_size=4", "grpo.eval_interval=4", "env.n_eval_tasks=8",
         "env.n_tasks=40", "grpo.checkpoint_interval=0", "grpo.hidden=32", "env.log_every=1"]  # fmt: skip
TIMING = {"step"}  # curve.csv holds no timing column: every column must match


def _args(out: Path, *pairs: str) -> list[str]:
    return ["--quiet", "--out", str(out), *[a for p in (*SHORT, *pairs) for a in ("--set", p)]]


def _curve(run: Path) -> list[dict[str, str]]:
    with open(run / "curve.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _records(run: Path) -> list[str]:
    """The trace ids of the run's training records, sorted (which process wrote them aside)."""
    ids = []
    for f in sorted((run / "trajectories" / "train").glob("steps-*.jsonl")):
        for line in f.read_text().splitlines():
            ids.append(json.loads(line)["trace_id"])
    return sorted(ids)


@pytest.fixture(scope="module")
def thread_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    runs = {}
    for k in (1, 2):
        out = tmp_path_factory.mktemp(f"thread{k}") / "run"
        assert main(_args(out, f"grpo.max_staleness={k}")) == 0
        runs[k] = out
    return runs


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # gone, or a zombie
        return ""


def _left(run: Path) -> list[str]:
    """Processes of the run's topology still alive (anywhere on the machine): its actors (``--run
    ID``), executors (``--pool grpo-ID``) and redis-server (``--dir RUN/topology``)."""
    ids = json.loads((run / "topology" / "redis.json").read_text())
    marks = (ids["run"], str(run / "topology"))
    left = []
    for p in psutil.process_iter():
        line = _cmdline(p)
        if any(m in line for m in marks) and "pytest" not in line:
            left.append(f"{p.pid}: {line[:160]}")
    return left


@pytest.mark.parametrize("k", [1, 2])
def test_the_redis_topology_gives_the_thread_topologys_curve(thread_runs: dict[int, Path], tmp_path: Path, k: int) -> None:
    out = tmp_path / "run"
    with redis_server(tmp_path / "redis") as server:  # a server of the test's: the run's states stay to be read
        assert main(_args(out, f"grpo.max_staleness={k}", "grpo.topology=redis", "grpo.actors=2", "grpo.executors=2",
                          f"grpo.redis_url={server.url}")) == 0  # fmt: skip
        run = json.loads((out / "topology" / "redis.json").read_text())["run"]
        counts = SampleStates(server.url, run=run).counts()
        raw = redis.Redis.from_url(server.url)
        left_keys = list(raw.scan_iter(match=f"grpo:{run}:*"))
        ran = sum(b'"running"' in (raw.hget(key, "transitions") or b"") for key in raw.scan_iter(match=f"code-env:samples:{{{run}}}:sample:*"))
    assert _curve(out) == _curve(thread_runs[k])
    assert [r["staleness"] for r in _curve(out)] == [str(min(s, k)) for s in range(8)]
    assert _records(out) == _records(thread_runs[k])  # every sample's record, once
    assert _left(out) == [], "a process of the topology outlived its run"
    assert left_keys == []  # the run's own keys are gone; its samples' states stay
    # every sample went generating -> ... -> judged, each move by its owner (the executors' included)
    assert {s: c.count for s, c in counts.states.items() if c.count} == {"judged": 8 * 12}, counts
    assert ran == sum(int(r["unique"]) for r in _curve(out))  # the samples an executor ran: one per pair sent


def test_killed_actors_and_executors_change_nothing(thread_runs: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "baselines.grpo", *_args(out, "grpo.topology=redis", "grpo.actors=2", "grpo.executors=2")]
    proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "CODE_ENV_ACTOR_LEASE_S": "2"})  # fmt: skip
    killed: list[str] = []

    def killer() -> None:
        learner = psutil.Process(proc.pid)
        for role in ("baselines.topology actor", "code_env executor"):
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                curve = out / "curve.csv"
                rows = len(curve.read_text().splitlines()) - 1 if curve.exists() else 0
                victims = [c for c in learner.children(recursive=True) if role in _cmdline(c)]
                if rows >= (2 if "actor" in role else 4) and victims:
                    victims[0].kill()
                    killed.append(role)
                    break
                time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    stdout, _ = proc.communicate(timeout=600)
    t.join(timeout=10)
    assert proc.returncode == 0, stdout.decode(errors="replace")[-3000:]
    assert killed == ["baselines.topology actor", "code_env executor"], killed
    assert _curve(out) == _curve(thread_runs[1])
    assert _records(out) == _records(thread_runs[1])
    assert _left(out) == []


@pytest.mark.parametrize("persistent", [False, True], ids=["no-persistence", "aof"])
def test_a_redis_restart_mid_run_changes_nothing(thread_runs: dict[int, Path], tmp_path: Path, persistent: bool) -> None:
    out = tmp_path / "run"
    with redis_server(tmp_path / "redis", persistent=persistent) as server:
        argv = [sys.executable, "-m", "baselines.grpo", *_args(out, "grpo.topology=redis", f"grpo.redis_url={server.url}")]
        proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        restarted = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not restarted:
            curve = out / "curve.csv"
            if curve.exists() and len(curve.read_text().splitlines()) - 1 >= 3:
                server.restart(kill=True)  # SIGKILL: only what AOF (fsync always) holds comes back
                restarted.append(True)
            time.sleep(0.02)
        stdout, _ = proc.communicate(timeout=600)
        text = stdout.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert restarted and len(_curve(out)) == 8
    assert _curve(out) == _curve(thread_runs[1])  # nothing lost, nothing scored twice
    records = _records(out)
    if persistent:
        assert records == _records(thread_runs[1])
        assert "republished" not in text
    else:  # a step in flight when the keys were lost is made again: its records may be written twice
        assert sorted(set(records)) == _records(thread_runs[1])
        assert "redis lost the run's keys: republished" in text
    assert _left(out) == []


def test_the_lm_policy_in_the_redis_topology_is_a_clear_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert main(["--quiet", "--out", str(tmp_path / "run"), "--topology", "redis", "--model", str(model)]) == 2
    assert "grpo.topology = 'redis' runs the GRU policy" in capsys.readouterr().err
