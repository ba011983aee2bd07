"""``AnyText``: a Gymnasium space of any Python string up to a length.

Gymnasium's ``Text`` space admits only a fixed character set (letters and digits by default), but a
program's source, its stdout and its tracebacks hold any character — newlines, tabs, non-ASCII,
even lone surrogates from invalid UTF-8 decoded with ``surrogateescape``. Mangling those to fit a
character set would lie to the agent, so this space accepts every ``str`` of at most
``max_length`` characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space
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


class AnyText(Space[str]):
    """Any ``str`` with ``len(x) <= max_length``.

    >>> space = AnyText(10)
    >>> space.contains("print('λ')\\n")
    False
    >>> space.contains("x\\ty\\n→")
    True
    """

    def __init__(self, max_length: int, *, seed: int | np.random.Generator | None = None) -> None:
        if not isinstance(max_length, int) or max_length < 0:
            raise ValueError(f"max_length: expected an int >= 0, got {max_length!r}")
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

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
        return isinstance(x, (tuple, list)) and len(x) == self.n and all(self.single.contains(s) for s in x)

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


# AsyncVectorEnv's shared memory: text has no fixed size, so the "shared memory" of an AnyText is a
# list served by a multiprocessing manager (one per vector env; it lives as long as the process).
_managers: list[Any] = []


@create_shared_memory.register(AnyText)
def _shared(space: AnyText, n: int = 1, ctx: Any = None) -> Any:
    import multiprocessing as mp

    manager = (ctx or mp).Manager()
    _managers.append(manager)
    return manager.list([""] * n)


@read_from_shared_memory.register(AnyText)
def _read_shared(space: AnyText, shared_memory: Any, n: int = 1) -> tuple[str, ...]:
    return tuple(shared_memory[:n])


@write_to_shared_memory.register(AnyText)
def _write_shared(space: AnyText, index: int, value: str, shared_memory: Any) -> None:
    shared_memory[index] = value
