"""What runs inside the sandbox, right before and around the untrusted program.

Standard library only, and importable as a plain file: the process backend calls it in a forked
child of its warm worker; the nsjail backend runs this file as a script inside the jail, where it
is the PID namespace's init and forks the program (``main``:
``python _child.pyc CODE_FD FILTER_FILE SEED OUT_FD ERR_FD STATUS_FD FILE_BYTES LISTENER_FILE LISTENER_FD``).

The program runs as ``__main__`` of a fresh module in this interpreter, as ``python solution.py``
would run it: same exit codes, same tracebacks (with source lines), ``SystemExit`` semantics,
non-daemon threads joined and ``atexit`` handlers run before the process ends.
"""

from __future__ import annotations

import atexit
import builtins
import ctypes
import io
import os
import sys
import types

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: a worker imports nothing it does not need
if TYPE_CHECKING:  # importlib.abc drags in tempfile, random, shutil...: never at run time
    import importlib.machinery
    from collections.abc import Sequence
    from importlib.abc import Loader
    from typing import Any

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
SECCOMP_MODE_FILTER = 2
SOLUTION_FILENAME = "solution.py"

# Fixed environment of every run: no secret of the parent can be in it.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "RAYON_NUM_THREADS",
)


def child_environment(workdir: str) -> dict[str, str]:
    env = {
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
    }
    env.update({name: "1" for name in THREAD_VARS})
    return env


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg2: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg2), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


class SeccompProgram:
    """A compiled filter held ready in memory (built once in the worker, used by each child)."""

    def __init__(self, bpf: bytes) -> None:
        if not bpf or len(bpf) % 8:
            raise ValueError(f"a BPF program is a multiple of 8 bytes, got {len(bpf)}")
        self._buf = ctypes.create_string_buffer(bpf, len(bpf))
        self._prog = _SockFprog(len(bpf) // 8, ctypes.cast(self._buf, ctypes.c_void_p))
        self._ref = ctypes.byref(self._prog)

    def install(self) -> None:
        """Load the filter into this process (irrevocably; inherited by its children)."""
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self._ref, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"loading the seccomp filter failed: {os.strerror(err)}")


# The ``seccomp`` system call's number (glibc has no wrapper) on the machines whose ioctl numbers
# have the generic layout (``_monitor``'s listener ioctls); elsewhere no listener, see ``_seccomp``.
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277, "riscv64": 277, "loongarch64": 277, "s390x": 348}
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 8
EACCES = 13


def install_listener(bpf: bytes) -> int:
    """Load ``bpf`` (``_seccomp``'s sysinfo layer) into this process with a user-notification
    listener, and return the listener's fd. Without ``CAP_SYS_ADMIN`` in our user namespace the
    kernel wants ``no_new_privs`` first (harmless here: nothing of ours gains privileges by exec)."""
    nr = _SYS_SECCOMP.get(os.uname().machine)
    if nr is None:
        raise OSError(38, f"no seccomp listener on {os.uname().machine}")
    program = SeccompProgram(bpf)
    for attempt in range(2):
        fd = _libc.syscall(ctypes.c_long(nr), SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, program._ref)
        if fd >= 0:
            os.set_inheritable(fd, False)
            return int(fd)
        err = ctypes.get_errno()
        if err != EACCES or attempt:
            raise OSError(err, f"loading the seccomp listener failed: {os.strerror(err)}")
        prctl(PR_SET_NO_NEW_PRIVS, 1)
    raise AssertionError("unreachable")


_NAMES: dict[str, ctypes.Array[ctypes.c_char]] = {}


def set_process_name(name: str) -> None:
    """What ``ps``/``top`` show for this process (at most 15 bytes). The buffer is made once per
    name (a forked child that made one would pay for a new ctypes array type: ~50 page faults)."""
    _libc.prctl(PR_SET_NAME, name_buffer(name), 0, 0, 0)


def name_buffer(name: str) -> ctypes.Array[ctypes.c_char]:
    """The buffer ``set_process_name`` hands the kernel for ``name`` (a template makes its
    children's before it forks them)."""
    buf = _NAMES.get(name)
    if buf is None:
        buf = _NAMES[name] = ctypes.create_string_buffer(name.encode()[:15])
    return buf


def install_seccomp(bpf: bytes) -> None:
    SeccompProgram(bpf).install()


def std_streams() -> tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]:
    """Text streams over fds 0, 1, 2 as ``python`` makes them for pipes. A worker builds them once
    before it forks (they hold no data yet), so each child only installs them."""

    def text(fd: int, mode: str, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if "r" in mode else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding="utf-8", errors=errors, line_buffering=False)

    return text(0, "rb", "surrogateescape"), text(1, "wb", "surrogateescape"), text(2, "wb", "backslashreplace")


def _write_fd2(message: str) -> None:
    try:
        os.write(2, message.encode("utf-8", "backslashreplace"))
    except OSError:
        pass


def prepare_interpreter(workdir: str) -> None:
    """Make this interpreter look like ``python solution.py`` started in ``workdir``: standard
    streams over fds 0-2, ``sys.argv``, ``sys.path[0]``, none of our own modules in
    ``sys.modules``. A worker does this once, before it forks (each child inherits it)."""
    stdin, stdout, stderr = std_streams()
    sys.stdin = sys.__stdin__ = stdin  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = stdout  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = stderr  # type: ignore[misc]
    sys.argv = [SOLUTION_FILENAME]
    if sys.path:
        sys.path[0] = workdir
    sys.dont_write_bytecode = True
    sys.excepthook = sys.__excepthook__
    ours = ("sandbox", "_child", "_linux", "_monitor", "_seccomp", "_zygote", "_template", "_paths")
    for name in [m for m in sys.modules if m.split(".")[0] in ours]:
        del sys.modules[name]  # still alive where they are used; just not importable by name
    # an editable install's import hook (it maps the project's packages to the host's checkout,
    # which the jail does not hold): a program sees no trace of the project, as in a fresh python
    sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
    sys.meta_path.insert(0, _SEEDER)  # seeds the program's random when it imports it (seed_random)
    sys.path_hooks[:] = [h for h in sys.path_hooks if not getattr(h, "__module__", "").startswith("__editable__")]
    sys.path_importer_cache.clear()


def seed_random(seed: int) -> None:
    """The program's ``random`` starts as after ``random.seed(seed)``. Seeded when the program
    imports it (through a one-shot import hook), so programs that never use it never pay for it."""
    if "random" in sys.modules:
        sys.modules["random"].seed(seed)
        return
    _SEEDER.seed = seed
    if _SEEDER not in sys.meta_path:  # (prepare_interpreter put it there: a forked child only sets the seed)
        sys.meta_path.insert(0, _SEEDER)


class _SeedOnImport:
    """Finds nothing itself: lets the normal finders load ``random``, then seeds it."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "random":
            return None
        sys.meta_path.remove(self)
        import importlib.util  # only now: it costs a run that never uses random several ms

        spec = importlib.util.find_spec("random")
        if spec is not None and spec.loader is not None:
            spec.loader = _SeedingLoader(spec.loader, self.seed)  # type: ignore[assignment]
        return spec


_SEEDER: Any = _SeedOnImport(0)  # a MetaPathFinder by protocol (no importlib.abc, see above)


class _SeedingLoader:
    def __init__(self, loader: Loader, seed: int) -> None:
        self.loader, self.seed = loader, seed

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        module.seed(self.seed)


def write_source(code: str | bytes, directory: str, name: str = SOLUTION_FILENAME) -> None:
    """Put the program where ``python solution.py`` would have it, so tracebacks show its lines
    (``code``: its text, or the text as UTF-8); another language's under its own ``name``."""
    fd = os.open(directory + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        data = code if isinstance(code, bytes) else code.encode("utf-8", "surrogatepass")
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


# Files in one buffer (a compile's artefacts, which the run's init reads back from the work dir,
# and a compiled program's files, written to the next run's work dir): per file, the length of its
# name (2 bytes, little-endian), its name (UTF-8, relative, "/"-separated), its mode (1 byte: 1 if
# executable), the length of its data (4 bytes), its data.
MAX_FILES = 256


def pack_files(files: Sequence[tuple[str, bool, bytes]]) -> bytes:
    out = bytearray()
    for name, executable, data in files:
        raw = name.encode("utf-8", "surrogateescape")
        out += len(raw).to_bytes(2, "little") + raw + (b"\1" if executable else b"\0") + len(data).to_bytes(4, "little")
        out += data
    return bytes(out)


def unpack_files(buf: bytes) -> list[tuple[str, bool, bytes]]:
    """``pack_files``' inverse; ``ValueError`` for anything else (a name that is absolute, climbs
    out with "..", or holds a NUL; a truncated buffer; too many files)."""
    files: list[tuple[str, bool, bytes]] = []
    view, i = memoryview(buf), 0
    while i < len(view):
        if len(files) >= MAX_FILES:
            raise ValueError(f"more than {MAX_FILES} files")
        if i + 2 > len(view):
            raise ValueError("truncated file list")
        n = int.from_bytes(view[i : i + 2], "little")
        raw = bytes(view[i + 2 : i + 2 + n])
        j = i + 2 + n
        if j + 5 > len(view):
            raise ValueError("truncated file list")
        executable = view[j] == 1
        size = int.from_bytes(view[j + 1 : j + 5], "little")
        if j + 5 + size > len(view):
            raise ValueError("truncated file list")
        name = raw.decode("utf-8", "surrogateescape")
        parts = name.split("/")
        if not name or name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"bad file name {name!r}")
        files.append((name, executable, bytes(view[j + 5 : j + 5 + size])))
        i = j + 5 + size
    return files


def write_files(buf: bytes, directory: str, owner: tuple[int, int] | None = None) -> None:
    """Write ``pack_files``' files under ``directory`` (a fresh, empty work dir), never following
    a link (its directories made as needed); ``owner``: the uid and gid they (and the directories
    made) are given, so that the run may change them (the writer is root, the run another uid)."""
    for name, executable, data in unpack_files(buf):
        parts = name.split("/")
        for k in range(1, len(parts)):
            sub = directory + "/" + "/".join(parts[:k])
            try:
                os.mkdir(sub, 0o755)
            except FileExistsError:
                continue
            if owner is not None:
                os.chown(sub, *owner, follow_symlinks=False)
        fd = os.open(directory + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if executable else 0o644)  # fmt: skip
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


# How far a collection looks (files sent back are read by a privileged process: it never follows
# a link, opens every step from the work dir's fd with O_NOFOLLOW, and gives up past these)
MAX_ENTRIES = 4096  # directory entries looked at
MAX_DEPTH = 64  # directories deep
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # (a fifo opens at once, unread)


def _open_steps(root_fd: int, parts: Sequence[str]) -> int | None:
    """An fd of ``parts`` under the directory ``root_fd``, each step opened from the one before
    with no link followed; None if a step is missing, a link, or (but the last) no directory."""
    import stat

    fd = os.open(".", _OPEN, dir_fd=root_fd)
    for i, part in enumerate(parts):
        try:
            nxt = os.open(part, _OPEN, dir_fd=fd)
        except OSError:  # (a link: ELOOP)
            os.close(fd)
            return None
        os.close(fd)
        fd = nxt
        if i < len(parts) - 1 and not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    return fd


def _gather(root_fd: int, parts: list[str], budget: int, files: list[tuple[str, bool, bytes]],
            seen: list[int]) -> int | None:  # fmt: skip
    """Append to ``files`` the regular file at ``parts`` under ``root_fd`` or every regular file
    under the directory there, each named by its path from ``root_fd``; nothing from a filesystem
    other than ``root_fd``'s. The bytes taken; None past ``budget`` bytes, ``MAX_FILES`` files,
    ``MAX_ENTRIES`` entries (``seen``: a count shared by the calls of one collection) or
    ``MAX_DEPTH``."""
    import stat

    dev = os.fstat(root_fd).st_dev
    total = 0
    todo = [parts]
    while todo:
        here = todo.pop()
        fd = _open_steps(root_fd, here)
        if fd is None:
            continue
        try:
            st = os.fstat(fd)
            if st.st_dev != dev:
                return None
            if stat.S_ISDIR(st.st_mode):
                entries = sorted(os.listdir(fd), reverse=True)  # (popped in name order)
                seen[0] += len(entries)
                if seen[0] > MAX_ENTRIES or (entries and len(here) >= MAX_DEPTH):
                    return None
                todo.extend([*here, e] for e in entries)
                continue
            if not stat.S_ISREG(st.st_mode) or not here:
                continue
            total += st.st_size
            if total > budget or len(files) >= MAX_FILES:
                return None
            files.append(("/".join(here), bool(st.st_mode & 0o100), _read_all(fd, st.st_size)))
        finally:
            os.close(fd)
    return total


def collect_files(directory: str, limit_bytes: int, prefix: str = "") -> bytes | None:
    """The regular files under ``directory`` (its subdirectories included, no link followed, none
    from another filesystem), packed, their names relative to it (``prefix`` + "/" before each, if
    given); None if there is none, too many or more than ``limit_bytes`` of them. Called by a
    run's init (privileged) once every process of the run is gone."""
    try:
        fd = os.open(directory, _OPEN | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        files: list[tuple[str, bool, bytes]] = []
        if _gather(fd, [], limit_bytes, files, [0]) is None:
            return None
    finally:
        os.close(fd)
    if prefix:
        files = [(prefix + "/" + name, x, data) for name, x, data in files]
    return pack_files(files) if files else None


# What a run's init sends back instead of a compile's directory: the files (or directories) a
# caller asked for by name (``Sandbox.run(fetch_files=...)``), "@" then their names in hex, comma-separated
FETCH_MARK = "@"


def fetch_spec(paths: Sequence[str]) -> str:
    return FETCH_MARK + ",".join(p.encode("utf-8", "surrogateescape").hex() for p in paths)


def fetch_paths(spec: str) -> list[str]:
    return [bytes.fromhex(h).decode("utf-8", "surrogateescape") for h in spec[len(FETCH_MARK) :].split(",") if h]


def collect_paths(workdir: str, paths: Sequence[str], limit_bytes: int) -> bytes | None:
    """The files named ``paths`` under ``workdir`` (a name of a directory: every file under it,
    "." the whole work dir), packed (each once); a name that does not exist, or whose way there
    crosses a link or something other than a directory, is left out. None if there is nothing,
    or more than ``limit_bytes``, ``MAX_FILES`` or ``MAX_ENTRIES``. The names were checked by the
    host (``sandbox.models.check_files``): relative, no "." or ".." step."""
    try:
        root = os.open(workdir, _OPEN | os.O_DIRECTORY)
    except OSError:
        return None
    files: list[tuple[str, bool, bytes]] = []
    total, seen = 0, [0]
    try:
        for path in paths:
            got = _gather(root, [] if path == "." else path.split("/"), limit_bytes - total, files, seen)
            if got is None:
                return None
            total += got
    finally:
        os.close(root)
    unique = list({name: (name, x, data) for name, x, data in files}.values())
    return pack_files(unique) if unique else None


def collect_files_for(workdir: str, spec: str, limit_bytes: int) -> bytes | None:
    """What a run's init sends back: a compile's directory ``spec`` of ``workdir``
    (``collect_files``), or the files ``spec`` names (``fetch_spec``, ``collect_paths``)."""
    if spec.startswith(FETCH_MARK):
        return collect_paths(workdir, fetch_paths(spec), limit_bytes)
    return collect_files(workdir + "/" + spec, limit_bytes, prefix=spec)


# A program's source followed by the run's input files (``Sandbox.run(files=...)``, packed): a NUL
# (which no program's source holds: ``check_payload``), the source's length (4 bytes), the source,
# the files. A compiled program's files (``pack_files``) take the input files after them as they are.
def join_source(source: bytes, files: bytes | None) -> bytes:
    if not files:
        return source
    return b"\0" + len(source).to_bytes(4, "little") + source + files


def split_source(data: bytes) -> tuple[bytes, bytes | None]:
    """``join_source``'s inverse."""
    if data[:1] != b"\0":
        return data, None
    n = int.from_bytes(data[1:5], "little")
    return data[5 : 5 + n], data[5 + n :]


def _read_all(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# Limits every run gets, whatever the host's (set, never inherited): no real-time or raised
# scheduling priority, a few queued signals, no POSIX message queue, little locked memory.
FIXED_RLIMITS = (
    ("RLIMIT_RTPRIO", 0),
    ("RLIMIT_NICE", 0),
    ("RLIMIT_SIGPENDING", 64),
    ("RLIMIT_MSGQUEUE", 0),
    ("RLIMIT_MEMLOCK", 64 << 10),  # bytes
)


def fixed_rlimits() -> list[tuple[int, tuple[int, int]]]:
    """``FIXED_RLIMITS`` as ``(resource, (soft, hard))`` pairs for ``resource.setrlimit``."""
    loaded = "resource" in sys.modules
    import resource

    pairs = [(getattr(resource, name), (value, value)) for name, value in FIXED_RLIMITS]
    if not loaded:  # as in a fresh `python solution.py`, which has not imported it
        del sys.modules["resource"]
    return pairs


def limit_program(max_file_bytes: int, *, fixed: bool = True) -> None:
    """The program's own rlimits, in its process, right before it runs: ``FIXED_RLIMITS`` (unless
    ``fixed`` is False: this process set them already) and RLIMIT_FSIZE, applied after
    ``write_source`` (the sandbox's own write of the program, which a file limit below the
    program's length, or 0, must not break)."""
    loaded = "resource" in sys.modules
    import resource

    for res, value in [(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes)), *(fixed_rlimits() if fixed else [])]:
        resource.setrlimit(res, value)
    if not loaded:
        del sys.modules["resource"]


PRECOMPILED: dict[str, types.CodeType] = {}


def precompile(programs: Sequence[str]) -> None:
    """Compile the host's registered programs (``sandbox.register_program``) as ``run_program``
    would, once, for every run whose program one of them is. A program that does not compile is
    left to its runs (they report its error as ever)."""
    for code in programs:
        try:
            PRECOMPILED[code] = compile(code, SOLUTION_FILENAME, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            pass


def run_program(code: str, seed: int) -> int:
    """Run ``code`` as ``__main__``; return the exit status ``python solution.py`` would have.
    The interpreter must have been through ``prepare_interpreter``."""
    seed_random(seed)
    main = types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": builtins, "__file__": SOLUTION_FILENAME})
    sys.modules["__main__"] = main
    status = 0
    try:
        try:
            compiled = PRECOMPILED.get(code) or compile(code, SOLUTION_FILENAME, "exec", dont_inherit=True)
            exec(compiled, main.__dict__)
        finally:
            threading = sys.modules.get("threading")  # no threads unless the program made some
            shutdown = getattr(threading, "_shutdown", None)
            if shutdown is not None:
                shutdown()  # join non-daemon threads, as the interpreter does at exit
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        status = 1
        try:
            tb = exc.__traceback__
            # drop this function's frame so the traceback starts at the program, as in CPython
            # (a SyntaxError from compile() has no frame of the program's: then no traceback at
            # all, just the error with its source line, as `python solution.py` prints it)
            if tb is not None and tb.tb_frame.f_code is run_program.__code__:
                tb = tb.tb_next
            sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        except BaseException:
            _write_fd2(f"{type(exc).__name__}\n")
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return status


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        _write_fd2(f"{code}\n")
        return 1
    return code & 0xFF


def exit_now(status: int) -> None:
    os._exit(status)


def main(argv: list[str]) -> None:
    """nsjail's command: the init (PID 1) of the jail's PID namespace, which runs no untrusted code.

    ``argv``: ``CODE_FD FILTER_FILE SEED OUT_FD ERR_FD STATUS_FD FILE_BYTES LISTENER_FILE LISTENER_FD``. The init reads the program from
    CODE_FD (a memfd: no run's code is ever on a path another jail could see) and the seccomp filter
    from FILTER_FILE, makes itself non-dumpable (the program, same uid, cannot open ``/proc/1/mem``,
    ``/proc/1/fd``...), takes no signal from inside the namespace (an init without handlers), forks
    the program as PID 2, then only reaps. Unless LISTENER_FILE is ``-``, the init loads that
    filter (``_seccomp``'s sysinfo layer) before the fork, with a listener it moves to LISTENER_FD
    (a low number the host chose, below the jail's RLIMIT_NOFILE) and holds until it exits: the host's monitor takes a copy of it (``pidfd_getfd``) once
    the program says "R", and answers the run's ``sysinfo`` calls; the program closes its copy before
    it runs. The program's process makes OUT_FD and ERR_FD its stdout
    and stderr, sets its rlimits (``limit_program``: the files it writes at most FILE_BYTES, only now that
    the init wrote the program's source), drops every capability it might hold (nsjail has dropped them all, as root and in a
    user namespace: this stays true if that ever changes), loads the filter and says "R" on
    STATUS_FD (or "E<why>" if its setup failed), closes STATUS_FD and runs. When the program ends the
    init writes "X" + its raw wait status (4 bytes, little-endian) on STATUS_FD and exits; the
    kernel then kills whatever the program left.

    Without root (nsjail's user-namespace mode) the init and the program share the caller's uid, the
    only one of the jail's user namespace, and neither holds a capability: non-dumpable still keeps
    the program out of the init (``ptrace`` access to a non-dumpable process needs
    ``CAP_SYS_PTRACE`` in the jail's user namespace), while the host's monitor, whose uid owns that
    namespace, reads the init's ``/proc`` entries and kills it as before.
    """
    code_fd, filter_path, seed = int(argv[1]), argv[2], int(argv[3])
    out_fd, err_fd, status_fd, file_bytes = int(argv[4]), int(argv[5]), int(argv[6]), int(argv[7])
    listener_path = argv[8] if len(argv) > 8 else "-"
    listener_fd = int(argv[9]) if len(argv) > 9 else code_fd
    # a compile's directory and byte budget ("out:67108864"), or the files to fetch ("@...:budget",
    # ``fetch_spec``), or "-"; then another language's (sandbox.languages) command: the source file's name ("*": CODE_FD holds a compiled
    # program's files, ``pack_files``) and the argv to exec
    collect = argv[10].split(":") if len(argv) > 10 and argv[10] != "-" else None
    command = argv[11:] or None
    listener = -1
    try:
        prctl(PR_SET_DUMPABLE, 0)
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)  # Python's one handler: an init needs none
        name = _process_name()
        set_process_name("sandbox-init")
        data = _read_fd(code_fd)
        os.close(code_fd)
        extra = None
        if not command or command[0] != "*":  # (a compiled program's files hold the input files already)
            data, extra = split_source(data)
        code = "" if command else data.decode("utf-8", "surrogatepass")
        with open(filter_path, "rb") as fh:
            program = SeccompProgram(fh.read())
        workdir = os.getcwd()
        os.environ["HOME"] = os.environ["TMPDIR"] = workdir
        prepare_interpreter(workdir)
        if command is None:
            write_source(code, workdir)
        elif command[0] == "*":
            write_files(data, workdir)
        else:
            write_source(data, workdir, command[0])
        if extra:
            write_files(extra, workdir)
        del data, extra
        if collect is not None and not collect[0].startswith(FETCH_MARK):
            os.mkdir(workdir + "/" + collect[0], 0o755)
        if listener_path != "-":
            # the sysinfo layer, for us and the program: the listener at LISTENER_FD (the host
            # takes it from there), ours to hold until we exit; the program closes its copy
            with open(listener_path, "rb") as fh:
                fd = install_listener(fh.read())
            listener = listener_fd
            if fd != listener_fd:
                os.dup2(fd, listener_fd)
                os.close(fd)
        pid = os.fork()
    except BaseException as exc:  # reported, then this jail ends
        _say(status_fd, f"Esandbox init: {type(exc).__name__}: {exc}")
        exit_now(SETUP_FAILED)
    if pid == 0:
        set_process_name(name)  # what `python solution.py` would show
        _start_program(code, seed, program, out_fd, err_fd, status_fd, file_bytes, listener, command)
    for fd in (0, 1, 2, out_fd, err_fd):  # the program's streams are the program's alone
        try:
            os.close(fd)
        except OSError:
            pass
    _reap_until(pid, status_fd, None if collect is None else (workdir, collect[0], int(collect[1])))


PR_SET_DUMPABLE = 4
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SETUP_FAILED = 125
_signal: Any = __import__("_signal")  # the C module: `signal` would import enum (~4 ms)


def _process_name() -> str:
    buf = ctypes.create_string_buffer(16)
    _libc.prctl(16, buf, 0, 0, 0)  # PR_GET_NAME
    return buf.value.decode("utf-8", "replace")


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _say(fd: int, message: str) -> None:
    try:
        os.write(fd, message.encode("utf-8", "backslashreplace")[:4000])
    except OSError:
        pass


def _start_program(code: str, seed: int, program: SeccompProgram, out_fd: int, err_fd: int, status_fd: int,
                   file_bytes: int, listener: int = -1, command: list[str] | None = None) -> None:
    """In the forked child (PID 2): become the program's process and run it (or exec
    ``command``'s argv, another language's: its path relative to the work dir unless absolute,
    under the filter that allows exec); never returns."""
    try:
        if listener >= 0:
            os.close(listener)  # the init's to hold: never the program's
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # as in any Python program
        limit_program(file_bytes)
        drop_capabilities()
        # dumpable again (the init, whose copy of the memory this was, stays not): the host's
        # monitor, which without a cgroup counts the pipes in the program's fd table, may read its
        # /proc entries from outside the jail's user namespace; inside, only the run's own
        # processes share its uid, and the filter refuses ptrace
        prctl(PR_SET_DUMPABLE, 1)
        program.install()
        os.write(status_fd, b"R")
        os.close(status_fd)
    except BaseException as exc:
        _say(status_fd, f"E{type(exc).__name__}: {exc}")
        exit_now(SETUP_FAILED)
    if command is not None:
        try:  # the signals Python ignores go back to their defaults, as subprocess does
            for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
                _signal.signal(sig, _signal.SIG_DFL)
            path = command[1] if command[1].startswith("/") else os.getcwd() + "/" + command[1]
            os.execve(path, command[1:], os.environ)
        except OSError as exc:  # (the host checked it is there: a failure of ours, not the program's)
            os.write(2, f"code-env: cannot start {command[1]}: {exc}\n".encode())
            exit_now(SETUP_FAILED)
    exit_now(run_program(code, seed))


def drop_capabilities() -> None:
    """Empty this process's effective, permitted, inheritable and ambient capability sets (always
    allowed; a no-op when nsjail already did it). The bounding set needs no clearing: nsjail empties
    it, ``no_new_privs`` is set and the seccomp filter refuses ``execve``, so no capability can come
    back."""
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two (effective, permitted, inheritable) triples, all zero
    if _libc.capset(header, data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL where there is no ambient set


def _reap_until(pid: int, status_fd: int, collect: tuple[str, str, int] | None = None) -> None:
    """The init's loop: reap every process that ends (orphans come to us), report the program's
    wait status when it is the one, and exit."""
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            exit_now(0)  # cannot happen before the program's own exit; nothing to report
        if done == pid:
            try:
                if collect is not None:  # a compile: its files, once nothing of the run is left (``send_files``)
                    send_files(status_fd, *collect)
                os.write(status_fd, b"X" + status.to_bytes(4, "little", signed=True))
            except OSError:
                pass
            exit_now(0)


def send_files(fd: int, workdir: str, directory: str, limit_bytes: int) -> None:
    """A compile's last step, in the run's init (PID 1 of its namespace): kill and reap what is
    left of the run, then write the files under ``directory`` of ``workdir`` on ``fd``: "A", their
    length (4 bytes, little-endian), ``collect_files``' bytes; nothing when there is none or too
    much."""
    try:
        os.kill(-1, _signal.SIGKILL)  # every process of our namespace but us
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    data = collect_files_for(workdir, directory, limit_bytes)
    if data is not None:
        view = memoryview(b"A" + len(data).to_bytes(4, "little") + data)
        while view:
            view = view[os.write(fd, view) :]


if __name__ == "__main__":
    main(sys.argv)
