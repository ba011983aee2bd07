"""The run filter's own compiler (``_seccomp.build_bpf``) against libseccomp's (``reference_bpf``).

The kernel converts and JIT-compiles a filter at every load, once per run, so ``build_bpf`` writes
the filter in a few hundred instructions where libseccomp writes ~1,500. These tests hold it to
the same semantics: a small classic-BPF interpreter runs both programs on every system call
number up to 1100, the other ABIs' and the out-of-range ones, a wrong architecture, and, for every
system call whose answer depends on its arguments, a few thousand argument vectors (each listed
value, its neighbours, high bits, every single bit, seeded random ones); both must return the same
action every time. Then the kernel must accept each program, and a child under it still works.
"""

from __future__ import annotations

import errno
import os
import platform
import random
import socket
import struct
import sys
import termios
from functools import cache

import numpy as np
import pyseccomp
import pytest

from sandbox import _child, _seccomp

VARIANTS = [
    pytest.param(fork, unix, id=_seccomp.variant(allow_fork=fork, allow_unix_sockets=unix))
    for fork in (False, True)
    for unix in (True, False)
]
NATIVE = pyseccomp.system_arch()
U32, U64 = 0xFFFFFFFF, (1 << 64) - 1
MAX_INSTRUCTIONS = 400  # per variant; libseccomp's program has ~1,400-1,505

# the system calls whose answer depends on an argument (tests/test_seccomp.py's argument_rules)
ARGUMENT_CHECKED = (
    "clone", "socket", "socketpair", "setsockopt", "mmap", "mmap2", "prctl", "personality",
    "fcntl", "fcntl64", "ioctl", "kill", "prlimit64", "mknod", "mknodat", "socketcall",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# a classic-BPF interpreter: the instructions both programs use (checked as they are decoded)

LD_W_ABS, ALU_AND_K, JA, JEQ_K, JGT_K, JGE_K, JSET_K, RET_K = (
    0x20, 0x54, 0x05, 0x15, 0x25, 0x35, 0x45, 0x06,
)  # fmt: skip
KNOWN_ACTIONS = {
    pyseccomp.ALLOW,
    pyseccomp.ERRNO(errno.EPERM),
    pyseccomp.ERRNO(errno.ENOSYS),
    pyseccomp.KILL_PROCESS,
    pyseccomp.KILL,
}
Insn = tuple[int, int, int, int]


def big_endian(arch: int) -> bool:
    return arch != pyseccomp.Arch.X32 and not arch & 0x40000000  # __AUDIT_ARCH_LE


def decode(program: bytes, arch: int) -> list[Insn]:
    """The instructions of ``program``, written in ``arch``'s byte order. libseccomp writes the
    return values of a foreign-endian program in the host's order: such a value is swapped back
    (asserted to be one of the actions either way)."""
    assert program and len(program) % 8 == 0
    order = ">" if big_endian(arch) else "<"
    insns: list[Insn] = []
    for code, jt, jf, k in struct.iter_unpack(order + "HBBI", program):
        if code == RET_K and k not in KNOWN_ACTIONS:
            swapped = int.from_bytes(k.to_bytes(4, "little"), "big")
            assert swapped in KNOWN_ACTIONS, f"unknown action {k:#x}"
            k = swapped
        assert code in (LD_W_ABS, ALU_AND_K, JA, JEQ_K, JGT_K, JGE_K, JSET_K, RET_K), hex(code)
        insns.append((code, jt, jf, k))
    return insns


def check_structure(insns: list[Insn]) -> None:
    """What the kernel checks (``bpf_check_classic``, ``seccomp_check_filter``): the length, every
    jump forward and inside the program, aligned loads inside ``struct seccomp_data``, a return
    at the end."""
    assert 0 < len(insns) <= 4096
    assert insns[-1][0] == RET_K
    for pc, (code, jt, jf, k) in enumerate(insns):
        if code == JA:
            assert pc + 1 + k < len(insns)
        elif code in (JEQ_K, JGT_K, JGE_K, JSET_K):
            assert pc + 1 + max(jt, jf) < len(insns)
        elif code == LD_W_ABS:
            assert k % 4 == 0 and k < 64


def execute(insns: list[Insn], data: np.ndarray) -> np.ndarray:
    """Run the program on each ``struct seccomp_data`` (a row of 16 u32 words, as a 32-bit load at
    offset 4 * j reads them) and return the action of each. Every jump is forward, so one pass in
    program order runs all the inputs at once: the inputs waiting at instruction ``i`` execute it
    and go on to wait at the next one they jump to."""
    n = len(data)
    a = np.zeros(n, dtype=np.uint32)
    actions = np.full(n, -1, dtype=np.int64)
    waiting: dict[int, list[np.ndarray]] = {0: [np.arange(n)]}

    def go(pc: int, which: np.ndarray) -> None:
        if which.size:
            waiting.setdefault(pc, []).append(which)

    for i, (code, jt, jf, k) in enumerate(insns):
        parts = waiting.pop(i, None)
        if parts is None:
            continue
        here = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if code == LD_W_ABS:
            a[here] = data[here, k // 4]
            go(i + 1, here)
        elif code == ALU_AND_K:
            a[here] &= np.uint32(k)
            go(i + 1, here)
        elif code == JA:
            go(i + 1 + k, here)
        elif code == RET_K:
            actions[here] = k
        else:
            word = a[here]
            taken = {
                JEQ_K: word == k, JGT_K: word > k, JGE_K: word >= k, JSET_K: (word & np.uint32(k)) != 0,
            }[code]  # fmt: skip
            go(i + 1 + jt, here[taken])
            go(i + 1 + jf, here[~taken])
    assert not waiting and (actions >= 0).all(), "an input ran off the program"
    return actions


def seccomp_data(nr: np.ndarray, arch: np.ndarray, args: np.ndarray, order: str) -> np.ndarray:
    """``struct seccomp_data`` (int nr, u32 arch, u64 instruction_pointer, u64 args[6], in the
    architecture's byte order) of each input, as rows of 16 u32 words."""
    layout = np.dtype([("nr", order + "u4"), ("arch", order + "u4"), ("ip", order + "u8"),
                       ("args", order + "u8", (6,))])  # fmt: skip
    assert layout.itemsize == 64
    out = np.zeros(len(nr), dtype=layout)
    out["nr"], out["arch"], out["ip"], out["args"] = nr, arch, 0x401000, args
    return out.view(order + "u4").reshape(len(nr), 16)


def pack(inputs: list[tuple[int, int, tuple[int, ...]]], order: str) -> np.ndarray:
    """``seccomp_data`` of a few (nr, arch, args)."""
    return seccomp_data(
        np.array([nr & U32 for nr, _, _ in inputs], dtype=np.uint32),
        np.array([arch for _, arch, _ in inputs], dtype=np.uint32),
        np.array([args for _, _, args in inputs], dtype=np.uint64).reshape(len(inputs), 6),
        order,
    )


def test_interpreter_on_a_hand_written_program() -> None:
    """The interpreter itself, on a program whose answers are known: the arch check, a
    little-endian argument load, AND, and each jump."""
    p = struct.pack
    program = b"".join([
        p("<HBBI", LD_W_ABS, 0, 0, 4), p("<HBBI", JEQ_K, 1, 0, 0xC000003E), p("<HBBI", RET_K, 0, 0, 0),
        p("<HBBI", LD_W_ABS, 0, 0, 0), p("<HBBI", JGE_K, 1, 0, 10), p("<HBBI", JA, 0, 0, 4),
        p("<HBBI", LD_W_ABS, 0, 0, 16), p("<HBBI", ALU_AND_K, 0, 0, 0xF0), p("<HBBI", JSET_K, 1, 0, 0x10),
        p("<HBBI", RET_K, 0, 0, 0x7FFF0000), p("<HBBI", RET_K, 0, 0, 0x00050001),
    ])  # fmt: skip
    insns = decode(program, pyseccomp.Arch.X86_64)
    check_structure(insns)
    cases = [  # (nr, arg0, arch) -> action
        ((11, 0x10, 0xC000003E), 0x00050001),
        ((11, 0x11 | 1 << 36, 0xC000003E), 0x00050001),
        ((11, 0x20, 0xC000003E), 0x7FFF0000),
        ((5, 0x10, 0xC000003E), 0x00050001),  # below 10: JA to the last return
        ((11, 0x10, 0x40000003), 0),
    ]
    data = pack([(nr, arch, (arg0, 0, 0, 0, 0, 0)) for (nr, arg0, arch), _ in cases], "<")
    assert execute(insns, data).tolist() == [action for _, action in cases]
    big = pack([(1, 2, (3 | 4 << 32, 0, 0, 0, 0, 0))], ">")
    assert big[0, :6].tolist() == [1, 2, 0, 0x401000, 4, 3]  # big-endian: the low word second


# ---------------------------------------------------------------------------------------------
# what both programs are run on


def numbers_of(arch: int, names: tuple[str, ...]) -> set[int]:
    """The numbers ``names`` stand for on ``arch`` (a pseudo number of a multiplexed call as the
    u32 the filter would see), by libseccomp's table, not by the code under test."""
    out: set[int] = set()
    for name in names:
        nr = pyseccomp.resolve_syscall(arch, name)
        if nr != -1 and nr > -10000:
            out.add(nr & U32)
    return out


def interesting_values() -> list[int]:
    """Argument values: every value a rule names, its neighbours, with high bits, the single bits,
    combinations of clone's flags, and seeded random ones."""
    s = _seccomp
    named = {
        *s.LOCK_COMMANDS, s.F_SETPIPE_SZ, 1032, *s.SOCKET_BUFFER_OPTIONS, socket.SOL_SOCKET,
        socket.SOL_IP if hasattr(socket, "SOL_IP") else 0, socket.AF_UNIX, socket.AF_INET,
        socket.AF_INET6, socket.AF_NETLINK, s.PR_SET_DUMPABLE, s.PR_SET_MM, s.PR_SET_PTRACER, 3, 15,
        s.PERSONALITY_QUERY, 0x0040000, termios.TIOCSTI, getattr(termios, "TIOCLINUX", 0x541C),
        termios.FIONREAD, 0x5421, 0xC0502100, 0x40082102, U32, 0, 0o020000, 0o060000, 0o010000,
        0o100000, 0o140000, 0o040000, 0o120000, s.S_IFMT, 0o020600, 0o060644, 0o010600,
        s.MAP_HUGETLB, 0x22, 0x22 | s.MAP_HUGETLB, s.CLONE_THREAD, s.CLONE_FORBIDDEN,
        s.CLONE_FORBIDDEN | s.CLONE_THREAD, s.CLONE_NAMESPACES,
    }  # fmt: skip
    pthread = 0x3D0F00  # glibc's pthread_create: VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|...
    sigchld, vm_vfork = 17, 0x4100
    clone_flags = {pthread, sigchld, vm_vfork | sigchld, s.CLONE_THREAD | sigchld}
    for bit in range(32):
        if s.CLONE_FORBIDDEN >> bit & 1:
            clone_flags |= {pthread | 1 << bit, sigchld | 1 << bit, (1 << bit) | s.CLONE_THREAD}
    values = {*named, *clone_flags}
    values |= {(v + d) & U64 for v in list(values) for d in (-1, 1)}
    values |= {v | 1 << 32 for v in list(values)} | {v | 0xFFFFFFFF00000000 for v in list(values)}
    values |= {1 << b for b in range(64)} | {U64, 1 << 63, 0x7FFFFFFF, 0x80000000}
    rng = random.Random(20240611)
    values |= {rng.getrandbits(64) for _ in range(300)} | {rng.getrandbits(32) for _ in range(100)}
    return sorted(values)


def argument_vectors(values: list[int]) -> np.ndarray:
    """Each value at each argument position, the others zero, or ``SOL_SOCKET`` in the second
    (where ``setsockopt`` looks at the third), and seeded random vectors: an (n, 6) u64 array."""
    column = np.array(values, dtype=np.uint64)
    blocks = []
    for base in ((0,) * 6, (0, socket.SOL_SOCKET | 1 << 40, 0, 0, 0, 0)):
        for i in range(6):
            block = np.tile(np.array(base, dtype=np.uint64), (len(values), 1))
            block[:, i] = column
            blocks.append(block)
    rng = np.random.default_rng(7)
    picked = column[rng.integers(0, len(values), size=(300, 6))]
    fresh = rng.integers(0, U64, size=(300, 6), dtype=np.uint64, endpoint=True)
    blocks.append(np.where(rng.random((300, 6)) < 0.7, picked, fresh))
    return np.concatenate(blocks)


def syscall_numbers(arch: int) -> set[int]:
    """Every number up to 1100 and around each named call (mips numbers from 4000, x32's with bit
    30), and the huge ones, negative ones included (pseudo numbers of multiplexed calls)."""
    named = numbers_of(arch, (*_seccomp.DENIED_SYSCALLS, *_seccomp.ALLOWED_SYSCALLS, *ARGUMENT_CHECKED,
                              "fork", "vfork", "clone3", "socketcall", "ipc", "sysinfo"))  # fmt: skip
    out = set(range(1101)) | {(n + d) & U32 for n in named for d in (-2, -1, 0, 1, 2)}
    if arch in (pyseccomp.Arch.X86_64, pyseccomp.Arch.X32):
        out |= {0x40000000 + n for n in range(1101)} | {0x3FFFFFFF, 0x40000000}
    out |= {0x7FFFFFFF, 0x80000000, 0xBFFFFFFF, 0xC0000000, U32 - 1000, U32 - 1, U32}
    out |= {-n & U32 for n in range(1, 400)}  # libseccomp's pseudo numbers: -101 .. -224, -10000 ..
    rng = random.Random(11)
    out |= {rng.getrandbits(32) for _ in range(200)}
    return out


# ---------------------------------------------------------------------------------------------
# the differential test


@cache
def programs(
    arch: int, allow_fork: bool, allow_unix_sockets: bool, allow_exec: bool = False
) -> tuple[list[Insn], list[Insn]]:
    """(ours, libseccomp's), decoded."""
    kw = {"allow_fork": allow_fork, "allow_unix_sockets": allow_unix_sockets, "arch": arch, "allow_exec": allow_exec}
    return decode(_seccomp.build_bpf(**kw), arch), decode(_seccomp.reference_bpf(**kw), arch)


def audit_arch(arch: int) -> int:
    return 0xC000003E if arch == pyseccomp.Arch.X32 else arch


def differences(arch: int, allow_fork: bool, allow_unix_sockets: bool, allow_exec: bool = False) -> list[str]:
    """Run both programs on every input; describe (some of) the inputs where they differ."""
    ours, reference = programs(arch, allow_fork, allow_unix_sockets, allow_exec)
    native = audit_arch(arch)
    rng = random.Random(3)
    plain = [(0,) * 6, (U64,) * 6, tuple(rng.getrandbits(64) for _ in range(6))]
    inputs = [(nr, native, args) for nr in sorted(syscall_numbers(arch)) for args in plain]
    for wrong in sorted(
        {native ^ 1, native ^ 0x40000000, native ^ 0x80000000, 0, U32, 0x40000003, 0x4000003E}
    ):
        inputs += [(nr, wrong, (0,) * 6) for nr in (0, 1, 39, 59, 231, 0x40000027, U32)]
    checked = sorted(numbers_of(arch, ARGUMENT_CHECKED) | {
        nr for nr, d in _seccomp.syscall_table(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets,
                                               arch=arch, allow_exec=allow_exec).items() if isinstance(d, _seccomp.ArgTest)
    })  # fmt: skip
    order = ">" if big_endian(arch) else "<"
    vectors = argument_vectors(interesting_values())
    data = np.concatenate([
        pack(inputs, order),
        seccomp_data(np.repeat(np.array(checked, dtype=np.uint32), len(vectors)),
                     np.full(len(checked) * len(vectors), native, dtype=np.uint32),
                     np.tile(vectors, (len(checked), 1)), order),
    ])  # fmt: skip
    a, b = execute(ours, data), execute(reference, data)
    found: list[str] = []
    for i in np.flatnonzero(a != b)[:20]:
        row = data[i].astype(">u4" if order == ">" else "<u4").tobytes()
        number, arch_value, _, *args = struct.unpack(order + "IIQ6Q", row)
        try:
            name = pyseccomp.resolve_syscall(arch, number).decode()
        except ValueError:
            name = "?"
        found.append(f"nr {number:#x} ({name}) arch {arch_value:#x} args {[hex(x) for x in args]}: "
                     f"ours {a[i]:#x}, libseccomp {b[i]:#x}")  # fmt: skip
    assert len(data) > 10_000
    return found


@pytest.mark.parametrize(("allow_fork", "allow_unix_sockets"), VARIANTS)
def test_same_answers_as_libseccomp(allow_fork: bool, allow_unix_sockets: bool) -> None:
    """This machine's programs."""
    found = differences(NATIVE, allow_fork, allow_unix_sockets)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(("allow_fork", "allow_unix_sockets"), VARIANTS)
def test_the_exec_variants_answer_as_libseccomp_and_differ_only_in_exec(allow_fork: bool, allow_unix_sockets: bool) -> None:
    """A run of another language's program (``allow_exec``): the same filter but for execve and
    execveat, allowed; ours answers as libseccomp's on every input."""
    found = differences(NATIVE, allow_fork, allow_unix_sockets, True)
    assert not found, "\n".join(found)
    kw = {"allow_fork": allow_fork, "allow_unix_sockets": allow_unix_sockets, "arch": NATIVE}
    plain, exec_ = _seccomp.syscall_table(**kw), _seccomp.syscall_table(**kw, allow_exec=True)
    changed = {nr for nr in plain.keys() | exec_.keys() if plain.get(nr) != exec_.get(nr)}
    assert changed == numbers_of(NATIVE, ("execve", "execveat")) and {exec_[nr] for nr in changed} == {_seccomp.ACTION_ALLOW}


# fmt: off
ARCHES = [
    pytest.param(getattr(pyseccomp.Arch, name), id=name.lower())
    for name in ("X86", "X86_64", "X32", "ARM", "AARCH64", "PPC64LE", "PPC64", "PPC", "S390X", "S390",
                 "RISCV64", "MIPSEL64", "MIPSEL", "MIPS", "MIPS64", "MIPSEL64N32")
    if hasattr(pyseccomp.Arch, name)
]
# fmt: on


def known_to_libseccomp(arch: int) -> bool:
    probe = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    probe.remove_arch(pyseccomp.Arch.NATIVE)
    try:
        probe.add_arch(arch)
    except OSError:
        return False
    return True


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize(("allow_fork", "allow_unix_sockets"), VARIANTS)
def test_same_answers_as_libseccomp_elsewhere(
    arch: int, allow_fork: bool, allow_unix_sockets: bool
) -> None:
    """Each architecture libseccomp knows, compiled here: the big-endian argument words, s390's
    clone and mmap, the socketcall/ipc multiplexers of i386, s390, ppc and mips, x32 (the reverse
    of x86_64's check), which no test can run on this machine."""
    if not known_to_libseccomp(arch):
        pytest.skip("this libseccomp does not know the architecture")
    found = differences(arch, allow_fork, allow_unix_sockets)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("arch", [pytest.param(NATIVE, id="native"), *ARCHES])
@pytest.mark.parametrize(("allow_fork", "allow_unix_sockets"), VARIANTS)
def test_short_and_well_formed(arch: int, allow_fork: bool, allow_unix_sockets: bool) -> None:
    if not known_to_libseccomp(arch):
        pytest.skip("this libseccomp does not know the architecture")
    ours, reference = programs(arch, allow_fork, allow_unix_sockets)
    check_structure(ours)
    check_structure(reference)
    assert len(ours) <= MAX_INSTRUCTIONS, (len(ours), len(reference))
    assert len(ours) * 3 < len(reference)


def test_compiled_is_ours() -> None:
    for fork in (False, True):
        for unix in (False, True):
            assert _seccomp.compiled(
                allow_fork=fork, allow_unix_sockets=unix
            ) == _seccomp.build_bpf(allow_fork=fork, allow_unix_sockets=unix)


def test_far_jumps_go_through_trampolines() -> None:
    """A search over more ranges than a conditional jump can span: each far branch goes through
    a trampoline, and the answers stay right (checked with the interpreter)."""
    target = _seccomp.Target.of(pyseccomp, pyseccomp.Arch.X86_64)
    eperm, allow, enosys = _seccomp.ACTION_EPERM, _seccomp.ACTION_ALLOW, _seccomp.ACTION_ENOSYS
    test = _seccomp.arg_test(1, [5, 6, 7, 9, 1000], eperm, allow)
    table: dict[int, _seccomp.Decision] = {
        nr: (eperm, allow, test)[nr % 3] for nr in range(0, 1000, 2)
    }
    program = _seccomp.assemble(table, target, default=enosys, badarch=pyseccomp.KILL_PROCESS)
    insns = decode(program, pyseccomp.Arch.X86_64)
    check_structure(insns)
    assert len(insns) > 2 * 256
    trampolines = (
        sum(code == JA for code, *_ in insns) + sum(code == RET_K for code, *_ in insns) - 4
    )
    assert trampolines > 0  # 4: one return per action, and no more, but for trampolines
    inputs, expected = [], []
    for nr in [*range(0, 1002), 0x40000000, U32]:
        for arg in (0, 5, 7, 8, 9, 1000, 1001, 1 << 32 | 6):
            want = table.get(nr, enosys) if nr < 0x40000000 or nr == U32 else pyseccomp.KILL_PROCESS
            if isinstance(want, _seccomp.ArgTest):
                want = eperm if arg & U32 in want.values else allow
            inputs.append((nr, 0xC000003E, (0, arg, 0, 0, 0, 0)))
            expected.append(want)
    assert execute(insns, pack(inputs, "<")).tolist() == expected


def decide(decision: _seccomp.Decision, args: tuple[int, ...]) -> int:
    """What a decision answers for ``args``, evaluated directly (the oracle of the compiler)."""
    while isinstance(decision, _seccomp.ArgTest):
        word = args[decision.arg] & U32 & decision.mask
        decision = decision.then if word in decision.values else decision.otherwise
    return decision


def random_test(rng: random.Random, depth: int = 0) -> _seccomp.ArgTest:
    """An argument test of each shape ``_emit_test`` knows: no mask, a one-bit or a wide mask, a
    zero test, values in runs (from 0, up to the top word, in between) and alone, nested."""
    actions = (_seccomp.ACTION_ALLOW, _seccomp.ACTION_EPERM, pyseccomp.KILL_PROCESS)
    mask = rng.choice([U32, U32, 1 << rng.randrange(32), 0xFF00, 0o170000, 0x7E028080])
    shape = rng.randrange(5)
    if shape == 0:
        values = {0}
    elif shape == 1:
        values = {mask}
    else:
        top = mask if mask != U32 else U32
        values = {rng.randrange(top + 1) & mask for _ in range(rng.randrange(1, 6))}
        if shape == 3:
            values |= {v & mask for v in range(rng.randrange(1, 5))}  # a run from 0
        values |= {v for base in list(values) for v in range(base, base + 3) if v & mask == v}
        if shape == 4 and mask == U32:
            below = rng.randrange(2)  # a run up to the top word, or to just below it
            values = {v for v in values if v < top - 8}
            values |= {top - v for v in range(below, below + rng.randrange(1, 5))}

    def leaf() -> _seccomp.Decision:
        return (
            random_test(rng, depth + 1) if depth < 2 and rng.random() < 0.3 else rng.choice(actions)
        )

    return _seccomp.ArgTest(rng.randrange(6), frozenset(values), leaf(), leaf(), mask)


@pytest.mark.parametrize("seed", range(40))
def test_compiler_against_direct_evaluation(seed: int) -> None:
    """Random tables (numbers in clusters, decisions among three actions and random tests), both
    byte orders, with and without another ABI's numbers: the program answers as the table
    says, on every number around the table and on argument values around each test's."""
    rng = random.Random(seed)
    arch = rng.choice([pyseccomp.Arch.X86_64, pyseccomp.Arch.AARCH64, pyseccomp.Arch.S390X,
                       pyseccomp.Arch.PPC64, pyseccomp.Arch.X32])  # fmt: skip
    target = _seccomp.Target.of(pyseccomp, arch)
    tests = [random_test(rng) for _ in range(rng.randrange(1, 8))]
    choices: list[_seccomp.Decision] = [_seccomp.ACTION_ALLOW, _seccomp.ACTION_EPERM, *tests]
    base = 0x40000000 if arch == pyseccomp.Arch.X32 else 0
    numbers = {
        base + rng.randrange(n) for n in (50, 400, 400, 3000) for _ in range(rng.randrange(60))
    }
    numbers |= {base + n for n in range(rng.randrange(300), 320)}  # a dense run
    table = {nr: rng.choice(choices) for nr in numbers}
    default, badarch = _seccomp.ACTION_ENOSYS, pyseccomp.KILL_PROCESS
    insns = decode(_seccomp.assemble(table, target, default=default, badarch=badarch), arch)
    check_structure(insns)

    def expected(nr: int, arch_value: int, args: tuple[int, ...]) -> int:
        if arch_value != target.audit_arch or any(
            lo <= nr <= hi for lo, hi in target.foreign_numbers
        ):
            return badarch
        return decide(table.get(nr, default), args)

    probe = {(v + d) & U64 for t in tests for v in t.values for d in (-1, 0, 1)}
    probe |= {0, U32, U64, 1 << 32} | {rng.getrandbits(64) for _ in range(50)}
    probe_list = sorted(probe)
    inputs = []
    for nr in sorted({(n + d) & U32 for n in [*table, base, U32, 0x40000000] for d in (-1, 0, 1)}):
        for _ in range(4 if isinstance(table.get(nr), _seccomp.ArgTest) else 1):
            inputs.append((nr, target.audit_arch, tuple(rng.choice(probe_list) for _ in range(6))))
    for t in tests:  # each test's own argument through every probe value
        nr = next(n for n, d in table.items() if d == t) if t in table.values() else None
        if nr is not None:
            inputs += [
                (nr, target.audit_arch, (*(0,) * t.arg, v, *(0,) * (5 - t.arg))) for v in probe_list
            ]
    inputs.append((base, target.audit_arch ^ 1, (0,) * 6))
    got = execute(insns, pack(inputs, ">" if target.big_endian else "<")).tolist()
    want = [expected(*i) for i in inputs]
    wrong = [
        (hex(i[0]), [hex(a) for a in i[2]], hex(g), hex(w))
        for i, g, w in zip(inputs, got, want, strict=True)
        if g != w
    ]
    assert not wrong, wrong[:5]


# ---------------------------------------------------------------------------------------------
# the kernel takes it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
@pytest.mark.parametrize(("allow_fork", "allow_unix_sockets"), VARIANTS)
def test_kernel_loads_it(allow_fork: bool, allow_unix_sockets: bool) -> None:
    """A forked child loads the program (as a run does, ``SeccompProgram.install``), prints, is
    refused an AF_INET socket and execve (EPERM), gets an AF_UNIX pair where the variant allows
    it, and exits 0."""
    program = _seccomp.build_bpf(allow_fork=allow_fork, allow_unix_sockets=allow_unix_sockets)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            os.dup2(w, 1)
            _child.SeccompProgram(program).install()
            out = []
            for what, attempt in (
                ("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
                ("execve", lambda: os.execv("/bin/true", ["/bin/true"])),
                ("unixpair", socket.socketpair),
            ):
                try:
                    attempt()
                    out.append(f"{what}=ok")
                except OSError as exc:
                    out.append(f"{what}={errno.errorcode.get(exc.errno or 0, exc.errno)}")
            os.write(
                1, (" ".join(out) + "\n").encode()
            )  # fd 1 is the pipe (pytest holds sys.stdout)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        output = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    unix = "ok" if allow_unix_sockets else "EPERM"
    assert output == f"inet=EPERM execve=EPERM unixpair={unix}\n"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the numbers are x86_64's")
def test_x86_64_layout() -> None:
    """On this machine's ABI: the x32 range is killed by the search itself, -1 answers ENOSYS."""
    ours, _ = programs(pyseccomp.Arch.X86_64, False, True)

    def action(nr: int) -> int:
        return int(execute(ours, pack([(nr, 0xC000003E, (0,) * 6)], "<"))[0])

    assert action(39) == pyseccomp.ALLOW  # getpid
    assert action(59) == pyseccomp.ERRNO(errno.EPERM)  # execve
    assert action(435) == pyseccomp.ERRNO(errno.ENOSYS)  # clone3
    assert (
        action(0x40000000 | 39) == action(0x7FFFFFFF) == action(U32 - 1) == pyseccomp.KILL_PROCESS
    )
    assert action(U32) == pyseccomp.ERRNO(errno.ENOSYS)
