"""The unprivileged suites, run end to end by a normal user: most users are not root, so the
pytest process itself, the sandbox's host side, its monitor, the temp dirs and the nsjail binary
are all a normal user's. As root (CI), this test copies the checkout into a directory uid 65534
owns (a git worktree's files need not be readable by others), and runs pytest there as that user,
with HOME and TMPDIR of its own, on tests/test_unprivileged.py and tests/test_nsjail_unprivileged.py.
Both files whole, no ``-k``: 2 to 3 minutes on two shared cores, most of it waiting out the verdict
programs' timeouts (the two verdict tests and the main job are 9 of 10 parts of it), about half a
minute of CPU. As a normal user it skips: those files then run directly, as that user.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox.errors import BackendUnavailableError

from ._nobody import NOBODY, ROOT, as_nobody, can_drop, copy_checkout

FILES = ["tests/test_unprivileged.py", "tests/test_nsjail_unprivileged.py"]
# The only skips a normal user may see in FILES: what needs root, or is run directly anyway.
USER_SKIPS = ("already a normal user: ", "compares with nsjail run as root, which needs root")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ROOT, reason=f"already a normal user: {' and '.join(FILES)} run directly as this user"),
    pytest.mark.skipif(can_drop() is not None, reason=str(can_drop())),
]


def _nsjail_here() -> bool:
    from sandbox._nsjail import find_nsjail

    try:
        find_nsjail()
    except BackendUnavailableError:
        return False
    return True


def summary_counts(stdout: str) -> dict[str, int]:
    """pytest's last line (``3 passed, 1 skipped in 2.00s``) as counts by outcome."""
    last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    counts = {word.rstrip("s") if word.startswith("error") else word: int(n)
              for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)\b", last)}  # fmt: skip
    return {k: counts.get(k, 0) for k in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}


@pytest.mark.parametrize(
    ("line", "counts"),
    [
        pytest.param("8 passed, 5 skipped in 122.93s (0:02:02)", (8, 0, 0, 5), id="passed-skipped"),
        pytest.param("1 failed, 2 passed, 1 error in 1.00s", (2, 1, 1, 0), id="failed-error"),
        pytest.param("2 errors in 0.10s", (0, 0, 2, 0), id="errors"),
        pytest.param("no tests ran in 0.01s", (0, 0, 0, 0), id="none"),
    ],
)
def test_the_summary_is_read_by_outcome(line: str, counts: tuple[int, int, int, int]) -> None:
    got = summary_counts(f"....\n{line}\n")
    assert (got["passed"], got["failed"], got["error"], got["skipped"]) == counts


def test_the_unprivileged_suites_pass_when_pytest_itself_runs_as_a_normal_user() -> None:
    top = Path(tempfile.mkdtemp(prefix="code-env-nobody-", dir="/tmp"))  # 0700
    try:
        (top / "home").mkdir()
        repo = copy_checkout(top)  # everything under ``top`` is uid 65534's now
        assert top.stat().st_uid == NOBODY and not top.stat().st_mode & 0o077
        out = as_nobody([sys.executable, "-m", "pytest", *FILES, "-q", "-rA", "-p", "no:cacheprovider"],
                        tmp=top / "home", timeout=900, cwd=repo)  # fmt: skip
    finally:
        shutil.rmtree(top, ignore_errors=True)
    tail = (out.stdout + out.stderr)[-4000:]
    assert out.returncode == 0, tail  # 5 (no test collected) is a failure too
    counts = summary_counts(out.stdout)
    assert counts["passed"] > 0 and counts["failed"] == counts["error"] == 0, (counts, tail)
    # each skip is one a normal user must see, so pytest really ran unprivileged; and none is
    # for want of the nsjail binary where root finds it
    skips = re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", out.stdout, re.M)
    assert skips and all(s.startswith(USER_SKIPS) for s in skips), (skips, tail)
    assert any(s.startswith("already a normal user: ") for s in skips), (skips, tail)
    passed = {f for f in FILES if re.search(rf"^PASSED {re.escape(f)}::", out.stdout, re.M)}
    assert passed == (set(FILES) if _nsjail_here() else {FILES[0]}), (passed, tail)
    if _nsjail_here():
        assert "nsjail backend unavailable" not in out.stdout, tail
