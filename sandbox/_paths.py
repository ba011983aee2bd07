"""Which host directories a sandboxed Python needs to see (read-only): the system's libraries and
the interpreter's prefixes and site-packages — never the project's own source tree. Standard
library only (used by the worker and by the nsjail backend)."""

from __future__ import annotations

import os
import sys

SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")


def python_dirs() -> list[str]:
    """The interpreter's prefixes and site-packages (outermost directories only)."""
    import site
    import sysconfig

    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths = sysconfig.get_paths()
    candidates.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    try:
        candidates.update(site.getsitepackages())
    except AttributeError:  # old virtualenv's site module
        pass
    prefixes = tuple(os.path.realpath(p) for p in candidates if p)
    dirs = {os.path.realpath(p) for p in candidates if p and os.path.isdir(p)}
    for entry in sys.path:  # directories added by .pth files inside the prefixes
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and real.startswith(prefixes):
            dirs.add(real)
    # the interpreter binary may be a symlink out of the venv (to a pyenv or system prefix)
    exe_dir = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    if os.path.isdir(exe_dir) and exe_dir != "/":
        dirs.add(exe_dir)
    out: list[str] = []
    for d in sorted(dirs):
        if not any(d == o or d.startswith(o + os.sep) for o in out):
            out.append(d)
    return [d for d in out if not _under_system(d)]


def _under_system(path: str) -> bool:
    return any(path == s or path.startswith(s + os.sep) for s in SYSTEM_DIRS)


def system_dirs() -> list[str]:
    """Top-level system directories that exist here, as (path, symlink target or None)."""
    return [d for d in SYSTEM_DIRS if os.path.lexists(d)]
