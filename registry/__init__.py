"""Tasks for code-env: the ``Task``/``TestCase`` schema, comparators, task sets by name, and the
verifier that runs a program against a task's tests in the sandbox.

>>> import registry
>>> tasks = registry.load("builtin")
>>> registry.list()
['builtin', 'humaneval', 'synthetic:arith', 'synthetic:list', 'synthetic:string']
"""

from .errors import RegistryError, TaskFileError, UnknownTaskError, UnknownTaskSetError
from .loaders import get, load, resolve
from .loaders import list_sets as list  # the documented name: registry.list()
from .schema import Comparator, Task, TestCase, read_tasks, write_tasks

__all__ = [
    "Comparator",
    "RegistryError",
    "Task",
    "TaskFileError",
    "TestCase",
    "UnknownTaskError",
    "UnknownTaskSetError",
    "get",
    "list",
    "load",
    "read_tasks",
    "resolve",
    "write_tasks",
]
