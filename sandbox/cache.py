"""An optional cache of execution results, keyed by everything that decides the result: the code,
stdin, limits and the backend's version. In-memory LRU, optionally backed by SQLite on disk.

Results that say nothing about the program (``sandbox_error``) and timeouts (which depend on how
busy the machine was) are never stored. Hits come back with ``cached=True``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence

from .models import ExecutionResult, Limits

__all__ = ["ResultCache"]


class ResultCache:
    """LRU of ``max_entries`` results in memory; with ``path``, also a SQLite file that survives
    the process (shared safely between processes)."""

    def __init__(self, max_entries: int = 10_000, path: str | None = None) -> None:
        if not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries: expected a positive int, got {max_entries!r}")
        self.max_entries = max_entries
        self.path = path
        self._mem: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self._db: sqlite3.Connection | None = None
        if path is not None:
            self._db = sqlite3.connect(path, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, result TEXT NOT NULL)")
            self._db.commit()

    @staticmethod
    def key(code: str, stdin: str, limits: Limits, backend_version: str, language: str = "python",
            files: bytes | None = None, fetch: Sequence[str] = ()) -> str:  # fmt: skip
        blob = json.dumps(
            {"code": code, "stdin": stdin, "limits": limits.model_dump(), "backend": backend_version,
             **({"language": language} if language != "python" else {}),
             **({"files": hashlib.sha256(files).hexdigest()} if files else {}),
             **({"fetch": list(fetch)} if fetch else {})},
            sort_keys=True,
            ensure_ascii=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> ExecutionResult | None:
        with self._lock:
            raw = self._mem.get(key)
            if raw is not None:
                self._mem.move_to_end(key)
            elif self._db is not None:
                row = self._db.execute("SELECT result FROM results WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    raw = row[0]
                    self._remember(key, raw)
            if raw is None:
                self.misses += 1
                return None
            self.hits += 1
        return ExecutionResult.from_wire(json.loads(raw))

    def put(self, key: str, result: ExecutionResult) -> bool:
        """Store ``result`` unless it must not be reused; returns whether it was stored."""
        if result.sandbox_error is not None or result.timeout_hit:
            return False
        raw = result.model_dump_json(exclude={"trace_id", "cached"})
        with self._lock:
            self._remember(key, raw)
            if self._db is not None:
                self._db.execute("INSERT OR REPLACE INTO results (key, result) VALUES (?, ?)", (key, raw))
                self._db.commit()
        return True

    def _remember(self, key: str, raw: str) -> None:
        self._mem[key] = raw
        self._mem.move_to_end(key)
        while len(self._mem) > self.max_entries:
            self._mem.popitem(last=False)

    def __len__(self) -> int:
        return len(self._mem)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
