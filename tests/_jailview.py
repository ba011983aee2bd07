"""What a jail may show of the host, computed on the host from ``sandbox._paths.jail_mounts``, and
the program that walks a jail to see what it really shows.

The rule (both backends, as root and as a normal user): outside the system directories, a jail
shows the allowlisted paths (the interpreter, its standard library, the venv's ``bin/python*``
links and ``pyvenv.cfg``, the allowed packages in otherwise empty site-packages) and, on the way
to them, the bare directories that lead there: each an empty, read-only directory of the jail's
own root that holds only the next step of those paths. So a checkout under ``/home/<user>`` shows
``/home``, ``/home/<user>``, the checkout and ``.venv`` as directories, and nothing of what they
hold but that path: the names are visible, no file of the project or the home is.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sandbox import _paths
from sandbox.languages import toolchain_paths

REPO = Path(__file__).resolve().parents[1]
# What each backend adds beside the allowlist (its own, not the host's): not walked.
BACKEND_TOPS = {"/dev", "/proc", "/sandbox", "/sbx", "/sys", "/tmp"}
SYSTEM_TOPS = set(_paths.SYSTEM_DIRS)


def backend_mounts() -> list[_paths.Mount]:
    """The jail both backends build by default: the default packages, and the toolchains that live
    outside the system's directories (``sandbox.languages.toolchain_paths``)."""
    return _paths.jail_mounts(toolchain_paths=toolchain_paths())


def expected_view(mounts: list[_paths.Mount] | None = None) -> dict[str, str]:
    """Every path a jail built from ``mounts`` shows outside the system directories and the
    backend's own, each with what it is: ``"dir"`` (a bare directory on the way to the allowlist,
    or a tmpfs/dir of the list), ``"link"``, or the host path it shows (inside a bind)."""
    mounts = backend_mounts() if mounts is None else mounts
    view: dict[str, str] = {}
    for m in mounts:  # parents before children (jail_mounts' guarantee)
        parts = m.dst.split("/")
        for i in range(2, len(parts)):
            view.setdefault("/".join(parts[:i]), "dir")
        if m.kind in ("tmpfs", "dir"):
            for p in [p for p in view if p.startswith(m.dst + "/")]:
                del view[p]  # hidden by the empty directory
            view[m.dst] = "dir"
        elif m.kind == "symlink":
            view[m.dst] = "link"
        else:
            view[m.dst] = m.src
            if os.path.isdir(m.src) and not os.path.islink(m.src):
                for root, dirs, files in os.walk(m.src):
                    for name in dirs + files:
                        host = os.path.join(root, name)
                        view[m.dst + host[len(m.src) :]] = host
    return {p: what for p, what in view.items() if "/" + p.split("/")[1] not in SYSTEM_TOPS | BACKEND_TOPS}


def project_files() -> dict[str, str]:
    """sha256 -> path of every file of the checkout but the venv (sources, tests, task data,
    references, git's own files), 64 bytes or more (shorter ones, an empty ``__init__.py`` say, are
    shared with every Python installation and prove nothing)."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(REPO):
        if root == str(REPO):
            dirs[:] = [d for d in dirs if d != ".venv"]
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) < 64:
                    continue
                with open(path, "rb") as fh:
                    out.setdefault(hashlib.sha256(fh.read()).hexdigest(), path)
            except OSError:
                continue
    return out


# Lists every path of the jail outside the system directories and the backend's own (``P``),
# reads every regular file it may read and prints its sha256 (``H``) and any "CANARY-" + 32 hex
# digits in it (``C``; the prefix is assembled at run time), and tries to create a file in every
# directory it lists (``W`` when that worked).
VIEW_WALKER = r'''
import hashlib, os, re, stat, sys
SKIP = set(sys.stdin.read().split())
canary = re.compile((b"CANA" + b"RY-") + rb"[0-9a-f]{32}")
def visit(path):
    print("P", path)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        try:
            fd = os.open(os.path.join(path, "code-env-probe"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            print("W", path)
        except OSError:
            pass
    elif stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return
        print("H", hashlib.sha256(data).hexdigest(), path)
        for m in sorted(set(canary.findall(data))):
            print("C", m.decode(), path)
for top in sorted(os.listdir("/")):
    path = "/" + top
    print("T", path)
    if path in SKIP:
        continue
    visit(path)
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in dirs + sorted(files):
                visit(os.path.join(root, name))
print("DONE")
'''
