"""Tasks for code-env: the ``Task``/``TestCase`` schema, comparators, task sets by name, and the
verifier that runs a program against a task's tests in the sandbox.

>>> import registry
>>> tasks = registry.load("builtin")
>>> registry.list()
['builtin', 'humaneval', 'synthetic:arith', 'synthetic:list', 'synthetic:string']
>>> mixed = registry.mix({"builtin": 1, "synthetic:list": 2}, n=30, seed=0)   # or registry.load("mix:builtin=1,synthetic:list=2", n=30)
"""

from ._passrate import filter_by_pass_rate  # (a private module: the function is the API)
from .errors import (
    RegistryError,
    TaskFileError,
    TaskSetRefusedError,
    UnknownTaskError,
    UnknownTaskSetError,
    ValidationUnavailableError,
)
from .loaders import get, resolve
from .loaders import list_sets as list  # the documented name: registry.list()
from .mix import MixError, MixSpec, load, mix, parse_mix  # load: a set by name or a mix ("mix:...")
from .schema import Comparator, Task, TestCase, read_tasks, write_tasks

__all__ = [
    "Comparator",
    "MixError",
    "MixSpec",
    "RegistryError",
    "Task",
    "TaskFileError",
    "TaskSetRefusedError",
    "TestCase",
    "UnknownTaskError",
    "UnknownTaskSetError",
    "ValidationUnavailableError",
    "filter_by_pass_rate",
    "get",
    "list",
    "load",
    "mix",
    "parse_mix",
    "read_tasks",
    "resolve",
    "write_tasks",
]
