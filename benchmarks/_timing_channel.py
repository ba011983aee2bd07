"""The CPU-contention timing channel between runs of different graders, measured.

In one process the grader never runs a program's hidden tests beside a run whose output the agent
sees (``registry.phases``). Graders in other processes on the same machine are not ordered by
that lock: the channel left between a hidden run (which sees the hidden inputs) and a visible one
is the machine's CPUs. This module measures how much it carries.

Two ``Sandbox`` instances stand for two graders. The *sender* runs (``senders`` copies, one per
worker: a policy writes many samples) agree with the *receiver* on slots of the wall clock
(``CLOCK_REALTIME`` is the host's in every jail): in slot ``i`` they spin when bit ``i`` of a known
random pattern is 1 and sleep when it is 0. The receiver spins through every slot and counts its
own loop iterations in the slot's middle (its progress); it prints the counts, which is all an
agent would see. The host decodes them: bit 1 where a count falls below the midpoint of the
quartiles of the counts around it (a window of ``WINDOW`` slots, so a drift of the machine's load
does not bias it), and
compares with the pattern it chose. Reported per slot length: the raw rate (slots/s), the bit
error rate ``p``, and the capacity of that binary symmetric channel, ``slots/s * (1 - H(p))``.
"""

from __future__ import annotations

import math
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from sandbox import ExecutionResult, Limits, Sandbox

WINDOW = 32  # slots around each one whose quartiles set its threshold
LEAD_S = 1.5  # from the host's choice of the first slot to its start: both programs are running by then
GUARD = 0.2  # the share of a slot, at each end, the receiver does not count (clock and wake-up skew)

SENDER = """
import time
T0, SLOT, BITS = {t0!r}, {slot!r}, {bits!r}
for i, b in enumerate(BITS):
    start, end = T0 + i * SLOT, T0 + (i + 1) * SLOT
    now = time.time()
    if now < start:
        time.sleep(start - now)
    if b == "1":
        while time.time() < end:
            pass
    else:
        now = time.time()
        if now < end:
            time.sleep(end - now)
"""

RECEIVER = """
import time
T0, SLOT, N, GUARD = {t0!r}, {slot!r}, {n!r}, {guard!r}
counts = []
for i in range(N):
    start, end = T0 + (i + GUARD) * SLOT, T0 + (i + 1 - GUARD) * SLOT
    while time.time() < start:
        pass
    n = 0
    while time.time() < end:
        n += 1
    counts.append(n)
print(" ".join(map(str, counts)))
"""


@dataclass(frozen=True)
class ChannelResult:
    """One slot length's measurement."""

    where: Literal["sandbox", "host"]
    slot_ms: float
    slots: int
    senders: int
    raw_bits_per_s: float
    bit_errors: int
    bit_error_rate: float
    capacity_bits_per_s: float
    capacity_range: tuple[float, float]  # over the 95 % Wilson interval of the bit error rate


def entropy(p: float) -> float:
    """The binary entropy ``H(p)`` in bits."""
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def wilson(errors: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of an error rate of ``errors`` in ``n``."""
    p = errors / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def capacity_range(errors: int, n: int, rate: float) -> tuple[float, float]:
    """The capacity ``rate * (1 - H(p))`` over the interval of ``p`` (0 at its low end when the
    interval holds 0.5: then the channel may carry nothing)."""
    lo, hi = wilson(errors, n)
    ends = [rate * (1 - entropy(lo)), rate * (1 - entropy(hi))]
    return (0.0 if lo <= 0.5 <= hi else min(ends)), max(ends)


def decode(counts: list[int], window: int = WINDOW) -> list[int]:
    """Bit 1 where the receiver progressed less than the counts around it: below the midpoint of
    their quartiles (the two levels' middle, also when a window holds more of one bit)."""
    half = window // 2
    out = []
    for i, c in enumerate(counts):
        lo = max(0, min(i - half, len(counts) - window))
        q1, _, q3 = statistics.quantiles(counts[lo:lo + window], n=4)
        out.append(int(c < (q1 + q3) / 2))
    return out


def _through_sandboxes(bits: str, slot: float, senders: int) -> str:
    """The receiver's output, senders and receiver each in their own ``Sandbox``."""
    budget = LEAD_S + len(bits) * slot + 10
    limits = Limits(timeout_s=budget, cpu_time_s=budget, memory_mb=256)
    with Sandbox("process", workers=senders) as tx, Sandbox("process", workers=1) as rx:
        tx.run_many(["pass"] * senders)  # the workers are up before the clock starts
        rx.run("pass")
        t0 = time.time() + LEAD_S
        sent: list[ExecutionResult] = []
        thread = threading.Thread(target=lambda: sent.extend(
            tx.run_many([SENDER.format(t0=t0, slot=slot, bits=bits)] * senders, limits=limits)))  # fmt: skip
        thread.start()
        got = rx.run(RECEIVER.format(t0=t0, slot=slot, n=len(bits), guard=GUARD), limits=limits)
        thread.join()
    for r in [*sent, got]:
        if r.exit_code != 0:
            raise RuntimeError(f"a channel run failed: exit {r.exit_code}, {r.sandbox_error or r.stderr[-500:]}")
    return got.stdout


def _through_host_processes(bits: str, slot: float, senders: int) -> str:
    """The receiver's output, the same programs as plain processes of the host (the anchor)."""
    t0 = time.time() + LEAD_S
    timeout = LEAD_S + len(bits) * slot + 10
    tx = [subprocess.Popen([sys.executable, "-I", "-c", SENDER.format(t0=t0, slot=slot, bits=bits)]) for _ in range(senders)]
    try:
        got = subprocess.run([sys.executable, "-I", "-c", RECEIVER.format(t0=t0, slot=slot, n=len(bits), guard=GUARD)],
                             capture_output=True, text=True, timeout=timeout, check=True)  # fmt: skip
    finally:
        for p in tx:
            p.wait(timeout=timeout)
    return got.stdout


def measure(slot_ms: float, slots: int, *, senders: int, seed: int = 0,
            where: Literal["sandbox", "host"] = "sandbox") -> ChannelResult:  # fmt: skip
    """Send ``slots`` random bits (``seed``) through the CPUs from one sandbox to another (or,
    ``where="host"``, between the same programs run as plain host processes)."""
    rng = random.Random(seed)
    bits = "".join(rng.choice("01") for _ in range(slots))
    slot = slot_ms / 1000
    transmit = _through_sandboxes if where == "sandbox" else _through_host_processes
    counts = [int(x) for x in transmit(bits, slot, senders).split()]
    if len(counts) != slots:
        raise RuntimeError(f"the receiver counted {len(counts)} slots of {slots}")
    errors = sum(b != int(s) for b, s in zip(decode(counts), bits, strict=True))
    p = errors / slots
    rate = 1000 / slot_ms
    return ChannelResult(where=where, slot_ms=slot_ms, slots=slots, senders=senders, raw_bits_per_s=rate, bit_errors=errors,
                         bit_error_rate=p, capacity_bits_per_s=rate * (1 - entropy(p)),
                         capacity_range=capacity_range(errors, slots, rate))  # fmt: skip


def table(results: list[ChannelResult], *, cores: int, when: str) -> str:
    """The README's table of a measurement."""
    lines = [
        f"Measured {when} on {cores} cores (`pytest benchmarks/test_timing_channel.py --save-results`): "
        f"{results[0].senders} sender run(s) in one `Sandbox`, one receiver run in another, the same machine; "
        "random bits, decoded against the receiver's progress in the 32 slots around each (the midpoint of its quartiles). "
        "The anchor: the same programs as plain processes of the host, right after.",
        "",
        "| slot | between | slots sent | raw bits/s | bit error rate | capacity bits/s (`slots/s × (1 - H(p))`) | "
        "capacity over the 95 % interval of `p` |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        between = "two `Sandbox`es" if r.where == "sandbox" else "host processes (anchor)"
        lines.append(f"| {r.slot_ms:g} ms | {between} | {r.slots} | {r.raw_bits_per_s:.0f} | {r.bit_error_rate:.3f} | "
                     f"{r.capacity_bits_per_s:.1f} | {r.capacity_range[0]:.1f} – {r.capacity_range[1]:.1f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def as_json(results: list[ChannelResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
