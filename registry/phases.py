"""Hidden tests never run beside visible ones: the phase lock of ``verify_many``.

A program's hidden runs see the hidden inputs; its public runs write what the agent reads
(feedback, stdout, stderr). Were they to run at the same moment, any channel between two runs
(a lock on a shared file, an inotify watch, the machine's load) could carry the hidden inputs
into the feedback. The sandbox's filter closes the kernel objects two jails could share; this
lock removes the overlap itself: in one process, runs of the ``"hidden"`` phase and runs of the
``"public"`` phase never run at the same time, whichever threads, graders, environments or
runners ask. Runs of one phase run together (a batch, or concurrent threads of one phase).

Fairness: while a thread of one phase waits, no new thread of the phase holding the lock enters,
so that neither phase starves the other (a busy LLM agent's public turns cannot hold back every
hidden verification). Processes do not share the lock: executors of other processes on the same
machine (``SubprocVecEnv`` workers with their own sandboxes, other trainers) can overlap; what
they could share is closed by the sandbox's filter, which leaves timing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Literal

Phase = Literal["public", "hidden"]


class PhaseLock:
    """Two classes of holders: any number of one class at a time, never both."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active: Phase | None = None
        self._holders = 0
        self._waiting: dict[Phase, int] = {"public": 0, "hidden": 0}
        self._last: Phase | None = None

    @contextmanager
    def hold(self, which: Phase) -> Iterator[None]:
        if which not in ("public", "hidden"):
            raise ValueError(f"phase: expected 'public' or 'hidden', got {which!r}")
        other: Phase = "hidden" if which == "public" else "public"
        with self._cond:
            self._waiting[which] += 1
            try:
                while not self._may_enter(which, other):
                    self._cond.wait()
            finally:
                self._waiting[which] -= 1
            self._active, self._last = which, which
            self._holders += 1
        try:
            yield
        finally:
            with self._cond:
                self._holders -= 1
                if self._holders == 0:
                    self._active = None
                self._cond.notify_all()

    def _may_enter(self, which: Phase, other: Phase) -> bool:
        if self._active is None:  # free: the phase that did not go last goes first when both wait
            return not self._waiting[other] or self._last != which
        return self._active == which and not self._waiting[other]

    @property
    def active(self) -> Phase | None:
        """The phase running now (None: no run of either)."""
        return self._active


PHASES = PhaseLock()


def phase(which: Phase) -> AbstractContextManager[None]:
    """Hold the process's phase lock for ``which`` (a context manager)."""
    return PHASES.hold(which)
