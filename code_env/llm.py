"""One LLM channel: the configuration every model call goes through, and ``code-env check-llm``.

The LLM judge (``[reward.judge]``), the LLM agent (``[llm_agent]``) and anything else that calls
a model take their endpoint from one ``LLMConfig``: a base URL, the API key as a ``${VAR}``
placeholder (the name of an environment variable, expanded only when the client is made, never
stored, logged or written expanded), the model id, the client's timeout and retries, and a
``name`` that every call is logged under. It lives in a TOML ``[llm]`` table::

    [llm]
    name = "judge"                       # what the log calls this channel
    base_url = "http://127.0.0.1:8000/v1"
    model = "Qwen2.5-Coder-7B-Instruct"
    api_key = "${OPENAI_API_KEY}"        # only a placeholder: a literal key is refused
    timeout_s = 30
    max_retries = 2

and is given to a user either inline (``[reward.judge.llm]``, ``[llm_agent.llm]``) or as the path
of such a file (``llm = "llm.toml"``), so that the judge and the agent can share one file. The
judge's and the agent's own ``base_url`` / ``model`` / ``api_key`` / ``timeout_s`` /
``max_retries`` stay as aliases (they build the same ``LLMConfig``); giving both is refused.

Every call is logged on the ``code_env.llm`` logger (INFO) as ``llm[<name>] call {...}``, the
call's record as JSON: model, request key, status, latency, token usage, never the key. The
users keep their own record/replay files; this log line is the same for all of them.

``check_llm(config)`` sends one short request ("reply with the number 4") through the real
``openai`` client and says in one line what is wrong: a refused key (401/403, naming the
variable it came from), an unknown model id or URL path (404: ``GET /models`` tells which), an
unreachable URL (connection refused, DNS, timeout), a reply without choices, a reply that is
not the number asked for; or OK with the model and the latency.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from ._errors import first_error

__all__ = ["NO_KEY", "CheckResult", "LLMConfig", "LLMConfigError", "Outage", "Recording", "call_chat", "check_llm", "expand",
           "load_llm_config", "log_call", "reply_text"]

log = logging.getLogger("code_env.llm")

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
NO_KEY = "EMPTY"  # what goes out when no key is configured (vLLM's convention for "none needed")
ALIASES = ("base_url", "model", "api_key", "timeout_s", "max_retries")  # the users' own fields for the channel
CHECK_PROMPT = "Reply with the number 4 and nothing else."
CHECK_ANSWER = 4.0


class LLMConfigError(ValueError):
    """A channel that cannot be configured as given: an unreadable file, a missing ``[llm]`` table,
    a placeholder whose variable is not set. The message names the file or the variable."""


class _Literal:
    """Stands in for a literal API key during validation, so that no error message can show it."""

    def __repr__(self) -> str:
        return "<a literal key, not shown>"


def hide_literal_key(data: Any) -> Any:
    """``data`` (a table) with a literal ``api_key`` replaced by a stand-in that the field's
    validator refuses: pydantic's errors repeat the input, and a key must never be repeated."""
    if isinstance(data, Mapping):
        key = data.get("api_key")
        if isinstance(key, str) and not PLACEHOLDER.fullmatch(key.strip()):
            return {**data, "api_key": _Literal()}
    return data


class LLMConfig(BaseModel):
    """An OpenAI-compatible endpoint and how to call it: the ``[llm]`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("llm", min_length=1, description="what the log calls this channel (e.g. judge, agent)")
    base_url: str = Field(description="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (or a ${VAR})")
    model: str = Field(min_length=1, description="the model id the endpoint serves")
    api_key: str | None = Field(None, description="only a ${ENV_VAR} placeholder (unset: $OPENAI_API_KEY if set, else none)")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="per request, seconds (the client's timeout)")
    max_retries: int = Field(2, ge=0, le=20, description="the client's retries on timeouts, connection errors, 429 and 5xx")

    @model_validator(mode="before")
    @classmethod
    def _hide_literal_key(cls, data: Any) -> Any:
        return hide_literal_key(data)

    @field_validator("api_key", mode="before")
    @classmethod
    def _placeholder_only(cls, v: Any) -> Any:
        if isinstance(v, _Literal):
            raise ValueError("a literal API key is refused (keys do not belong in files or on the command line): "
                             "write '${OPENAI_API_KEY}' (or another variable's name) and set that variable")  # fmt: skip
        return v.strip() if isinstance(v, str) else v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip()
        if not re.match(r"^(https?://\S+|\$\{[A-Za-z_][A-Za-z0-9_]*\})$", v):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000/v1 (or a ${{ENV_VAR}}), got {v!r}")
        return v

    def url(self, environ: Mapping[str, str] | None = None) -> str:
        """``base_url`` with its placeholder expanded."""
        url = expand(self.base_url, f"llm[{self.name}].base_url", environ)
        if not re.match(r"^https?://\S+$", url):
            raise LLMConfigError(f"llm[{self.name}].base_url {self.base_url!r} expands to {url!r}, not an http(s) URL")
        return url

    def key(self, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
        """The API key and where it came from, for messages (never the key itself): ``$VAR`` of
        ``api_key``, else ``$OPENAI_API_KEY`` when that is set, else ``none`` (``NO_KEY`` is sent)."""
        env = os.environ if environ is None else environ
        if self.api_key:
            var = PLACEHOLDER.fullmatch(self.api_key)
            assert var is not None  # the validator admits nothing else
            return expand(self.api_key, f"llm[{self.name}].api_key", env) or NO_KEY, f"${var.group(1)}"
        if env.get("OPENAI_API_KEY"):
            return env["OPENAI_API_KEY"], "$OPENAI_API_KEY"
        return NO_KEY, "none"

    def client(self, environ: Mapping[str, str] | None = None) -> Any:
        """An ``openai.OpenAI`` client for this channel (the key expanded here, and only here)."""
        try:
            import openai
        except ModuleNotFoundError:
            raise LLMConfigError("calling a model needs the openai client: pip install 'code-env[llm]'") from None
        return openai.OpenAI(base_url=self.url(environ), api_key=self.key(environ)[0], timeout=self.timeout_s,
                             max_retries=self.max_retries)  # fmt: skip

    @classmethod
    def coerce(cls, value: Any, *, name: str | None = None) -> Any:
        """What a user's ``llm`` field may hold -> an ``LLMConfig`` (or ``value`` unchanged for
        pydantic to reject): an ``LLMConfig``, a table, or the path of a TOML file with ``[llm]``.
        ``name`` is the default name of a table that gives none."""
        if isinstance(value, (str, Path)):
            value = _validated(*_table(value, "llm"), name=name)
        if isinstance(value, Mapping) and name is not None and "name" not in value:
            value = {**value, "name": name}
        return value


def aliases_given(config: BaseModel) -> list[str]:
    """The fields of ``ALIASES`` that ``config`` (a user's settings beside its ``llm``) gives a
    value other than its default: the older spellings of the channel's fields, which must not be
    given with ``llm`` too. (A field left at its default does not count, so that a config dumped
    whole, aliases included, validates again.)"""
    fields = type(config).model_fields
    return [f for f in ALIASES if f in fields and getattr(config, f) != fields[f].default]


def expand(value: str, where: str, environ: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${VAR}`` replaced from the environment; a variable that is not set
    is an ``LLMConfigError`` naming it and ``where`` it was written."""
    env = os.environ if environ is None else environ

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise LLMConfigError(f"{where} names ${{{m.group(1)}}}, which is not set in the environment")
        return env[m.group(1)]

    return PLACEHOLDER.sub(sub, value)


def load_llm_config(path: str | Path, table: str = "llm", **overrides: Any) -> LLMConfig:
    """The ``[table]`` of a TOML file (dotted for a nested one: ``reward.judge.llm``) as an
    ``LLMConfig``, with ``overrides`` (fields not None) on top. A user's table (``reward.judge``,
    ``llm_agent``) gives its ``llm`` (a table or a file's path), else its aliases of the channel's
    fields (its other settings set aside)."""
    p, _, data = _table(path, table)
    if table.rsplit(".", 1)[-1] != "llm":
        inner = data.get("llm")
        if isinstance(inner, str):
            p, table, data = _table(inner, "llm")  # (relative: to the working directory, as everywhere)
        elif isinstance(inner, dict):
            table, data = f"{table}.llm", inner
        else:
            data = {k: v for k, v in data.items() if k in LLMConfig.model_fields}
    return _validated(p, table, {**data, **{k: v for k, v in overrides.items() if v is not None}})


def _table(path: str | Path, table: str) -> tuple[Path, str, dict[str, Any]]:
    p = Path(path)
    try:
        data: Any = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LLMConfigError(f"{p}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LLMConfigError(f"{p}: not valid TOML: {exc}") from None
    for part in table.split("."):
        if not isinstance(data, dict) or not isinstance(data.get(part), dict):
            found = ", ".join(f"[{k}]" for k, v in data.items() if isinstance(v, dict)) if isinstance(data, dict) else ""
            raise LLMConfigError(f"{p}: no [{table}] table (found: {found or 'none'})")
        data = data[part]
    return p, table, data


def _validated(path: Path, table: str, data: dict[str, Any], name: str | None = None) -> LLMConfig:
    """``data`` (the ``[table]`` of ``path``) as an ``LLMConfig`` named ``name`` unless it names itself."""
    if name is not None and "name" not in data:
        data = {**data, "name": name}
    try:
        return LLMConfig.model_validate(data)
    except ValidationError as exc:
        raise LLMConfigError(f"{path}: [{table}] {first_error(exc)}") from None


def log_call(name: str, record: Mapping[str, Any]) -> None:
    """Log one model call of the channel ``name``: ``record`` (model, key of the request, status,
    latency, usage; never the API key) as one JSON line on ``code_env.llm`` at INFO."""
    if log.isEnabledFor(logging.INFO):
        log.info("llm[%s] call %s", name, json.dumps(dict(record), ensure_ascii=False, sort_keys=True, default=str))


# ------------------------------------------------------------------ recorded chat calls


class Outage(NamedTuple):
    """``call_chat``'s answer when the endpoint failed (not the request): why, and whether it did
    not answer in time."""

    why: str
    timed_out: bool = False


def call_chat(client: Any, channel: LLMConfig, req: dict[str, Any], *, who: str, model_field: str, key_source: str,
              error: type[Exception]) -> str | Outage:  # fmt: skip
    """One chat completion through ``client`` (an ``openai.OpenAI`` of ``channel``): the raw
    response body (a JSON object with ``choices``), or the ``Outage`` of the endpoint (no answer in
    time, no connection, HTTP 5xx or 429 after the client's retries, a body that is no chat
    completion). A refused key (401), an unknown model (404) or another 4xx is the caller's
    configuration: ``error`` is raised, its message beginning with ``who`` ("the judge's
    endpoint") and naming ``key_source`` or ``model_field`` (what to check)."""
    import openai

    retries = f"after {channel.max_retries} {'retry' if channel.max_retries == 1 else 'retries'}"
    try:
        raw = client.chat.completions.with_raw_response.create(**req)
    except openai.APITimeoutError:
        return Outage(f"the endpoint did not answer within {channel.timeout_s:g} s ({retries})", timed_out=True)
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}: {cause}" if cause is not None else ""
        return Outage(f"could not connect to {channel.base_url} ({retries}){detail}")
    except openai.AuthenticationError as exc:
        raise error(f"{who} refused the key (HTTP {exc.status_code}): check {key_source}") from None
    except openai.NotFoundError as exc:
        raise error(f"{who} answered HTTP 404 for model {channel.model!r} at {channel.base_url}: check "
                    f"{model_field} (and base_url): {exc.message}") from None  # fmt: skip
    except openai.APIStatusError as exc:
        if exc.status_code >= 500 or exc.status_code == 429:
            what = "rate limited" if exc.status_code == 429 else "a server error"
            return Outage(f"the endpoint answered HTTP {exc.status_code}, {what} ({retries}): {exc.message}")
        raise error(f"{who} answered HTTP {exc.status_code} for model {channel.model!r}: {exc.message}") from None
    body = str(raw.http_response.text)
    try:
        ok = isinstance(json.loads(body).get("choices"), list)
    except (json.JSONDecodeError, AttributeError):
        ok = False
    if not ok:
        return Outage(f"the endpoint answered HTTP {raw.http_response.status_code} with no chat completion: {body[:80]!r}")
    return body


def reply_text(body: str) -> str | None:
    """The first choice's text of a chat completion's body; None when it has none."""
    try:
        choices = json.loads(body)["choices"] or []
        content = choices[0]["message"]["content"] if choices else None
    except (json.JSONDecodeError, KeyError, TypeError, IndexError):
        return None
    return content if isinstance(content, str) else None


class Recording:
    """The JSONL file of a channel's calls, one ``{key, model, request, body}`` per line, keyed by
    the request's hash (``request_key``: no secret enters it). ``mode``: ``"record"`` answers from
    it and appends what is new, ``"replay"`` only answers from it (a missing file is an ``error``),
    ``"live"`` neither (``path`` may be None). Safe from many threads."""

    def __init__(self, path: str | Path | None, mode: str, *, what: str, error: type[Exception]) -> None:
        self.path = Path(path) if path is not None else None
        self.mode = mode
        self._lock = threading.Lock()
        self._bodies: dict[str, str] = {}
        if self.path is None or mode == "live":
            return
        if not self.path.exists():
            if mode == "replay":
                raise error(f"replay mode: no recording at {self.path}")
            return
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    rec = json.loads(line)
                    self._bodies[str(rec["key"])] = str(rec["body"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise error(f"{self.path}:{n}: not a {what} recording (expected {{'key', 'body'}})") from None

    @staticmethod
    def request_key(req: Mapping[str, Any]) -> str:
        return hashlib.sha256(json.dumps(req, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        """The recorded body of ``key`` (never in ``live`` mode)."""
        if self.mode == "live":
            return None
        with self._lock:
            return self._bodies.get(key)

    def add(self, key: str, req: Mapping[str, Any], body: str) -> None:
        """Append a call's reply (``record`` mode; nothing otherwise)."""
        if self.mode != "record" or self.path is None:
            return
        line = json.dumps({"key": key, "model": req["model"], "request": req, "body": body}) + "\n"
        with self._lock:
            self._bodies[key] = body
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)


# ------------------------------------------------------------------------------ check-llm


Problem = Literal["ok", "auth", "not_found", "unreachable", "timeout", "http_error", "empty", "not_a_number", "wrong_number", "malformed"]


class CheckResult(BaseModel):
    """``check_llm``'s verdict: ``problem`` (``ok`` or what is wrong), the one ``line`` to print,
    the latency of the call when it was answered."""

    ok: bool
    problem: Problem
    line: str
    model: str
    base_url: str
    latency_s: float | None = None
    reply: str | None = Field(None, description="the reply's text, when one came")


_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


def _number(text: str) -> float | None:
    """The number a reply is, once reasoning blocks, code fences, whitespace and trailing
    punctuation are set aside: ``"4"``, ``"4."``, ``"**4**"``, ``"`4`"``; else None."""
    core = _THINK.sub("", text).strip().strip("`*_\"' .!\n")
    try:
        return float(core)
    except ValueError:
        return None


def check_llm(config: LLMConfig, environ: Mapping[str, str] | None = None) -> CheckResult:
    """Send ``config``'s endpoint one short request (``CHECK_PROMPT``) and say what is wrong, if
    anything. Raises ``LLMConfigError`` only for a config that cannot be used at all (a placeholder
    whose variable is not set); every answer of the endpoint, or its silence, is a ``CheckResult``."""
    import openai

    url, model = config.url(environ), config.model
    key, source = config.key(environ)
    client = config.client(environ)
    request = {"model": model, "messages": [{"role": "user", "content": CHECK_PROMPT}], "temperature": 0, "max_tokens": 16}

    def result(problem: Problem, line: str, latency: float | None = None, reply: str | None = None) -> CheckResult:
        log_call(config.name, {"kind": "check-llm", "model": model, "base_url": url, "status": problem,
                               "latency_s": None if latency is None else round(latency, 3)})  # fmt: skip
        line = line.replace(key, "[api key]") if key != NO_KEY else line
        return CheckResult(ok=problem == "ok", problem=problem, line=line, model=model, base_url=url,
                           latency_s=latency, reply=reply)  # fmt: skip

    retries = f"after {config.max_retries} {'retry' if config.max_retries == 1 else 'retries'}"
    started = time.monotonic()
    try:
        raw = client.chat.completions.with_raw_response.create(**request)
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        why = ("no key was sent (no api_key given and OPENAI_API_KEY is not set)" if source == "none"
               else f"the key from {source} is refused")  # fmt: skip
        return result("auth", f"{url} refused the API key (HTTP {exc.status_code}): {why}")
    except openai.NotFoundError:
        return result("not_found", _not_found(client, url, model))
    except openai.APITimeoutError:
        return result("timeout", f"{url} did not answer within {config.timeout_s:g} s ({retries}): check the URL "
                                 "(is the server up and reachable?) or raise the timeout")  # fmt: skip
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return result("unreachable", f"could not connect to {url}{detail} ({retries}): check the URL (host, port, "
                                     "scheme) and that the server is up")  # fmt: skip
    except openai.APIStatusError as exc:
        return result("http_error", f"{url} answered HTTP {exc.status_code} for model {model!r}: {exc.message}")
    finally:
        client.close()
    latency = time.monotonic() - started
    body = str(raw.http_response.text)
    try:
        data = json.loads(body)
        choices = data["choices"]
        if not isinstance(choices, list):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError):
        return result("malformed", f"{url} answered HTTP {raw.http_response.status_code} with no chat completion: "
                                   f"{body[:80]!r}", latency)  # fmt: skip
    if not choices:
        return result("empty", f"{url} answered with an empty 'choices' list for model {model!r}: the server produced "
                               "no completion", latency)  # fmt: skip
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    text = content if isinstance(content, str) else ""
    x = _number(text)
    if x is None:
        shown = repr(text[:60]) if text.strip() else "an empty reply"
        return result("not_a_number", f"model {model!r} at {url} answered {shown} when asked for the number 4: it does "
                                      "not follow a simple instruction (a base model, a chat template missing?)", latency, text)  # fmt: skip
    if x != CHECK_ANSWER:
        return result("wrong_number", f"model {model!r} at {url} answered {x:g} when asked for the number 4", latency, text)
    return result("ok", f"OK: model {model!r} at {url} answered 4 in {latency:.2f} s", latency, text)


def _not_found(client: Any, url: str, model: str) -> str:
    """What a 404 means: ``GET /models`` answering says the URL is right and the model id is not
    (with the ids it serves); its failing too says the URL's path is wrong."""
    import openai

    try:
        ids = sorted(str(m.id) for m in client.models.list())
    except openai.OpenAIError:  # any failure here means the URL is wrong too
        return (f"{url} answered HTTP 404 and so does {url.rstrip('/')}/models: check the URL's path (an "
                "OpenAI-compatible API usually ends in /v1)")  # fmt: skip
    import difflib

    near = difflib.get_close_matches(model, ids, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    served = ", ".join(repr(i) for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
    return f"{url} answered HTTP 404 for model {model!r}: no such model id (it serves {served or 'none'}){hint}"
