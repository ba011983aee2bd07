"""The environment of the Ray instances that the tests and benchmarks start: token authentication
(Ray's default for a new local cluster) with a token of their own, given in the environment, so
that Ray writes no ``~/.ray/auth_token``; no usage-stats reporting. Ray reads these once, when it
is first imported, and keeps the token: enter ``ray_environment()`` before anything imports Ray,
and every instance of the process uses the same token."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

TOKEN = secrets.token_hex(32)


@contextmanager
def ray_environment() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "token")
        mp.setenv("RAY_AUTH_TOKEN", TOKEN)
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.delenv("RAY_ADDRESS", raising=False)
        yield
