"""Shared fixtures: one sandbox per backend for the whole session, and a containment check that
runs after every test that uses one (no process of a run survives, the test process is alive)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import baselines  # noqa: F401  (first: it pins torch's CPU code paths before any test imports torch)
from sandbox import ExecutionResult, RunRequest, Sandbox, _host
from sandbox._host import uid_processes

SECRET_NAME = "CODE_ENV_TEST_SECRET"
SECRET_VALUE = "sk-test-5ecr3t-b5f1e9c07d4e4f6c"

# The secret is in our environment before any sandbox worker starts: it must never reach a run.
os.environ[SECRET_NAME] = SECRET_VALUE
# A private temp dir for this test run: other processes of a shared machine come and go in /tmp.
if not os.environ.get("CODE_ENV_TEST_TMPDIR"):
    os.environ["CODE_ENV_TEST_TMPDIR"] = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="code-env-tests-")
    tempfile.tempdir = None
# task files validated on load (registry.validate) cache their admission there, never in the home
os.environ.setdefault("CODE_ENV_CACHE_DIR", os.path.join(os.environ["CODE_ENV_TEST_TMPDIR"], "cache"))
# Under pytest-xdist (scripts/test.sh) each worker gets a temp dir of its own inside that one, so a
# test that compares what a temp dir holds before and after sees only its own worker's files. Its
# name is short: Ray puts its AF_UNIX sockets (at most 107 bytes of path) in a session dir under it.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("CODE_ENV_TEST_WORKER") != _worker:
    os.environ["CODE_ENV_TEST_WORKER"] = _worker
    os.environ["TMPDIR"] = os.path.join(os.environ["CODE_ENV_TEST_TMPDIR"], _worker)
    os.makedirs(os.environ["TMPDIR"], mode=0o700, exist_ok=True)
    tempfile.tempdir = None

BACKENDS = [
    pytest.param("process", id="process"),
    pytest.param("nsjail", id="nsjail", marks=pytest.mark.nsjail),
]

_sandboxes: dict[str, Sandbox] = {}


def get_sandbox(name: str) -> Sandbox:
    if name not in _sandboxes:
        _sandboxes[name] = Sandbox(backend=name, workers=2)
    return _sandboxes[name]


class CountingRunner:
    """The real process sandbox, counting the batches (their sizes) it is handed: any object with
    ``run_many`` is a runner."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def run_many(self, requests: list[RunRequest]) -> list[ExecutionResult]:
        self.batches.append(len(requests))
        return get_sandbox("process").run_many(requests)


REPO = Path(__file__).resolve().parents[1]
WATCHED_DIRS = [Path("/tmp"), Path("/root"), Path("/etc"), Path("/home"), REPO, REPO / "tests", REPO / "sandbox"]


# the sandboxes' own (host-side) temp dirs and pytest's come and go with them
OURS = ("pytest-of-", "code-env-root-", "code-env-work-", "code-env-nsjail-", "code-env-uids-", "code-env-nobody-",
        "nsjail.")  # nsjail as a normal user keeps /tmp/nsjail.<uid>.root and .tmp of its own


def run_uid(uid: int) -> bool:
    """Could a run own a file of this uid? As root, runs have the sandbox's private uids; as a
    normal user, the user's own (other processes of the machine are not our business)."""
    if os.geteuid() == 0:
        return _host.UID_BASE <= uid < _host.UID_BASE + _host.UID_SPAN
    return uid == os.geteuid()


def host_files() -> set[str]:
    """What a run could have written in the places it must not write to (names only; cheap
    enough for every test)."""
    seen: set[str] = set()
    for d in WATCHED_DIRS:
        try:
            for p in d.iterdir():
                if not p.name.startswith(OURS) and run_uid(p.lstat().st_uid):
                    seen.add(str(p))
        except OSError:
            pass
    return seen


@pytest.fixture(params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    yield from watched(get_sandbox(request.param))


def watched(sandbox: Sandbox) -> Iterator[Sandbox]:
    """A fixture's body: ``sandbox`` for one test, then the host-side checks (nothing of a run
    alive, no file outside the work dir)."""
    before = host_files()
    yield sandbox
    assert_contained(sandbox)
    appeared = host_files() - before
    assert not appeared, f"files appeared outside the work dir: {sorted(appeared)}"


@contextlib.contextmanager
def loopback_listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that this test started: its port, for a run to try. After the
    block, nothing reached it (a connection that did would wait in its backlog)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.setblocking(False)
        yield listener.getsockname()[1]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


SLOT_PROCESSES = 5  # the waiter, the worker, the template, a waiting child (and its init)


def assert_contained(sandbox: Sandbox) -> None:
    """Nothing a run started is still alive, and we have no zombie children."""
    waiting = set(sandbox.waiting_pids())  # set up for the next run, not left over from the last
    for uid in sandbox.uids:
        left = [p for p in uid_processes(uid) if p not in waiting]
        assert not left, f"processes of sandbox uid {uid} outlived their run: {left}"
    if sandbox.backend_name == "process":  # as a normal user, runs have our uid: count instead
        # each slot's waiter (the process the backend started; its only child the worker): taken
        # from the slot, not as a worker's parent, since a slot being replaced has a waiter and no
        # worker yet (its parent would be this process, and its tree every sandbox of ours)
        for slot in sandbox._backend._slots:  # type: ignore[union-attr]
            proc = slot.proc
            if proc is None:
                continue
            try:
                waiter = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                continue
            # a run's last process may still be exiting: the kernel frees its namespaces' files as
            # it exits (a million hard links take seconds on a loaded machine); it must be gone soon
            deadline = time.monotonic() + 30
            while True:
                try:
                    tree = [waiter, *waiter.children(recursive=True)]
                except psutil.NoSuchProcess:  # the slot is being replaced: its old tree is gone
                    tree = []
                if len(tree) <= SLOT_PROCESSES or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert len(tree) <= SLOT_PROCESSES, f"a slot holds more than its own processes: {tree}"
    zombies = [c.pid for c in psutil.Process().children(recursive=True) if _status(c) == psutil.STATUS_ZOMBIE]
    assert not zombies, f"zombie children: {zombies}"


def _status(p: psutil.Process) -> str | None:
    """A child's status, or None when it was reaped between the listing and the reading (a worker
    reaps its runs on its own time: such a child is gone, not a zombie)."""
    try:
        return p.status()
    except psutil.NoSuchProcess:
        return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for s in _sandboxes.values():
        s.close()
    _sandboxes.clear()


@pytest.fixture
def nobody_tmp() -> Iterator[Path]:
    """A scratch directory the normal user of ``tests._nobody.as_user`` owns (uid 65534 as root,
    else ourselves), outside our own private TMPDIR; removed afterwards."""
    from ._nobody import USER_UID

    d = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))
    if os.geteuid() == 0:
        os.chown(d, USER_UID, USER_UID)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# pytest-xdist's groups (scripts/test.sh runs ``pytest -n N --dist loadgroup``): the tests of one
# group go to one worker as one unit, and run one after another, never beside each other. Keys are
# node id prefixes (a module, or one test in it); a test takes the group of its longest matching
# key. They are given to xdist's scheduler here, by node id, rather than as ``xdist_group`` marks:
# with pytest 9.2, xdist (3.8) no longer sees the marks (it renames the node ids, and pytest no
# longer lets it: pytest-dev/pytest-xdist#1386), and the tests are silently scattered.
HOST = "host"  # they measure the host's counters, load it on purpose, or run as uid 65534
XDIST_GROUPS = {
    # host-side memory counters (/proc/meminfo: Shmem, PageTables, MemAvailable) and cgroup charges:
    # another such test's attack or memory bomb beside them moves the numbers they bound
    "tests/test_memory_outside_rss.py": HOST,
    "tests/test_cgroup_delegation.py": HOST,
    # allocates 1 GiB and forks 50 processes on the host between two readings, and runs as uid 65534
    "tests/test_sysinfo.py": HOST,
    # they make every core busy on purpose (their point is verdicts under load): not beside the
    # measurements above, nor beside each other (the soak beside them counts only its own process)
    "tests/test_load.py::test_correct_programs_never_time_out_under_2x_oversubscription": HOST,
    "tests/test_cli.py::test_the_demos_memory_bomb_is_oom_on_a_busy_machine": HOST,
    # uid 65534: its processes are one uid for every run of every pytest run as nobody, so two of
    # these at once would see each other's processes as leftovers (and they allocate like the above)
    "tests/test_as_normal_user.py": HOST,
    "tests/test_unprivileged.py": HOST,
    "tests/test_nsjail_unprivileged.py": HOST,
    "tests/test_crosstalk.py::test_the_channels_stay_closed_for_a_normal_user": HOST,
    "tests/test_run_files.py::test_files_go_in_and_come_back_as_a_normal_user": HOST,
    "tests/test_agent.py::test_the_scripted_episode_as_a_normal_user": HOST,
    "tests/test_interpreter.py::test_sessions_as_a_normal_user": HOST,
    # an expensive module- or class-scoped fixture (a training run, Ray clusters, the nsjail
    # walker): one worker sets it up once, instead of every worker once
    "tests/test_grpo.py": "test_grpo",
    "tests/test_sb3_ppo.py": "test_sb3_ppo",
    "tests/test_ray_executor.py": "test_ray_executor",
    "tests/test_rllib.py": "test_ray_executor",  # (a Ray instance of its own: not beside the one above)
    "tests/test_nsjail_isolation.py": "test_nsjail_isolation",
    "tests/test_logtools.py": "test_logtools",
    "tests/test_redis_executor.py": "test_redis_executor",  # its executors, started once
    "tests/test_grpo_topology.py": "test_grpo_topology",  # the thread topology's runs, made once
    "tests/test_visible.py": "test_visible",
}


# The longest tests that need no fixture of their module, started first on the workers (their
# order in a run without workers is left as it is): begun last, one of them would keep one worker
# busy long after the other has run out of tests.
XDIST_FIRST = (
    "tests/test_load.py::test_soak_5000_runs_with_workers_killed_mid_run",
    "tests/test_seccomp.py::test_stdlib_suite[test_threading]",
    "tests/test_seccomp.py::test_stdlib_suite[test_datetime]",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts its collection alike
        items.sort(key=lambda item: item.nodeid not in XDIST_FIRST)  # stable: the rest keep their order


def xdist_group(nodeid: str) -> str | None:
    keys = [k for k in XDIST_GROUPS if nodeid == k or nodeid.startswith((k + "::", k + "["))]
    return XDIST_GROUPS[max(keys, key=len)] if keys else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups of ``XDIST_GROUPS`` (and of any ``xdist_group`` mark
    xdist does see); tests in no group are spread one by one, as by ``--dist load``."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class TableGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = xdist_group(nodeid)
            return f"group:{group}" if group else super()._split_scope(nodeid)

    return TableGroupScheduling(config, log)
