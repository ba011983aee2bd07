"""Files into a run and out of it: ``Sandbox.run(files=..., fetch_files=...)`` (SandboxFusion's
``files`` and ``fetch_files``). Input files are written to the run's own work dir before the program
starts and are the run's to change; the files asked for come back once every process of the run
is gone, read by the run's init (or, in weak mode, the worker) with no link followed, from the
run's own filesystem only. Checked from the host: the bytes that come back, what does not come
back (a link to a host file, a directory link, a fifo, a path that climbs out), the next run's
fresh work dir; on both backends, as root and as a normal user (``tests._nobody.as_user``), and in
weak mode."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest

from sandbox import Limits, Sandbox
from sandbox.errors import LanguageUnavailableError

from ._nobody import ROOT, as_user, can_drop

# conftest's, spelled here: a normal user's run imports this file alone (``as_user``)
BACKENDS = [pytest.param("process", id="process"), pytest.param("nsjail", id="nsjail", marks=pytest.mark.nsjail)]

PROGRAM = """\
import os
print(open("data/in.txt").read())
import helper
print(helper.X)
with open("data/in.txt", "a") as f:  # the run's to change
    f.write("+run")
os.makedirs("res/sub")
with open("res/sub/b.bin", "wb") as f:
    f.write(bytes(range(256)))
with open("res/a.txt", "w") as f:
    f.write("a")
os.symlink("/etc/passwd", "res/link")  # a link to a host file: never followed
os.symlink("/", "root")  # nor a link to a directory on the way
try:
    os.mkfifo("res/fifo")  # nor a fifo opened (it would block)
except OSError:
    pass
"""
FETCH = ["data/in.txt", "res", "root/etc/passwd", "root", "missing.txt", "res/link", "res/sub/b.bin"]
EXPECTED = {"data/in.txt": b"hello+run", "res/a.txt": b"a", "res/sub/b.bin": bytes(range(256))}


def roundtrip(backend: str, isolation: str = "full") -> dict[str, Any]:
    """The program above with two input files, then a second run that lists its work dir."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # weak mode's warning, asked for
        sb = Sandbox(backend=backend, workers=1, isolation=isolation)  # type: ignore[arg-type]
    with sb:
        r = sb.run(PROGRAM, files={"data/in.txt": "hello", "helper.py": b"X = 42\n"}, fetch_files=FETCH)
        after = sb.run("import os\nprint(sorted(os.listdir('.')))", fetch_files=["."])
    return {"exit": r.exit_code, "stdout": r.stdout, "stderr": r.stderr, "error": r.sandbox_error,
            "files": {k: base64.b64encode(v).decode() for k, v in r.files.items()},
            "after_stdout": after.stdout, "after_files": sorted(after.files)}  # fmt: skip


def check(out: dict[str, Any]) -> None:
    assert out["error"] is None and out["exit"] == 0, out
    assert out["stdout"] == "hello\n42\n", out
    assert {k: base64.b64decode(v) for k, v in out["files"].items()} == EXPECTED
    # the next run has a fresh work dir: nothing of the one before, only its own program
    assert out["after_stdout"] == "['solution.py']\n", out
    assert out["after_files"] == ["solution.py"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_go_in_and_come_back(backend: str) -> None:
    check(roundtrip(backend))


def test_files_go_in_and_come_back_in_weak_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # weak mode's work dirs are under TMPDIR, which a run (as root: another uid) must be able to
    # pass through by path (its imports); this test run's own TMPDIR is private (0700)
    parent = tempfile.mkdtemp(prefix="code-env-work-", dir="/tmp")
    os.chmod(parent, 0o711)
    monkeypatch.setattr(tempfile, "tempdir", parent)
    try:
        check(roundtrip("process", "weak"))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="already a normal user: the tests above run as this user")
@pytest.mark.skipif(can_drop() is not None, reason=str(can_drop()))
@pytest.mark.parametrize(("backend", "isolation"), [
    pytest.param("process", "full", id="process"),
    pytest.param("process", "weak", id="process-weak"),
    pytest.param("nsjail", "full", id="nsjail", marks=pytest.mark.nsjail),
])  # fmt: skip
def test_files_go_in_and_come_back_as_a_normal_user(backend: str, isolation: str, nobody_tmp: Path) -> None:
    code = ("import json\nfrom tests.test_run_files import roundtrip\n"
            f"print(json.dumps(roundtrip({backend!r}, {isolation!r})))")  # fmt: skip
    out = as_user([sys.executable, "-c", code], tmp=nobody_tmp, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    check(json.loads(out.stdout.strip().splitlines()[-1]))


def test_what_the_run_leaves_never_changes_its_verdict(sb: Sandbox) -> None:
    """More files than a fetch takes, or more bytes than its budget: nothing comes back, and the
    verdict is the program's as it would be without the fetch (never a sandbox_error)."""
    many = "import os\nfor i in range(300):\n    open(f'f{i}', 'w').write('x')\nprint('done')"
    r = sb.run(many, fetch_files=["."])
    assert (r.exit_code, r.stdout, r.sandbox_error, r.files) == (0, "done\n", None, {})
    big = "open('big', 'wb').write(b'x' * (3 << 20))\nprint('done')"
    r = sb.run(big, limits=Limits(max_disk_mb=2, max_code_bytes=1 << 20), fetch_files=["big"])
    assert r.sandbox_error is None and r.exit_code != 0 and "No space left" in r.stderr, r
    deep = "import os\nos.makedirs('/'.join(['d'] * 200))\nopen('a', 'w').write('a')\nprint('done')"
    r = sb.run(deep, fetch_files=[".", "a"])
    assert (r.exit_code, r.stdout, r.sandbox_error, r.files) == (0, "done\n", None, {}), r
    assert sb.run(deep, fetch_files=["a"]).files == {"a": b"a"}
    wide = "import os\nfor i in range(5000):\n    os.mkdir(f'd{i}')\nprint('done')"
    r = sb.run(wide, fetch_files=["."], limits=Limits(timeout_s=20))
    assert (r.exit_code, r.stdout, r.sandbox_error, r.files) == (0, "done\n", None, {}), r
    r = sb.run("import sys\nsys.exit(3)", files={"in": "x"}, fetch_files=["in"])
    assert (r.exit_code, r.sandbox_error, r.files) == (3, None, {"in": b"x"})


def test_a_forking_run_is_fetched_once_all_of_it_is_gone(sb: Sandbox) -> None:
    """A child still writing when the program exits is killed first: what comes back is what the
    run wrote, read when nothing of it can change it."""
    code = ("import os, time\nif os.fork() == 0:\n    time.sleep(0.3)\n    open('late', 'w').write('child')\n"
            "    os._exit(0)\nopen('early', 'w').write('parent')\n")  # fmt: skip
    r = sb.run(code, limits=Limits(max_processes=4), fetch_files=["early", "late"])
    assert r.sandbox_error is None and r.exit_code == 0, r
    assert r.files == {"early": b"parent"}


def test_the_cache_tells_runs_apart_by_their_files() -> None:
    with Sandbox(backend="process", workers=1, cache=True) as sb:
        code = "print(open('in').read())"
        a = sb.run(code, files={"in": "a"})
        b = sb.run(code, files={"in": "b"})
        a2 = sb.run(code, files={"in": "a"})
        f = sb.run(code, files={"in": "a"}, fetch_files=["in"])
        f2 = sb.run(code, files={"in": "a"}, fetch_files=["in"])
    assert (a.stdout, b.stdout, a2.stdout) == ("a\n", "b\n", "a\n")
    assert (a.cached, b.cached, a2.cached, f.cached, f2.cached) == (False, False, True, False, True)
    assert f.files == f2.files == {"in": b"a"} and a2.files == {}


def test_a_compiled_program_compiles_and_runs_with_its_files(sb: Sandbox) -> None:
    try:
        sb.check_language("cpp")
    except LanguageUnavailableError as exc:
        pytest.skip(str(exc))
    code = ('#include <cstdio>\n#include "lib/k.h"\nint main() {\n  std::FILE* f = std::fopen("o.txt", "w");\n'
            '  std::fprintf(f, "%d", K);\n  std::fclose(f);\n  std::printf("%d\\n", K);\n}\n')  # fmt: skip
    seven = sb.run(code, language="cpp", files={"lib/k.h": "#define K 7\n"}, fetch_files=["o.txt", "out"])
    eight = sb.run(code, language="cpp", files={"lib/k.h": "#define K 8\n"}, fetch_files=["o.txt"])
    assert seven.compile_status == eight.compile_status == "ok", (seven.compile_stderr, eight.compile_stderr)
    assert (seven.stdout, eight.stdout) == ("7\n", "8\n")  # the compile cache told them apart
    assert seven.files["o.txt"] == b"7" and eight.files == {"o.txt": b"8"}


@pytest.mark.parametrize(("files", "fetch", "language", "message"), [
    ({"../x": "a"}, (), "python", "'..'"),
    ({"/etc/x": "a"}, (), "python", "relative path"),
    ({"a//b": "a"}, (), "python", "empty step"),
    ({"": "a"}, (), "python", "relative path"),
    ({"solution.py": "a"}, (), "python", "the program's own file"),
    ({"main.cpp": "a"}, (), "cpp", "the program's own file"),
    ({"out/x": "a"}, (), "cpp", "compiled program"),
    ({"a": "x", "a/b": "y"}, (), "python", "both a file and a directory"),
    ({f"f{i}": "" for i in range(257)}, (), "python", "over 256"),
    ({}, ("../etc/passwd",), "python", "'..'"),
    ({}, ("/etc/passwd",), "python", "relative path"),
    ({}, ("x\0y",), "python", "NUL"),
])  # fmt: skip
def test_bad_files_are_refused_before_anything_runs(sb: Sandbox, files: dict[str, str], fetch: tuple[str, ...],
                                                    language: str, message: str) -> None:  # fmt: skip
    with pytest.raises(ValueError, match=message):
        sb.run("print(1)", files=files, fetch_files=fetch, language=language)
    with pytest.raises(ValueError, match="request 1: .*" + message):
        sb.run_many(["print(1)", {"code": "print(1)", "files": files, "fetch_files": fetch, "language": language}])


def test_file_arguments_of_the_wrong_type_get_a_clear_error(sb: Sandbox) -> None:
    with pytest.raises(TypeError, match="fetch_files: expected a list of paths"):
        sb.run_many([{"code": "print(1)", "fetch_files": "out.txt"}])
    with pytest.raises(TypeError, match="fetch_files: expected a list of paths"):
        sb.run("print(1)", fetch_files="out.txt")
    with pytest.raises(TypeError, match=r"files\['a'\]: expected bytes or str"):
        sb.run("print(1)", files={"a": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="max_disk_mb=1"):
        sb.run("print(1)", files={"a": b"x" * (1 << 20)}, limits=Limits(max_disk_mb=1, max_code_bytes=1000))
