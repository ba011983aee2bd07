"""sandbox.RayExecutor on real Ray instances started here: the same results as a local Sandbox
on a few hundred programs (correct, failing, timing out, out of memory, printing a lot, looking
around), the Sandbox API and its errors, input and fetched files, the in-flight bound over
threads, the driver-side cache, ``executor="ray"`` wherever an executor is accepted; cancellation
(a deadline raised in the caller's thread, an asyncio cancellation, a ``cancelling()`` block's
cancel: the runs on the node are killed, checked from the host in ``/proc``, and the next run is
not starved); on a ``ray.cluster_utils.Cluster`` (a head
without CPUs and two worker nodes): a node removed mid-batch with every request answered exactly
once, then no node left (every request a ``sandbox_error``), then a new node taken into use."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import pytest
from pydantic import ValidationError

import code_env
import registry
from baselines.common import EnvSettings
from code_env import agrade_many, grading
from code_env.verl import compute_score_batch
from sandbox import (
    CANCELLED,
    BackendUnavailableError,
    Cancel,
    ExecutionResult,
    Limits,
    RayExecutor,
    RunRequest,
    UnknownBackendError,
    cancelling,
)

from ._rayenv import ray_environment
from .conftest import SECRET_VALUE, get_sandbox
from .test_cancellation import alarm

TASKS = registry.load("builtin")
BY_ID = {t.problem_id: t for t in TASKS}
# Fields that depend on timing or on where a run happened, not on the program.
NOT_COMPARED = {"execution_time_ms", "cpu_time_ms", "stdout_last_ms", "peak_memory_mb", "reruns", "rerun_reason", "node", "queued_ms"}


# -- without a Ray instance


def test_import_sandbox_and_code_env_import_no_ray() -> None:
    code = "import sys, sandbox, code_env; assert 'ray' not in sys.modules; sandbox.RayExecutor; assert 'ray' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"backend": "procss"}, UnknownBackendError, "did you mean 'process'"),
        ({"actors_per_node": 0}, ValueError, "actors_per_node: expected an int >= 1 or None, got 0"),
        ({"workers_per_actor": 1.5}, ValueError, "workers_per_actor: expected an int >= 1 or None, got 1.5"),
        ({"chunk_size": 0}, ValueError, "chunk_size: expected an int >= 1"),
        ({"max_in_flight_per_actor": 0}, ValueError, "max_in_flight_per_actor: expected an int >= 1, got 0"),
        ({"max_attempts": True}, ValueError, "max_attempts: expected an int >= 1, got True"),
        ({"limits": {"timeout_s": 1}}, TypeError, "limits: expected sandbox.Limits, got dict"),
        ({"allowed_packages": "numpy"}, TypeError, "allowed_packages: expected a list of package names, got a str"),
        ({"isolation": "none"}, ValueError, "isolation: expected 'full' or 'weak', got 'none'"),
        ({"start_timeout_s": 0}, ValueError, "start_timeout_s: expected a positive number of seconds, got 0"),
        ({"cache": "yes"}, TypeError, "cache: expected bool or sandbox.ResultCache, got str"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else None,
)
def test_bad_arguments_are_named_before_ray_starts(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RayExecutor(**kwargs)
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()  # (Ray reads its environment on import)


def test_resolve_executor_names_what_it_accepts() -> None:
    sb = get_sandbox("process")
    assert grading.resolve_executor(sb) is sb
    assert grading.resolve_executor(None) is grading.resolve_executor("local") is grading.shared_sandbox("auto")
    with pytest.raises(ValueError, match=r"executor: expected 'local', 'ray', a Redis URL \(redis://HOST:PORT/DB\) or an object with run_many .*got 'rai'; did you mean 'ray'"):
        grading.resolve_executor("rai")
    with pytest.raises(TypeError, match="executor: expected 'local', 'ray', a Redis URL or an object with run_many, got int"):
        grading.resolve_executor(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="did you mean 'ray'"):
        gym.make("CodeExec-v0", executor="Ray")


@pytest.mark.parametrize(
    ("workers", "pending", "slots", "chunk"),
    [(2, 1000, 2, 8), (32, 512, 32, 16), (32, 5000, 32, 128), (2, 3, 4, 1), (2, 9, 4, 3), (1, 0, 0, 1)],
)
def test_default_chunks_fill_every_slot_and_cap_at_four_runs_per_worker(workers: int, pending: int, slots: int,
                                                                       chunk: int) -> None:  # fmt: skip
    from sandbox._ray import chunk_for

    assert chunk_for(workers, pending, slots) == chunk


def test_node_is_on_the_wire_and_none_for_local_runs() -> None:
    res = ExecutionResult(trace_id="t", exit_code=0, node="abc123")
    assert ExecutionResult.from_wire(json.loads(res.model_dump_json())) == res
    old = json.loads(res.model_dump_json())
    del old["node"]  # a log written before the field existed
    assert ExecutionResult.from_wire(old).node is None
    assert get_sandbox("process").run("print(1)").node is None


def test_baseline_configs_can_name_ray() -> None:
    env = EnvSettings(executor="ray", ray_address="10.0.0.1:6379")
    assert (env.executor, env.ray_address) == ("ray", "10.0.0.1:6379")
    assert EnvSettings().ray_address is None
    with pytest.raises(ValidationError, match="'local' or 'ray'"):
        EnvSettings(executor="cluster")  # type: ignore[arg-type]


# -- a local Ray instance


def programs() -> list[RunRequest]:
    """A few hundred programs of every kind a sandbox must judge, each with its own output."""
    quick = Limits(timeout_s=20, memory_mb=256)
    kinds = [
        ("correct", "print(sum(range({i})))", "", quick),
        ("stdin", "import sys\nprint(sys.stdin.read()[::-1])", "line {i}\n", quick),
        ("exception", "def f():\n    raise ValueError({i})\nf()", "", quick),
        ("exit", "import sys\nprint({i})\nsys.exit({i} % 7)", "", quick),
        ("syntax", "def f(:\n    return {i}", "", quick),
        ("stderr", "import sys\nprint('err', {i}, file=sys.stderr)", "", quick),
        ("a lot", "print('x' * 300_000)\nprint({i})", "", quick.model_copy(update={"max_output_bytes": 1000})),
        ("random", "import random\nprint(random.random(), {i})", "", quick),
        ("look around", "import os\nprint(sorted(os.environ.items()), os.getcwd(), sorted(os.listdir('.')), {i})", "", quick),
        ("abort", "import os\nprint({i}, flush=True)\nos.abort()", "", quick),
    ]
    slow = [
        ("sleeps", "import time\nprint({i}, flush=True)\ntime.sleep(30)", "", Limits(timeout_s=0.5)),
        ("spins", "print({i}, flush=True)\nwhile True:\n    pass", "", Limits(timeout_s=20, cpu_time_s=0.3)),
        ("oom", "print({i}, flush=True)\nx = bytearray(400 * 1024 * 1024)\nprint(len(x))", "", Limits(memory_mb=64)),
    ]
    reqs = [RunRequest(code=code.format(i=i), stdin=stdin.format(i=i), limits=lim, trace_id=f"{name}/{i}")
            for i in range(26) for name, code, stdin, lim in kinds]  # fmt: skip
    reqs += [RunRequest(code=code.format(i=i), stdin=stdin.format(i=i), limits=lim, trace_id=f"{name}/{i}")
             for i in range(6) for name, code, stdin, lim in slow]  # fmt: skip
    return reqs


def compared(r: ExecutionResult) -> dict[str, Any]:
    return r.model_dump(exclude=NOT_COMPARED)


LONG = Limits(timeout_s=60.0)


def sleeper(token: str) -> str:
    """A program that holds a file named after ``token`` open (how the host finds its process,
    whatever namespaces it is in) and sleeps for a minute under a one-minute limit: were it not
    killed, it would hold its worker, and the next run would wait, for a minute."""
    return f"f = open('held-{token}', 'w')\nimport time\ntime.sleep(60)\nprint(input())\n"


def holders(token: str) -> list[int]:
    """The processes of this machine with a file of ``token`` open, from ``/proc`` (as root: the
    sandbox's runs are other uids, in namespaces of their own; an open file's link names it)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                if f"held-{token}" in os.readlink(f"/proc/{entry.name}/fd/{fd}"):
                    pids.append(int(entry.name))
                    break
            except OSError:
                continue
    return pids


class Watch:
    """Counts, in a thread, the processes holding ``token``'s file: the most seen at once."""

    def __init__(self, token: str) -> None:
        self.token, self.most = token, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, len(holders(self.token)))
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def killed_and_not_starved(ex: RayExecutor, token: str, seen: int, since: float) -> None:
    """The interrupted batch's programs were running (``seen``), none is left (within 20 s: a run
    left alive would be there for a minute), the next correct program runs on a free worker, the
    sleepers' runs not begun never began, and the executor holds no chunk in flight."""
    assert seen >= 1, "no sleeper was seen running: the check from /proc sees nothing here"
    deadline = time.monotonic() + 20
    while holders(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert holders(token) == [], "a sleeper outlived its cancelled batch"
    res = ex.run("print(input())", stdin="ok\n")
    assert (res.stdout, res.exit_code, res.sandbox_error) == ("ok\n", 0, None)
    assert time.monotonic() - since < 30, "the next run waited for the sleepers (not killed)"
    assert holders(token) == [], "a sleeper not begun began after its batch was cancelled"
    assert all(a.in_flight == 0 for a in ex._actors)


@pytest.fixture(scope="class")
def local_ex() -> Iterator[RayExecutor]:
    """A local Ray instance started by the executor, for one class of tests."""
    with ray_environment():
        import ray

        try:
            with RayExecutor() as ex:
                yield ex
                for shared in list(grading._shared_ray.values()):  # executor="ray" made them
                    shared.close()
                grading._shared_ray.clear()
        finally:
            assert not ray.is_initialized()  # the last executor of the process shut its Ray down


@pytest.mark.slow
@pytest.mark.usefixtures("local_ex")
class TestLocalRay:
    @pytest.fixture
    def ex(self, local_ex: RayExecutor) -> RayExecutor:
        return local_ex

    def test_same_results_as_a_local_sandbox(self, ex: RayExecutor) -> None:
        reqs = programs()
        assert len(reqs) >= 250
        local = get_sandbox("process").run_many(reqs)
        remote = ex.run_many(reqs)
        assert [r.trace_id for r in remote] == [r.trace_id for r in reqs]
        for lo, far in zip(local, remote, strict=True):
            assert compared(far) == compared(lo), far.trace_id
        assert {r.node for r in remote} == set(ex.nodes) and all(r.node is None for r in local)
        kinds: dict[str, ExecutionResult] = {}
        for r in remote:
            kinds.setdefault((r.trace_id or "").split("/")[0], r)
        assert kinds["correct"].ok and kinds["stdin"].stdout.startswith("\n0 enil")
        assert kinds["a lot"].stdout_truncated and kinds["abort"].signal_name == "SIGABRT"
        assert kinds["sleeps"].timeout_kind == "wall" and kinds["spins"].timeout_kind == "cpu" and kinds["oom"].oom
        assert all(SECRET_VALUE not in r.stdout for r in remote)
        assert not any(r.sandbox_error for r in remote)

    def test_run_and_errors_as_sandbox(self, ex: RayExecutor) -> None:
        sb = get_sandbox("process")
        res = ex.run("print(input()[::-1])", stdin="abc", trace_id="p/0/0")
        assert (res.trace_id, res.stdout, res.ok, res.backend) == ("p/0/0", "cba\n", True, "process")
        assert res.node in ex.nodes
        assert ex.run("print(1)").trace_id.startswith("run/")  # type: ignore[union-attr]
        bad: list[tuple[Any, ...]] = [
            ("run", (b"print(1)",), {}),
            ("run", ("print(1)\x00",), {}),
            ("run", ("print(1)",), {"limits": "fast"}),
            ("run_many", (["print(1)", 42],), {}),
            ("run_many", ([{"code": "print(1)", "stdin": 3}],), {}),
            ("run_many", ([RunRequest(code="x" * 100)],), {"limits": Limits(max_code_bytes=10)}),
        ]
        for method, args, kwargs in bad:
            with pytest.raises((TypeError, ValueError)) as local:
                getattr(sb, method)(*args, **kwargs)
            with pytest.raises(local.type, match="^" + re.escape(str(local.value)) + "$"):
                getattr(ex, method)(*args, **kwargs)
        assert ex.run_many([]) == []

    def test_a_sandbox_that_cannot_start_is_named_with_its_node(self, ex: RayExecutor) -> None:
        with pytest.raises(BackendUnavailableError, match=r"no sandbox actor could start: node [0-9a-f]+: ValueError: allowed package 'no_such_package_xyz' is not installed"):
            RayExecutor(allowed_packages=["no_such_package_xyz"])
        assert ex.run("print(1)").ok  # the failed executor left the process's Ray as it was

    def test_threads_share_the_in_flight_bound(self, ex: RayExecutor) -> None:
        out: dict[int, list[ExecutionResult]] = {}

        def work(k: int) -> None:
            out[k] = ex.run_many([f"print({k} * 1000 + {i})" for i in range(24)])

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(4):
            assert [r.stdout for r in out[k]] == [f"{k * 1000 + i}\n" for i in range(24)]
        assert 1 <= ex.stats["peak_in_flight"] <= ex.max_in_flight_per_actor

    def test_a_stuck_program_holds_up_only_its_own_chunk(self, ex: RayExecutor) -> None:
        from sandbox._ray import chunk_for

        reqs = [RunRequest(code="import time\ntime.sleep(60)", limits=Limits(timeout_s=5))]
        reqs += [RunRequest(code=f"print({i})") for i in range(40)]
        own_chunk = chunk_for(ex.workers, len(reqs), len(ex.nodes) * ex.max_in_flight_per_actor)
        before = ex.stats["answered"]
        out: list[list[ExecutionResult]] = []
        batch = threading.Thread(target=lambda: out.append(ex.run_many(reqs)))
        batch.start()
        others_done = False
        while batch.is_alive() and not others_done:  # every other chunk comes back, and nothing of its own
            others_done = ex.stats["answered"] - before == len(reqs) - own_chunk
            time.sleep(0.01)
        batch.join()
        assert others_done, "the other chunks waited for the stuck program"
        (results,) = out
        assert results[0].timeout_hit and [r.stdout for r in results[1:]] == [f"{i}\n" for i in range(40)]

    def test_a_second_executor_shares_ray_and_caches_on_the_driver(self, ex: RayExecutor) -> None:
        with RayExecutor(workers_per_actor=1, chunk_size=1, cache=True) as small:
            assert small.workers == len(small.nodes)
            first = small.run_many(["print(7)", "print(8)"])
            again = small.run_many(["print(7)", "print(8)"])
            assert [r.cached for r in first] == [False, False] and [r.cached for r in again] == [True, True]
            assert [compared(r) | {"cached": False, "trace_id": None} for r in again] == \
                [compared(r) | {"trace_id": None} for r in first]  # fmt: skip
            assert [r.node for r in again] == [r.node for r in first]
            assert small.stats["cache_hits"] == 2 and small.stats["chunks"] == 2
            read = "print(open('in.txt').read())"  # the input files are in the cache's key
            assert [small.run(read, files={"in.txt": t}).stdout for t in ("a", "b", "a")] == ["a\n", "b\n", "a\n"]
            assert small.stats["cache_hits"] == 3
        assert ex.run("print(1)").ok  # the first executor's Ray is still up

    def test_files_go_in_and_come_back(self, ex: RayExecutor) -> None:
        code = ("data = open('in/a.txt').read() + open('b.bin', 'rb').read().hex()\nprint(data)\n"
                "import os\nos.makedirs('out/sub')\nopen('out/sub/r.txt', 'w').write(data[::-1])\n")  # fmt: skip
        res = ex.run(code, files={"in/a.txt": "abc", "b.bin": b"\x00\xff"}, fetch_files=["out", "missing"])
        assert (res.stdout, res.files, res.sandbox_error) == ("abc00ff\n", {"out/sub/r.txt": b"ff00cba"}, None)
        assert res.node in ex.nodes
        again = ex.run_many([RunRequest(code=code, files={"in/a.txt": b"x", "b.bin": b""}, fetch_files=["out/sub/r.txt"])])
        assert [(r.stdout, r.files) for r in again] == [("x\n", {"out/sub/r.txt": b"x"})]
        with pytest.raises(ValueError, match=re.escape("files '../x': a path may not hold")):  # checked on the driver
            ex.run("print(1)", files={"../x": "no"})
        with pytest.raises(TypeError, match="fetch_files: expected a list of paths, got one str"):
            ex.run("print(1)", fetch_files="out")

    def test_a_deadline_in_the_callers_thread_kills_the_runs_on_the_node(self, ex: RayExecutor) -> None:
        # as verl's NaiveRewardManager with compute_score_timeout: a batch of programs that hang;
        # more than the workers and the in-flight chunks hold, so that some wait on the driver,
        # some in the actor's sandbox, some run
        token = secrets.token_hex(8)
        batch = [RunRequest(code=sleeper(token), stdin="x\n", limits=LONG)] * (3 * ex.workers + 3)
        watch = Watch(token)
        with pytest.raises(TimeoutError, match="timed out after 1"), alarm(1.0):
            ex.run_many(batch)
        killed_and_not_starved(ex, token, watch.stop(), time.monotonic())
        # the same for a single run
        watch = Watch(token)
        with pytest.raises(TimeoutError), alarm(1.0):
            ex.run(sleeper(token), stdin="x\n", limits=LONG)
        killed_and_not_starved(ex, token, watch.stop(), time.monotonic())

    def test_an_asyncio_cancellation_kills_the_runs_on_the_node(self, ex: RayExecutor) -> None:
        token = secrets.token_hex(8)
        echo = registry.Task(
            problem_id="cancel/echo", prompt="Print the input.", kind="stdio", reference_solution="print(input())\n",
            timeout_s=60.0, public_tests=[registry.TestCase(stdin=f"{i}\n", expected_stdout=f"{i}\n") for i in range(3)],
        )  # fmt: skip

        async def main(interrupted: Callable[[], Any], error: type[BaseException]) -> None:
            watch = Watch(token)
            with pytest.raises(error):
                await interrupted()
            killed_and_not_starved(ex, token, watch.stop(), time.monotonic())

        async def deadline() -> None:
            await asyncio.wait_for(ex.arun_many([{"code": sleeper(token), "stdin": "x\n", "limits": LONG}] * 5), timeout=1.0)

        async def grade_cancelled() -> None:  # a grade's batch, cancelled through its cancelling() block
            task = asyncio.ensure_future(agrade_many([(echo, sleeper(token))], sandbox=ex))
            await asyncio.sleep(1.0)
            task.cancel()
            await task

        asyncio.run(main(deadline, asyncio.TimeoutError))
        asyncio.run(main(grade_cancelled, asyncio.CancelledError))
        assert (asyncio.run(ex.arun("print(input())", stdin="ok\n"))).stdout == "ok\n"

    def test_a_cancelling_block_cancels_from_another_thread(self, ex: RayExecutor) -> None:
        token = secrets.token_hex(8)
        cancel = Cancel()
        out: list[list[ExecutionResult]] = []

        def work() -> None:
            with cancelling(cancel):
                out.append(ex.run_many([RunRequest(code=sleeper(token), stdin="x\n", limits=LONG, trace_id=f"c/{i}")
                                        for i in range(2 * ex.workers + 3)]))  # fmt: skip

        watch = Watch(token)
        thread = threading.Thread(target=work)
        thread.start()
        deadline = time.monotonic() + 30
        while not holders(token) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        cancel.cancel()
        thread.join()
        killed_and_not_starved(ex, token, watch.stop(), time.monotonic())
        (results,) = out  # every request answered, in order, as a local sandbox's: never scored
        assert [r.trace_id for r in results] == [f"c/{i}" for i in range(2 * ex.workers + 3)]
        assert all(r.sandbox_error == CANCELLED and not r.ok for r in results)

    def test_executor_ray_wherever_an_executor_is_accepted(self, ex: RayExecutor) -> None:
        sb = get_sandbox("process")
        tasks = [BY_ID["builtin/sum-of-evens"], BY_ID["builtin/fizzbuzz-line"]]
        items = [(t, t.reference_solution) for t in tasks] + [(t, "print(42)\n") for t in tasks]
        local = [(g.reward, g.breakdown) for g in code_env.grade_many(items, sandbox=sb)]
        assert [(g.reward, g.breakdown) for g in code_env.grade_many(items, sandbox="ray")] == local
        assert [(g.reward, g.breakdown) for g in code_env.grade_many(items, sandbox=ex)] == local
        assert code_env.grade(*items[0], sandbox="ray").reward == 1.0
        assert [e.reward for e in code_env.evaluate(items, executor="ray")] == [r for r, _ in local]
        shared = grading.resolve_executor("ray")
        assert isinstance(shared, RayExecutor) and shared is grading.resolve_executor("ray")

        env = gym.make("CodeExec-v0", tasks=tasks, executor="ray")
        assert env.unwrapped.executor is shared  # type: ignore[attr-defined]
        env.reset(seed=0, options={"problem_id": tasks[0].problem_id})
        assert env.step(tasks[0].reference_solution)[1] == 1.0
        env.close()

        rewards = {}
        for name, executor in (("local", sb), ("ray", "ray")):
            envs = gym.make_vec("CodeExec-v0", num_envs=3, tasks=tasks, executor=executor)
            _, info = envs.reset(seed=3)
            actions = tuple(BY_ID[p].reference_solution if k != 1 else "print(42)\n" for k, p in enumerate(info["problem_id"]))
            rewards[name] = envs.step(actions)[1].tolist()
            envs.close()
        assert rewards["ray"] == rewards["local"] and rewards["ray"].count(1.0) == 2

        tokens = gym.make("CodeExecTokens-v0", executor="ray", n_tasks=5)
        assert tokens.unwrapped.executor is shared  # type: ignore[attr-defined]
        tokens.close()
        prompts, completions, ids = [t.prompt for t, _ in items], [c for _, c in items], [t.problem_id for t, _ in items]
        trl = {name: code_env.TRLReward(tasks, sandbox=executor, log=False)(prompts=prompts, completions=completions, problem_id=ids)
               for name, executor in (("local", sb), ("ray", "ray"))}  # fmt: skip
        assert trl["ray"] == trl["local"] and 1.0 in trl["ray"]
        verl = {name: compute_score_batch(["builtin"] * len(items), completions, ids, **{key: executor})
                for name, key, executor in (("local", "sandbox", sb), ("ray", "executor", "ray"))}  # fmt: skip
        assert verl["ray"] == verl["local"] and 1.0 in verl["ray"]


# -- a cluster: a head without CPUs, two worker nodes


@pytest.fixture(scope="class")
def cluster() -> Iterator[Any]:
    with ray_environment():
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=1)
            yield cluster
        finally:
            cluster.shutdown()
    assert not ray.is_initialized()


@pytest.fixture(scope="class")
def cluster_ex(cluster: Any) -> Iterator[RayExecutor]:
    with RayExecutor(cluster.address) as ex:
        yield ex


@pytest.mark.slow
class TestCluster:
    @pytest.fixture
    def ex(self, cluster_ex: RayExecutor) -> RayExecutor:
        return cluster_ex

    def test_a_node_removed_mid_batch_loses_and_duplicates_nothing(self, cluster: Any, ex: RayExecutor) -> None:
        first, second = cluster.worker_nodes
        assert set(ex.nodes) == {first.node_id, second.node_id}  # none on the head: it has no CPUs
        reqs = [RunRequest(code=f"import time\ntime.sleep(0.2)\nprint({i})", trace_id=f"t/{i}") for i in range(36)]
        out: list[list[ExecutionResult]] = []
        batch = threading.Thread(target=lambda: out.append(ex.run_many(reqs)))
        batch.start()
        deadline = time.monotonic() + 120
        while ex.stats["chunks_done"] < 2 and time.monotonic() < deadline:  # chunks have come back
            time.sleep(0.02)
        assert batch.is_alive(), "the batch ended before the node could be removed"
        cluster.remove_node(second)
        batch.join()
        (results,) = out
        assert [r.trace_id for r in results] == [f"t/{i}" for i in range(36)]  # each exactly once, in order
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(36)]
        assert not any(r.sandbox_error for r in results)
        assert first.node_id in {r.node for r in results} <= {first.node_id, second.node_id}
        assert ex.stats["actors_lost"] == 1 and ex.stats["chunks_retried"] >= 1
        assert set(ex.nodes) == {first.node_id}

    def test_no_node_left_is_a_sandbox_error_then_a_new_node_is_used(self, cluster: Any, ex: RayExecutor) -> None:
        for node in list(cluster.worker_nodes):
            cluster.remove_node(node)
        before = ex.stats["unplaceable"]
        results = ex.run_many([RunRequest(code=f"print({i})", trace_id=f"u/{i}") for i in range(5)])
        assert [r.trace_id for r in results] == [f"u/{i}" for i in range(5)]
        for r in results:
            assert r.sandbox_error is not None and r.sandbox_error.startswith("ray: ") and not r.ok
            assert "no live sandbox actor on any Ray node" in r.sandbox_error
            assert r.exit_code is None and r.stdout == ""
        assert ex.stats["unplaceable"] - before == 5
        assert ex.nodes == {}
        fresh = cluster.add_node(num_cpus=1)
        results = ex.run_many([f"print({i})" for i in range(4)])
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
        assert {r.node for r in results} == {fresh.node_id}
