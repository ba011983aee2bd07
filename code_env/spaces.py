"""``AnyText``: a Gymnasium space of any Python string up to a length.

Gymnasium's ``Text`` space admits only a fixed character set (letters and digits by default), but a
program's source, its stdout and its tracebacks hold any character — newlines, tabs, non-ASCII,
even lone surrogates from invalid UTF-8 decoded with ``surrogateescape``. Mangling those to fit a
character set would lie to the agent, so this space accepts every ``str`` of at most
``max_length`` characters.

How Gymnasium's machinery takes it:

* vector envs batch it as ``AnyTextBatch`` (a tuple of strings); ``AsyncVectorEnv``'s shared
  memory for it is an anonymous in-memory file per sub-env (``SharedTexts``): no helper process,
  nothing that outlives ``close()``;
* ``FlattenObservation`` and ``gymnasium.spaces.utils.flatten`` turn it into ``max_length``
  integers: ``ord(c) + 1`` per character, then zeros (``unflatten`` gives the string back, any
  character included);
* it has no array ``shape``: asking for one (as Stable-Baselines3 does of every observation) raises
  a ``TypeError`` that says what to use instead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from multiprocessing import context as mp_context
from multiprocessing import reduction
from typing import Any, overload

import numpy as np
from gymnasium.spaces import Box, Space
from gymnasium.spaces import utils as space_utils
from gymnasium.spaces.utils import flatdim, flatten, flatten_space, unflatten
from gymnasium.vector.utils import (
    batch_space,
    concatenate,
    create_empty_array,
    create_shared_memory,
    iterate,
    read_from_shared_memory,
    write_to_shared_memory,
)

# sample() draws from these: printable ASCII, whitespace and a few non-ASCII characters
_ALPHABET = [chr(c) for c in range(32, 127)] + ["\n", "\t", "é", "λ", "→", "中", "🙂"]
MAX_CODE = 0x110000  # a flattened character: ord(c) + 1, so 1 .. 0x110000; 0 pads

NO_SHAPE = (
    "{space} is a text space: its elements are Python strings, with no array shape or dtype, so a "
    "library that needs numeric observations and actions (Stable-Baselines3 and the like) cannot "
    "take it. CodeExec-v0's actions and observations are text: for a fixed-action-space library "
    "use CodeExecTokens-v0 (Discrete tokens, a Box observation: PPO(\"MlpPolicy\", "
    "\"CodeExecTokens-v0\") works), or drive CodeExec-v0 with an LLM policy that writes programs "
    "(code_env.evaluate judges a batch of them, code_env.grade one)."
)


class AnyText(Space[str]):
    """Any ``str`` with ``len(x) <= max_length``.

    >>> space = AnyText(10)
    >>> space.contains("print('λ')\\n")
    False
    >>> space.contains("x\\ty\\n→")
    True
    >>> from gymnasium.spaces.utils import flatten, unflatten
    >>> flatten(AnyText(4), "hi").tolist()
    [105, 106, 0, 0]
    >>> unflatten(AnyText(4), flatten(AnyText(4), "λ\\n"))
    'λ\\n'
    """

    def __init__(self, max_length: int, *, seed: int | np.random.Generator | None = None) -> None:
        if not isinstance(max_length, int) or max_length < 0:
            raise ValueError(f"max_length: expected an int >= 0, got {max_length!r}")
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def shape(self) -> tuple[int, ...] | None:
        """No array shape: raises ``TypeError``, with what to use instead (see the module)."""
        raise TypeError(NO_SHAPE.format(space=self))

    @property
    def is_np_flattenable(self) -> bool:
        return True  # to max_length character codes

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise ValueError("AnyText.sample takes no mask or probability")
        n = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        return "".join(_ALPHABET[i] for i in self.np_random.integers(0, len(_ALPHABET), size=n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("AnyText", self.max_length))


class AnyTextBatch(Space[tuple[str, ...]]):
    """A batch of ``n`` strings (a tuple), as vector environments hand them over."""

    def __init__(self, single: AnyText, n: int) -> None:
        self.single, self.n = single, n
        super().__init__(shape=None, dtype=None)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> tuple[str, ...]:
        return tuple(self.single.sample() for _ in range(self.n))

    def contains(self, x: Any) -> bool:
        return (isinstance(x, Sequence) and not isinstance(x, str) and len(x) == self.n
                and all(self.single.contains(s) for s in x))  # fmt: skip

    def __repr__(self) -> str:
        return f"AnyTextBatch({self.single.max_length}, n={self.n})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyTextBatch) and other.single == self.single and other.n == self.n

    def __hash__(self) -> int:
        return hash(("AnyTextBatch", self.single.max_length, self.n))


# How vector environments batch, split and stack these spaces (Gymnasium dispatches on the type).


@batch_space.register(AnyText)
def _batch(space: AnyText, n: int = 1) -> AnyTextBatch:
    return AnyTextBatch(space, n)


@iterate.register(AnyTextBatch)
def _iterate(space: AnyTextBatch, items: Sequence[str]) -> Any:  # type: ignore[misc]  # singledispatch generics
    return iter(items)


@concatenate.register(AnyText)
def _concatenate(space: AnyText, items: Sequence[str], out: Any) -> tuple[str, ...]:
    return tuple(items)


@create_empty_array.register(AnyText)
def _empty(space: AnyText, n: int = 1, fn: Any = np.zeros) -> tuple[str, ...]:
    return ("",) * n


# FlattenObservation: ord(c) + 1 per character, zeros after the last (a character may be "\x00").


@flatdim.register(AnyText)
def _flatdim(space: AnyText) -> int:
    return space.max_length


@flatten_space.register(AnyText)
def _flatten_space(space: AnyText) -> Box:
    return Box(0, MAX_CODE, shape=(space.max_length,), dtype=np.int32)


@flatten.register(AnyText)
def _flatten(space: AnyText, x: str) -> np.ndarray:  # type: ignore[misc]  # singledispatch generics
    if not space.contains(x):
        raise ValueError(f"flatten: expected a str of at most {space.max_length} characters, got {_describe(x)}")
    codes = np.frombuffer(x.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    out = np.zeros(space.max_length, dtype=np.int32)
    out[: codes.size] = codes.astype(np.int32) + 1
    return out


@unflatten.register(AnyText)
def _unflatten(space: AnyText, x: Any) -> str:  # type: ignore[misc]  # singledispatch generics
    arr = np.asarray(x)
    if arr.shape != (space.max_length,) or arr.dtype.kind not in "iu":
        raise ValueError(f"unflatten: expected {space.max_length} integer codes, got shape {arr.shape} of {arr.dtype}")
    end = np.flatnonzero(arr == 0)
    codes = arr[: end[0] if end.size else arr.size].astype(np.int64)
    if codes.size and (codes.min() < 1 or codes.max() > MAX_CODE):
        raise ValueError(f"unflatten: character codes are 1..{MAX_CODE} (0 pads), got {codes.min()}..{codes.max()}")
    return (codes - 1).astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


# The dtype of the Box it flattens to, for a Tuple or OneOf around it (Gymnasium's own dispatch for
# this is private: registered when it is there).
if hasattr(space_utils, "_flat_dtype"):
    space_utils._flat_dtype.register(AnyText)(lambda space: np.dtype(np.int32))


def _describe(x: Any) -> str:
    return f"a str of {len(x)} characters" if isinstance(x, str) else type(x).__name__


# AsyncVectorEnv's shared memory. Text has no fixed size, so each sub-env's text lives in an
# anonymous in-memory file (memfd; an unlinked temp file where there is none): the worker rewrites
# it, the main process reads it when the observation is looked at. File descriptors, not processes:
# nothing to start, nothing to shut down, and the files go with the last descriptor.


def _anonymous_file() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("code-env-text", os.MFD_CLOEXEC)
    fd, path = tempfile.mkstemp(prefix="code-env-text-")
    os.unlink(path)
    return fd


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):  # at interpreter exit a descriptor may be gone already
            os.close(fd)


class SharedTexts(Sequence[str]):
    """``n`` strings that an ``AsyncVectorEnv``'s workers write and its main process reads: what
    ``create_shared_memory`` makes for an ``AnyText`` and ``read_from_shared_memory`` returns. A
    live view (every read sees the latest write); a copy (``copy.deepcopy``, as ``AsyncVectorEnv``
    makes with ``copy=True``) is a plain tuple of strings. It reaches the workers by inheritance
    (fork) or, when they are started afresh (spawn, forkserver), with its descriptors duplicated
    into them, as multiprocessing does for its own shared memory."""

    def __init__(self, n: int, fds: list[int] | None = None) -> None:
        self._fds = fds if fds is not None else [_anonymous_file() for _ in range(n)]
        self._closer = weakref.finalize(self, _close_all, list(self._fds))

    def write(self, index: int, value: str) -> None:
        data = value.encode("utf-8", "surrogatepass")
        fd = self._fds[index]
        os.ftruncate(fd, len(data))
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], written)

    def _read(self, index: int) -> str:
        fd = self._fds[index]
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        got = 0
        while got < size:
            chunk = os.pread(fd, size - got, got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks).decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._fds)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self._read(i) for i in range(len(self._fds))[index])
        return self._read(range(len(self._fds))[index])

    def __iter__(self) -> Iterator[str]:
        return (self._read(i) for i in range(len(self._fds)))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        mp_context.assert_spawning(self)  # only into a process being started, like mp.Array
        return _rebuild, ([reduction.DupFd(fd) for fd in self._fds],)

    def close(self) -> None:
        """Close the descriptors now (else when the last reference goes)."""
        self._closer()


def _rebuild(dup_fds: list[Any]) -> SharedTexts:
    fds = [d.detach() for d in dup_fds]
    return SharedTexts(len(fds), fds)


@create_shared_memory.register(AnyText)
def _shared(space: AnyText, n: int = 1, ctx: Any = None) -> SharedTexts:
    return SharedTexts(n)


@read_from_shared_memory.register(AnyText)
def _read_shared(space: AnyText, shared_memory: SharedTexts, n: int = 1) -> SharedTexts:
    if len(shared_memory) != n:
        raise ValueError(f"read_from_shared_memory: the shared memory holds {len(shared_memory)} texts, not {n}")
    return shared_memory


@write_to_shared_memory.register(AnyText)
def _write_shared(space: AnyText, index: int, value: str, shared_memory: SharedTexts) -> None:
    shared_memory.write(index, value)
