"""Programs many runs run — a verifier's driver — compiled once per worker, not in every run.

A run compiles its program before it runs it; a verifier's driver (``registry.verify.DRIVER``, a
few hundred lines) cost every function-task run ~3 ms of CPU to compile in a warm interpreter, more
in a forked child, of a trivial run's ~7. The code that defines such a program registers it
(``register_program``); every process-backend worker started afterwards compiles the registered
texts once, in its template, exactly as a run would (same interpreter, file name and flags), and a
run whose program is one of them, to the character, executes that code object. These are the
host's own programs, given when the worker starts: no run's code or data is ever in a template,
and no program a run sends is compiled anywhere but in that run.

The standard-library modules such a program imports (the driver's ``json`` and ``fcntl``, ~2 ms of
every run's CPU to import in a forked child) are preloaded in the template with the others
(``program_imports``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable

_REGISTERED: dict[str, None] = {}  # an ordered set
MAX_PROGRAMS = 16
MAX_PROGRAM_CHARS = 1 << 20


def register_program(code: str) -> None:
    """Have every process-backend worker started from now on compile ``code`` once, for the runs
    whose program it is (see the module docstring). Idempotent; at most ``MAX_PROGRAMS``."""
    if not isinstance(code, str):
        raise TypeError(f"code: expected str, got {type(code).__name__}")
    if len(code) > MAX_PROGRAM_CHARS:
        raise ValueError(f"code: {len(code)} characters, over the {MAX_PROGRAM_CHARS} a registered program may have")
    if code not in _REGISTERED:
        if len(_REGISTERED) >= MAX_PROGRAMS:
            raise ValueError(f"at most {MAX_PROGRAMS} programs can be registered")
        _REGISTERED[code] = None


def registered_programs() -> list[str]:
    """The registered programs, in the order they were registered."""
    return list(_REGISTERED)


def program_imports(programs: Iterable[str]) -> tuple[str, ...]:
    """The standard-library modules the ``import`` statements of ``programs`` name, anywhere in
    them (a driver imports inside its function), in order of first appearance: what a worker
    preloads for them. Relative imports and modules outside the standard library are left to the
    runs; a program that does not parse names none."""
    names: dict[str, None] = {}
    for code in programs:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found = [node.module]
            else:
                continue
            for name in found:
                if name.partition(".")[0] in sys.stdlib_module_names:
                    names.setdefault(name, None)
    return tuple(names)
