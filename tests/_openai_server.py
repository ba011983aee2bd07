"""A loopback OpenAI-compatible HTTP server for tests: the real ``openai`` client talks HTTP to it.

``OpenAIServer(script)`` listens on ``127.0.0.1`` (a free port) in a thread and answers
``POST /v1/chat/completions`` with whatever ``script(body, attempt)`` returns for each request:
``body`` is the request's JSON, ``attempt`` how many times this exact body came before (0 the
first time, 1 for the client's first retry...). ``GET /v1/models`` lists the models the requests
named (or, with ``models=[...]``, those models, and a request for another gets a 404 in OpenAI's
error format, as a server that does not serve it answers). A request without
``Authorization: Bearer <key>`` gets a 401 in OpenAI's error format.

A ``Reply`` is an ordinary completion (``content``, ``finish_reason``, ``usage``), with the
function calls of OpenAI's protocol if it has ``tool_calls`` (``tool_call(...)`` makes one; a
malformed one is any JSON in their place), or no choices (``choices=False``), or a raw body
(``raw``: malformed JSON), or an HTTP error (``status``); any of them after a delay (``delay_s``: a
reply slower than the client's timeout).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "sk-loopback-test-9f8e7d6c5b4a3210"


@dataclass
class Reply:
    """How the server answers one request."""

    content: str | None = ""
    finish_reason: str = "stop"
    choices: bool = True
    usage: dict[str, int] | None = field(default_factory=lambda: {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    status: int = 200
    raw: str | None = None
    delay_s: float = 0.0
    tool_calls: list[Any] | None = None  # the message's "tool_calls" (absent when None)


Script = Callable[[dict[str, Any], int], Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler still sleeping (a slow reply) never blocks shutdown
    block_on_close = False
    owner: OpenAIServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            return self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
        if not self._authorized():
            return None
        owner = self.server.owner
        models = sorted(owner.models if owner.models is not None else {str(b.get("model")) for b in owner.requests})
        return self._json(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"} for m in models]})

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
        if not self._authorized():
            return None
        body = json.loads(raw)
        if owner.models is not None and body.get("model") not in owner.models:
            return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                              "type": "invalid_request_error", "code": "model_not_found"}})  # fmt: skip
        digest = hashlib.sha256(raw).hexdigest()
        with owner.lock:
            owner.requests.append(body)
            attempt = owner.seen[digest]
            owner.seen[digest] += 1
        reply = owner.script(body, attempt)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.status != 200:
            return self._json(reply.status, {"error": {"message": f"scripted HTTP {reply.status}", "type": "server_error"}},
                              headers={"retry-after-ms": "1"})  # fmt: skip
        if reply.raw is not None:
            return self._send(200, reply.raw.encode())
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls is not None:
            message["tool_calls"] = reply.tool_calls
        choices = [{"index": 0, "finish_reason": reply.finish_reason, "logprobs": None, "message": message}] if reply.choices else []
        payload: dict[str, Any] = {"id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion", "created": 1,
                                   "model": body.get("model"), "choices": choices}  # fmt: skip
        if reply.usage is not None:
            payload["usage"] = reply.usage
        return self._json(200, payload)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.server.owner.key}":
            return True
        self._json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                   "code": "invalid_api_key"}})  # fmt: skip
        return False

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (its timeout) and closed the connection: nothing to answer
            pass


class OpenAIServer:
    """The server; a context manager (started on enter, stopped on exit)."""

    def __init__(self, script: Script, *, key: str = KEY, models: Sequence[str] | None = None) -> None:
        self.script = script
        self.key = key
        self.models = list(models) if models is not None else None
        self.requests: list[dict[str, Any]] = []
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not running"
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def start(self) -> OpenAIServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="openai-loopback", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fenced(code: str) -> str:
    """A reply the way chat models write one."""
    return f"Here is the solution.\n\n```python\n{code.rstrip()}\n```\n"


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, *, call_id: str | None = None) -> dict[str, Any]:
    """One item of a message's ``tool_calls`` as OpenAI sends it (``arguments``: a JSON string; a
    string given is sent as it is, malformed or not)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": args}}


def first_user(body: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")


def turn_of(body: dict[str, Any]) -> int:
    """1 for the first request of a conversation, 2 after one reply and its feedback..."""
    return sum(1 for m in body["messages"] if m["role"] == "user")


def task_of(body: dict[str, Any], tasks: Sequence[Any]) -> Any:
    """The task whose prompt the conversation's first user message holds."""
    text = first_user(body)
    found = [t for t in tasks if t.prompt.strip() in text]
    assert len(found) == 1, f"expected one task's prompt in the request, found {len(found)}"
    return found[0]
