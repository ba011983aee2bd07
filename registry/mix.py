"""Mixing task sets: ``registry.mix({"builtin": 1, "synthetic:list": 2}, n=300, seed=0)``, or the
same mix by name wherever a task-set name is taken:
``registry.load("mix:builtin=1,synthetic:list=2", n=300, seed=0)`` (``gym.make("CodeExec-v0",
tasks=...)``, ``code_env.trl_dataset``, a baseline's ``env.json`` ``task_set``, ``code-env tasks
list --set``).

The seeds' advice for RL on code is to mix synthetic and curated tasks (1:1 to 2:1) and to sample
by difficulty. A mix is deterministic: the same sets, ratios, ``n`` and ``seed`` give the same
tasks in the same order.

* **Ratios** are relative (``{"a": 1, "b": 2}`` is ``{"a": 0.5, "b": 1}``): of ``n`` tasks, each
  set gets its share, rounded by largest remainder (ties to the set named first), so the counts
  depend on the ratios and ``n`` only, never on the seed.
* **Stratified by difficulty**: each set's draw keeps that set's own mix of difficulties. A set
  with a fixed list of tasks (``builtin``, ``humaneval``, a ``.jsonl`` file) gets its share split
  over its difficulty bands in proportion to their sizes (largest remainder again), and the tasks
  of each band are drawn at random with the seed. A generated set (``synthetic:<family>``) is
  generated with the mix's ``seed`` and the size of its share; its difficulties run 1-5 in turn,
  so its draw is stratified by construction.
* **Problem ids are the sets' own**: a generated task's id still makes it again
  (``registry.resolve``), a ``builtin/...`` id still names its task. No id appears twice: when two
  sets share ids (a ``.jsonl`` copy of ``builtin``), the set named first keeps them and the later
  one draws from the rest.
* The result is shuffled with the seed, so the sets are interleaved (a consumer that takes the
  first ``k`` tasks gets about the ratios).

The name form: ``mix:`` then ``NAME=RATIO`` entries separated by commas; a ratio left out is 1;
two reserved entries, ``n=INT`` and ``seed=INT``, carry the size and the seed for callers that
pass no parameters (the CLI). ``NAME`` is any task-set name but a mix, or a ``.jsonl`` path without
a comma (with an ``=`` in it, give its ratio: the last ``=`` splits). ``n`` defaults to 100, or to
the most tasks the sets can give in these ratios when that is fewer; ``seed`` defaults to 0.
"""

from __future__ import annotations

import difflib
import math
import numbers
import random
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from . import loaders
from .errors import RegistryError, UnknownTaskSetError
from .sampling import by_difficulty
from .schema import Task

PREFIX = "mix:"
DEFAULT_N = 100
_RESERVED = ("n", "seed")


class MixError(RegistryError, ValueError):
    """A mix that cannot be drawn: names the mix and what is wrong with it."""


class UnknownMixSetError(UnknownTaskSetError, MixError):
    """A mix names a task set that does not exist (a ``ValueError`` of the mix, and the registry's
    ``UnknownTaskSetError`` with its "did you mean")."""

    def __init__(self, mix: str, name: str) -> None:
        known = loaders.list_sets()
        close = difflib.get_close_matches(name, known, n=1)
        super().__init__(name, known, close[0] if close else None)
        self.args = (f"{mix}: {self.args[0]}",)


class MixSpec(BaseModel):
    """A parsed mix: task-set names and their ratios (in the order given), and the optional size
    and seed of the draw. ``name`` is its canonical ``mix:...`` form, which ``parse_mix`` reads
    back."""

    model_config = ConfigDict(frozen=True)

    ratios: dict[str, float]
    n: int | None = None
    seed: int | None = None

    @property
    def name(self) -> str:
        entries = [f"{k}={v:g}" for k, v in self.ratios.items()]
        entries += [f"{k}={v}" for k, v in (("n", self.n), ("seed", self.seed)) if v is not None]
        return PREFIX + ",".join(entries)


def is_mix(name: str | Path) -> bool:
    """Whether a task-set name is a mix (``mix:...``)."""
    return isinstance(name, str) and name.startswith(PREFIX)


def parse_mix(text: str) -> MixSpec:
    """The ``MixSpec`` of a ``mix:NAME=RATIO,...[,n=INT][,seed=INT]`` name; a ``MixError`` says
    which entry is wrong and why. (The sets themselves are checked when the mix is drawn.)"""
    if not is_mix(text):
        raise MixError(f"{text!r}: a mix name begins with {PREFIX!r}, e.g. 'mix:builtin=1,synthetic:list=2'")
    body = text[len(PREFIX):].strip()
    if not body:
        raise MixError(f"{text!r}: an empty mix; expected mix:NAME=RATIO,..., e.g. 'mix:builtin=1,synthetic:list=2'")
    ratios: dict[str, float] = {}
    extra: dict[str, int] = {}
    for i, raw in enumerate(body.split(",")):
        entry = raw.strip()
        if not entry:
            raise MixError(f"{text!r}: entry {i + 1} is empty (a stray comma?)")
        name, sep, value = entry.rpartition("=")
        name, value = (name.strip(), value.strip()) if sep else (entry, "1")
        if not name:
            raise MixError(f"{text!r}: entry {entry!r} names no task set")
        if name in _RESERVED:
            try:
                extra[name] = int(value)
            except ValueError:
                raise MixError(f"{text!r}: {name}: expected an integer, got {value!r}") from None
            continue
        if name in ratios:
            raise MixError(f"{text!r}: {name!r} is named twice")
        try:
            ratios[name] = float(value)
        except ValueError:
            raise MixError(f"{text!r}: the ratio of {name!r}: expected a positive number, got {value!r}") from None
    if not ratios:
        raise MixError(f"{text!r}: names no task set, only {', '.join(extra)}")
    return MixSpec(ratios=ratios, n=extra.get("n"), seed=extra.get("seed"))


def mix(ratios: Mapping[str, float], *, n: int | None = None, seed: int = 0, **load_params: Any) -> list[Task]:
    """``n`` tasks of the sets in ``ratios`` (set name -> ratio, relative to the others), each
    set's share stratified by difficulty, no problem id twice, shuffled; the same arguments give
    the same list. ``n`` defaults to 100, or fewer when the sets cannot give that many in these
    ratios. A ``MixError`` (a ``ValueError``) for an empty mapping, a ratio that is not a positive
    number, an unknown set (with the close match), or an ``n`` the sets are too small for (with
    their sizes and the largest ``n`` that fits). ``load_params`` go to every set's
    ``registry.load`` (e.g. ``validate``); ``difficulty`` is refused: a mix keeps each set's own."""
    if not isinstance(ratios, Mapping):
        raise TypeError(f"ratios: expected a mapping of task-set names to ratios, got {type(ratios).__name__}")
    label = _label(ratios)
    return _draw(_checked(ratios, label), n, seed, label, _load_params(load_params))


def load(name_or_path: str | Path, **params: Any) -> list[Task]:
    """``registry.load``: a mix by name (``mix:...``; parameters ``n`` and ``seed``, any other goes
    to each set's own load, as in ``mix``), any other name or path as ``registry.loaders.load``
    reads it."""
    if not is_mix(name_or_path):
        return loaders.load(name_or_path, **params)
    text = str(name_or_path)
    rest = _load_params({k: v for k, v in params.items() if k not in _RESERVED})
    spec = parse_mix(text)
    for key in _RESERVED:
        given, named = params.get(key), getattr(spec, key)
        if given is not None and named is not None and given != named:
            raise MixError(f"{text!r}: {key} is {named} in the name but {given!r} was passed; give it once")
    n = params["n"] if params.get("n") is not None else spec.n
    seed = params["seed"] if params.get("seed") is not None else spec.seed
    return _draw(_checked(spec.ratios, repr(text)), n, 0 if seed is None else seed, repr(text), rest)


def _load_params(params: dict[str, Any]) -> dict[str, Any]:
    if "difficulty" in params:
        raise TypeError("a mix takes no difficulty: each set keeps its own mix of difficulties "
                        "(to fix one, mix a .jsonl of those tasks, or load the generated set alone)")  # fmt: skip
    return params


def _label(ratios: Mapping[Any, Any]) -> str:
    return f"mix({dict(ratios)!r})"


def _is_path(name: str) -> bool:
    return Path(name).suffix == ".jsonl" or Path(name).exists()


def _checked(ratios: Mapping[Any, Any], label: str) -> dict[str, Fraction]:
    """The ratios as exact fractions, every name a known set; else the ``MixError`` that says why."""
    if not ratios:
        raise MixError(f"{label}: an empty mix; give at least one task set and its ratio, e.g. {{'builtin': 1}}")
    known = loaders.list_sets()
    out: dict[str, Fraction] = {}
    for key, ratio in ratios.items():
        name = str(key) if isinstance(key, (str, Path)) else None
        if name is None:
            raise MixError(f"{label}: expected task-set names as keys, got {key!r} ({type(key).__name__})")
        if is_mix(name):
            raise MixError(f"{label}: {name!r}: a mix cannot hold another mix; list its sets here instead")
        if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not math.isfinite(ratio) or ratio <= 0:
            raise MixError(f"{label}: the ratio of {name!r}: expected a positive number, got {ratio!r}")
        if name not in known and not _is_path(name):
            raise UnknownMixSetError(label, name)
        if name in out:
            raise MixError(f"{label}: {name!r} is named twice")
        out[name] = Fraction(float(ratio))
    return out


def _allocate(weights: list[Fraction], n: int) -> list[int]:
    """``n`` split in proportion to ``weights`` by largest remainder (ties: the earlier weight)."""
    total = sum(weights, Fraction(0))
    exact = [w * n / total for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def _draw(ratios: dict[str, Fraction], n: int | None, seed: int, label: str, params: dict[str, Any]) -> list[Task]:
    from .synthetic import MAX_TASKS

    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise MixError(f"{label}: n: expected an int >= 1, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise MixError(f"{label}: seed: expected an int, got {seed!r}")
    names = list(ratios)
    pools: dict[str, list[Task] | None] = {}  # None: a generated set (as many as asked, up to MAX_TASKS)
    for name in names:
        if name.startswith("synthetic:"):
            pools[name] = None
            continue
        first: dict[str, Task] = {}
        for t in loaders.load(name, **params):
            first.setdefault(t.problem_id, t)
        unique = list(first.values())
        if not unique:
            raise MixError(f"{label}: the task set {name!r} has no tasks")
        pools[name] = unique
    caps = [MAX_TASKS if (p := pools[name]) is None else len(p) for name in names]
    weights = [ratios[name] for name in names]
    total = sum(weights, Fraction(0))
    # the largest n whose shares all fit: every n up to min(cap / share) fits, a few above may
    bound = min(math.floor(cap * total / w) for cap, w in zip(caps, weights, strict=True))
    most = next(m for m in range(min(sum(caps), bound + len(names)), 0, -1)
                if all(a <= c for a, c in zip(_allocate(weights, m), caps, strict=True)))  # fmt: skip
    if n is None:
        n = min(DEFAULT_N, most)
    counts = _allocate(weights, n)
    if n > most:
        short = [f"{name} has {cap} (its share is {k})" for name, cap, k in zip(names, caps, counts, strict=True) if k > cap]
        raise MixError(f"{label}: n={n} is more tasks than these sets give in these ratios: {'; '.join(short)}; "
                       f"at most n={most} keeps the ratios")  # fmt: skip
    rng = random.Random(f"mix/{seed}")
    taken: set[str] = set()
    out: list[Task] = []
    for name, k in zip(names, counts, strict=True):
        pool = pools[name]
        drawn = _generated(name, k, seed, taken, params) if pool is None else _stratified(
            [t for t in pool if t.problem_id not in taken], k, rng)  # fmt: skip
        if len(drawn) < k:
            raise MixError(f"{label}: {name!r} should give {k} tasks, but only {len(drawn)} of its ids are not "
                           f"already drawn from a set named before it (the sets share problem ids)")  # fmt: skip
        taken.update(t.problem_id for t in drawn)
        out.extend(drawn)
    rng.shuffle(out)
    return out


def _generated(name: str, k: int, seed: int, taken: set[str], params: dict[str, Any]) -> list[Task]:
    """The first ``k`` tasks of a generated set (difficulties 1-5 in turn) whose ids are not taken."""
    from .synthetic import MAX_TASKS

    if k == 0:
        return []
    m = k
    while True:
        fresh = [t for t in loaders.load(name, n=m, seed=seed, **params) if t.problem_id not in taken]
        if len(fresh) >= k or m == MAX_TASKS:
            return fresh[:k]
        m = min(MAX_TASKS, m + k - len(fresh))


def _stratified(pool: list[Task], k: int, rng: random.Random) -> list[Task]:
    """``k`` of ``pool`` with its difficulty mix: each band's quota in proportion to its size, the
    band's tasks drawn with ``rng``. Fewer than ``k`` only when ``pool`` has fewer."""
    if k >= len(pool):
        return list(pool)
    bands = by_difficulty(pool)
    quotas = _allocate([Fraction(len(b)) for b in bands.values()], k)
    return [t for band, q in zip(bands.values(), quotas, strict=True) for t in rng.sample(band, q)]
