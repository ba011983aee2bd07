"""Evaluate a model behind any OpenAI-compatible endpoint on a task set: pass@k, rewards, tokens.

    python -m baselines.llm_agent --set llm_agent.base_url=http://127.0.0.1:8000/v1 \\
        --set llm_agent.model=Qwen2.5-Coder-7B-Instruct [--set llm_agent.max_turns=3] [--out DIR]
    python -m baselines.llm_agent --set llm_agent.api_key='${MY_KEY}' ...   # single quotes: the shell must not expand it
    python -m baselines.llm_agent --replay runs/llm-agent-<stamp>/llm_record.jsonl   # offline
    python -m baselines.llm_agent --env CodeAgent-v0 [--set llm_agent.max_calls=30] ...   # function calling

For every task of the set and every sample ``j < n_samples`` one episode of ``CodeExec-v0`` runs:
the model gets the system prompt and the task's prompt (the env's observation), its reply's program
(``code_env.extract_code``) is the env's action, and the env judges it in the sandbox. With
``max_turns > 1`` the env's feedback on the public tests (``render_lines()`` of its observation:
pass count, each failing test's input, expected and got, or its error and traceback, the program's
stderr) goes back into the conversation as the next user message, until every public test passes
or the turns run out. The env is the only judge: a sample *passes* when its episode terminated with
the ``all_tests`` tier (public and hidden tests).

With ``--env CodeAgent-v0`` (``llm_agent.env``) the episodes are ``CodeAgent-v0``'s, through
OpenAI function calling: every request carries ``tools=`` (the env's ``tools`` schemas); the first
user message is the task's prompt and the env's account of the workspace. Each function call of a
reply is one env step, in order: the assistant message with its ``tool_calls`` goes into the
conversation, then one ``tool`` message per call (``tool_call_id``) holding the step's
``tool_result``, and the next request follows. A malformed call (arguments that are not JSON, an
unknown tool) is the env's error observation in its ``tool`` message; the episode goes on. A reply
without a function call is one step too (its text is the action: a ``<tool_call>`` in the text is
read and played, its result sent back as a user message; anything else is a step that calls no
tool, answered by a user message asking for a tool call), so every reply counts against the
episode's tool calls, ``max_calls``. The episode ends on ``submit`` (or a budget of the env's):
the calls left in that reply are not played. A sample passes when it submitted an ``all_tests``
program; out of tool calls, ``main.py`` is graded as submitted, and ``turns_exhausted`` says so
beside the tier it scored. ``max_turns`` belongs to ``CodeExec-v0`` (it must stay 1 here). The
env keeps no trajectory log yet: ``trajectories/`` stays empty.

Configuration (``baselines/configs/llm_agent.toml``, section ``[llm_agent]``; ``--set llm_agent.KEY=V``
overrides any field; ``env.json`` gives only ``backend``, ``log_every`` and the log's bounds
``log_max_bytes``/``log_text_bytes`` — the tasks and turns are
this file's, and ``--set env.<other>`` is refused rather than ignored; ``reward.json`` is the env's
reward ladder). The endpoint is one LLM channel (``code_env.llm.LLMConfig``, shared with the LLM
judge): ``llm_agent.llm``, an ``[llm_agent.llm]`` table or the path of a TOML file with an ``[llm]``
table (``--set llm_agent.llm=llm.toml``; a relative path is the working directory's), named
``agent`` unless it says otherwise. Its fields' older spellings, ``llm_agent.base_url``, ``model``,
``api_key``, ``timeout_s`` and ``max_retries``, stay as aliases (with ``llm`` too, they are refused:
one endpoint, given once). Without ``llm``, where the endpoint comes from, first match wins:

1. ``--set llm_agent.base_url=...`` / ``model`` / ``api_key``;
2. the config file's ``base_url`` / ``model`` / ``api_key``;
3. the environment: ``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``.

``base_url`` and ``model`` are required (a one-line error names both ways to give them). The API key
is a secret: in a file or in ``--set`` it may only be a ``${ENV_VAR}`` placeholder (a literal key is
refused, and the error never repeats it); with none, ``$OPENAI_API_KEY`` is used if set, else the
requests carry the key ``EMPTY`` (local servers that check no key). The key is never written
anywhere: not in the record, the run's ``config.json``, its logs or any message.

What a reply counts as (``replies`` in the summary). Every attempt is judged by the env, so that
every sample has exactly one verdict:

* ``ok``: the reply's program is judged;
* ``truncated`` (``finish_reason == "length"``): a failed attempt, its program (the code so far,
  an unclosed fence runs to the end) is judged as it is (the step's states show
  ``context_window_overflow`` after ``generating``; with the reward's ``context_window_overflow``
  set it is not run and earns that value);
* ``empty`` (no ``choices``, or no text) and ``malformed`` (not JSON, no ``choices`` list, no
  message): a failed attempt; the env judges the empty program (tier ``no_attempt``);
* ``api_error``: the endpoint timed out, was unreachable, or answered 5xx/429 (after the client's
  ``max_retries``) or another 4xx (a conversation longer than the context window): a failed attempt
  recorded with its error; the env judges the empty program, exactly as for an empty reply. In
  pass@k such a sample is one of the ``n`` samples and not one of the ``c`` correct ones: pass@k is
  then a lower bound, and ``api_errors`` in the summary says how many there were. A run in which
  every request failed exits with status 1.
* 401/403 (the key was refused) and 404 (wrong URL or model) stop the run at once with a
  configuration error (exit status 2) naming ``base_url`` and the variable the key came from.

A sample the *sandbox* failed to judge (``info["sandbox_error"]``), or whose LLM judge call
failed (``info["judge_error"]``: the reward config's judge timed out, refused the connection or
answered 5xx/429), is dropped: it counts in neither ``n`` nor ``c`` (``sandbox_errors`` and
``judge_errors`` say how many). pass@k, for each ``k`` in ``k`` (and 1), is the
unbiased estimator of Chen et al. (2021), ``1 - C(n - c, k) / C(n, k)`` per task, computed as the
product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` (no huge binomials), averaged over the tasks
with at least ``k`` judged samples.

Record and replay. Every request and its reply (the raw response body) or error, the usage and the
latency go to ``<run>/llm_record.jsonl`` (and, as one line each, to the ``code_env.llm`` log under
the channel's name: ``llm[agent] call {...}``), after a header line with the resolved configuration and
a fingerprint of every task. A call is keyed by ``sha256`` of the request's content (model,
messages, temperature, max_tokens, seed) together with the problem id and the sample index: the
same conversation asked again for another sample is another call, and a multi-turn conversation's
later requests hold the earlier replies and the env's feedback, so their keys chain through the
whole episode. ``--replay RECORD`` reads the configuration from the header (``--set`` still
applies: a different reward ladder re-scores the same replies), answers every request from the
record (no network, no server, no key) and lets the env judge the recorded replies again in the
sandbox: the same pass@k, reward distribution and token counts. A request that is not in the record
(the tasks, prompts or sampling settings changed, or the sandbox judged a program differently and
the feedback changed) is an error that says which request it was.

Outputs, in the run directory (``Run.create``): ``config.json``, ``meta.json``, ``llm_record.jsonl``
(live runs), ``samples.jsonl`` (one line per sample: turns, replies, the tier it scored, turns_exhausted, return, tokens),
``summary.json`` (the table printed at the end) and ``trajectories/`` (the env's logs, every
``env.log_every``-th episode of each worker's env). Nothing here draws a random number: the
sampling is the server's (``send_seed`` gives it ``seed + j`` for sample ``j``).
"""

from __future__ import annotations

import abc
import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from baselines.common import (
    ConfigError,
    EnvSettings,
    Run,
    RunConfig,
    add_run_args,
    format_table,
    load_config,
    parse_overrides,
    validate_section,
)
from code_env.llm import LLMConfig, LLMConfigError, aliases_given, log_call
from code_env.reward import RewardConfig
from code_env.summary import SummaryConfig
from code_env.tracing import GenerationEnd

NAME = "llm_agent"
RECORD_NAME = "llm_record.jsonl"
RECORD_FORMAT = "code-env llm_agent record"
RECORD_VERSION = 1
NO_KEY = "EMPTY"  # what goes out when no key is configured (vLLM's convention for "none needed")
EnvName = Literal["CodeExec-v0", "CodeAgent-v0"]
EXEC_ENV: EnvName = "CodeExec-v0"  # a program per reply
AGENT_ENV: EnvName = "CodeAgent-v0"  # OpenAI function calling over a workspace
ENVS: tuple[EnvName, ...] = (EXEC_ENV, AGENT_ENV)
ENV_FIELDS_READ = ("backend", "log_every", "log_max_bytes", "log_text_bytes")  # the fields of env.json this script reads
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

DEFAULT_SYSTEM_PROMPT = (
    "You are an expert Python programmer. Solve the programming task you are given. Reply with the "
    "complete program in a single ```python code block: for a function task define the function with "
    "exactly the name asked for; for a standard input/output task read standard input and print the "
    "answer. No tests, no example usage."
)

DEFAULT_AGENT_SYSTEM_PROMPT = (
    "You are an expert programmer working on a programming task in a workspace of files, through the tools "
    "you are given: the task is in PROMPT.md, its public tests in test_public.py. Write the solution in Python "
    "in main.py, check it with run_tests, fix it, and call submit when it is right (submit ends the episode). "
    "Act only through tool calls: every reply counts against a budget of calls."
)

ReplyStatus = Literal["ok", "empty", "truncated", "malformed", "api_error"]
REPLY_STATUSES: tuple[ReplyStatus, ...] = ("ok", "empty", "truncated", "malformed", "api_error")


class _Literal:
    """Stands in for a literal API key during validation, so that no error message can show it."""

    def __repr__(self) -> str:
        return "<a literal key, not shown>"


class LLMAgentSettings(BaseModel):
    """``llm_agent.toml``: the endpoint, the sampling, the tasks and the episodes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str | None = Field(None, description="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (unset: $OPENAI_BASE_URL)")
    model: str | None = Field(None, description="the model id the endpoint serves (unset: $OPENAI_MODEL)")
    api_key: str | None = Field(None, description="only a ${ENV_VAR} placeholder (unset: $OPENAI_API_KEY if set, else no key)")
    timeout_s: float = Field(60.0, gt=0, le=3600, description="per request, seconds (the client's timeout)")
    max_retries: int = Field(2, ge=0, le=20, description="the client's retries on timeouts, connection errors, 429 and 5xx")
    llm: LLMConfig | None = Field(None, description="the endpoint as one LLM channel: an [llm] table or the path of a TOML "
                                  "file with one (name: agent); base_url ... max_retries are its aliases")  # fmt: skip
    temperature: float = Field(0.8, ge=0, le=2, description="sampling temperature")
    max_tokens: int = Field(1024, ge=1, le=1_000_000, description="completion tokens per reply")
    n_samples: int = Field(5, ge=1, le=10_000, description="samples (episodes) per task")
    k: list[int] = Field(default_factory=lambda: [1, 5], description="the k of pass@k (each 1 <= k <= n_samples; 1 is always reported)")
    env: EnvName = Field(
        EXEC_ENV, description="CodeExec-v0 (a program per reply) or CodeAgent-v0 (function calling: tools, a workspace)")
    max_turns: int = Field(1, ge=1, le=100, description="CodeExec-v0: turns per episode; > 1 feeds the env's feedback back")
    max_calls: int = Field(30, ge=1, le=1000, description="CodeAgent-v0: tool calls per episode (a reply without one counts as one)")
    llm_summary: SummaryConfig | None = Field(None, description="CodeExec-v0 with max_turns > 1: a model's summary of each run "
                                              "(include_llm_summary), in the next turn's message")  # fmt: skip
    task_set: str = Field("builtin", description="builtin, humaneval, synthetic:<family> or a .jsonl path")
    n_tasks: int | None = Field(None, ge=1, le=100_000, description="the first n tasks of the set (unset: all; synthetic: 20)")
    task_seed: int = Field(0, description="generator seed of a synthetic set")
    difficulty: int | None = Field(1, ge=1, le=5, description="difficulty of a synthetic set (None: 1-5 in turn)")
    seed: int = Field(0, description="sample j is requested with seed + j (when send_seed)")
    send_seed: bool = Field(True, description="send the request's seed (false for servers that reject the field)")
    concurrency: int = Field(4, ge=1, le=256, description="episodes in flight at once (requests and sandbox runs)")
    system_prompt: str = Field(DEFAULT_SYSTEM_PROMPT, description="the system message of every conversation "
                               "(CodeAgent-v0's default: DEFAULT_AGENT_SYSTEM_PROMPT)")  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _agent_prompt(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("env") == AGENT_ENV and data.get("system_prompt") is None:
            return {**data, "system_prompt": DEFAULT_AGENT_SYSTEM_PROMPT}
        return data

    @model_validator(mode="before")
    @classmethod
    def _hide_literal_key(cls, data: Any) -> Any:
        if isinstance(data, dict):
            key = data.get("api_key")
            if isinstance(key, str) and not _PLACEHOLDER.fullmatch(key.strip()):
                data = {**data, "api_key": _Literal()}
            if data.get("llm") is not None:
                try:
                    data = {**data, "llm": LLMConfig.coerce(data["llm"], name="agent")}
                except LLMConfigError as exc:
                    raise ValueError(f"llm: {exc}") from None
        return data

    @model_validator(mode="after")
    def _one_endpoint(self) -> LLMAgentSettings:
        given = aliases_given(self)  # (left at their defaults they are not: a dumped config reloads)
        if self.llm is not None and given:
            raise ValueError(f"the endpoint is given twice: llm and {', '.join(given)} (aliases of llm's fields); keep one")
        return self

    @field_validator("api_key", mode="before")
    @classmethod
    def _placeholder_only(cls, v: Any) -> Any:
        if isinstance(v, _Literal):
            raise ValueError("a literal API key is refused (keys do not belong in files or on the command "
                             "line); write api_key = '${OPENAI_API_KEY}' (or another variable's name) and set that "
                             "variable in the environment")  # fmt: skip
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(https?://\S+|\$\{[A-Za-z_][A-Za-z0-9_]*\})$", v.strip()):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000/v1 (or a ${{ENV_VAR}}), got {v!r}")
        return v

    @field_validator("max_turns")
    @classmethod
    def _turns_of_exec(cls, v: int, info: ValidationInfo) -> int:
        if v != 1 and info.data.get("env") == AGENT_ENV:
            raise ValueError(f"max_turns is {EXEC_ENV}'s; a {AGENT_ENV} episode is bounded by llm_agent.max_calls "
                             "(tool calls), so leave max_turns at 1")  # fmt: skip
        return v

    @field_validator("k")
    @classmethod
    def _ks(cls, v: list[int], info: ValidationInfo) -> list[int]:
        if any(k < 1 for k in v):
            raise ValueError(f"every k must be >= 1, got {v}")
        n = info.data.get("n_samples")
        if n is not None and max(v, default=1) > n:
            raise ValueError(f"pass@{max(v)} needs at least {max(v)} samples per task, n_samples is {n}")
        return sorted(set(v) | {1})


class EndpointError(ConfigError):
    """The endpoint refused the configuration (a 401/403 key, a 404 URL or model): stop at once."""


class ReplayError(ConfigError):
    """A record that cannot answer the evaluation: unreadable, another format, or a request it lacks."""


# ------------------------------------------------------------------------------------ endpoint


@dataclass(frozen=True)
class Endpoint:
    """Where requests go. ``key_source`` says where the key came from (``$VAR`` or ``none``); the
    key itself is only in ``api_key`` (not in ``repr``)."""

    base_url: str
    model: str
    key_source: str
    api_key: str = NO_KEY
    name: str = "agent"  # the channel's name in the log

    def __repr__(self) -> str:
        return f"Endpoint(base_url={self.base_url!r}, model={self.model!r}, key_source={self.key_source!r})"


def _expand(value: str, field: str, environ: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in environ:
            raise ConfigError(f"llm_agent.{field} names ${{{m.group(1)}}}, which is not set in the environment")
        return environ[m.group(1)]

    return _PLACEHOLDER.sub(sub, value)


def resolve_endpoint(settings: LLMAgentSettings, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The endpoint from the settings' ``llm``, else their aliases, else the environment (see the
    module's docstring)."""
    env = os.environ if environ is None else environ
    if settings.llm is not None:
        try:
            url = settings.llm.url(env)
            key, source = settings.llm.key(env)
        except LLMConfigError as exc:
            raise ConfigError(f"llm_agent.llm: {exc}") from None
        return Endpoint(base_url=url, model=settings.llm.model, key_source=source, api_key=key, name=settings.llm.name)
    base_url = _expand(settings.base_url, "base_url", env) if settings.base_url else env.get("OPENAI_BASE_URL", "")
    model = _expand(settings.model, "model", env) if settings.model else env.get("OPENAI_MODEL", "")
    missing = [name for name, value, var in (("base_url", base_url, "OPENAI_BASE_URL"), ("model", model, "OPENAI_MODEL"))
               if not value.strip()]  # fmt: skip
    if missing:
        how = " and ".join(f"llm_agent.{m} (--set llm_agent.{m}=... or ${'OPENAI_BASE_URL' if m == 'base_url' else 'OPENAI_MODEL'})"
                           for m in missing)  # fmt: skip
        raise ConfigError(f"no {' and no '.join(missing)} given: set {how}")
    if not re.match(r"^https?://\S+$", base_url.strip()):
        raise ConfigError(f"base_url {base_url!r} (from {'llm_agent.base_url' if settings.base_url else '$OPENAI_BASE_URL'}) "
                          "is not an http(s) URL such as http://127.0.0.1:8000/v1")  # fmt: skip
    if settings.api_key:
        var = _PLACEHOLDER.fullmatch(settings.api_key.strip())
        assert var is not None  # the settings admit nothing else
        key, source = _expand(settings.api_key.strip(), "api_key", env), f"${var.group(1)}"
    elif env.get("OPENAI_API_KEY"):
        key, source = env["OPENAI_API_KEY"], "$OPENAI_API_KEY"
    else:
        key, source = NO_KEY, "none"
    return Endpoint(base_url=base_url.strip(), model=model.strip(), key_source=source, api_key=key or NO_KEY)


# --------------------------------------------------------------------------------- replies


class Reply(BaseModel):
    """One request's outcome as the evaluation sees it."""

    status: ReplyStatus
    content: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    timed_out: bool = Field(False, description="the request ran past timeout_s (after the retries)")
    tool_calls: list[Any] = Field(default_factory=list, description="the message's function calls, as sent (any JSON)")

    @property
    def generation_end(self) -> GenerationEnd:
        """How the generation ended, as ``CodeExec-v0``'s ``end_generation`` takes it."""
        return "context_window_overflow" if self.status == "truncated" else "timed-out" if self.timed_out else "stop"


def parse_reply(body: str) -> Reply:
    """A chat completion's raw body -> ``Reply``: never raises (malformed JSON is ``malformed``)."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, ValueError):
        return Reply(status="malformed", error=f"the body is not JSON: {body[:80]!r}")
    if not isinstance(data, dict):
        return Reply(status="malformed", error=f"the body is JSON {type(data).__name__}, not an object")
    raw_usage = data.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    tokens = {k: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
              for k, v in ((k, usage.get(k)) for k in ("prompt_tokens", "completion_tokens"))}  # fmt: skip
    choices = data.get("choices")
    if not isinstance(choices, list):
        return Reply(status="malformed", error="the reply has no 'choices' list", **tokens)
    if not choices:
        return Reply(status="empty", error="the reply's 'choices' is empty", **tokens)
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        return Reply(status="malformed", error="the first choice has no 'message' object", **tokens)
    content = message.get("content")
    finish = first.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    if content is not None and not isinstance(content, str):
        return Reply(status="malformed", error=f"the message's content is {type(content).__name__}, not text", **tokens)
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return Reply(status="malformed", error=f"the message's tool_calls is {type(calls).__name__}, not a list", **tokens)
    calls = calls or []
    if finish == "length":
        return Reply(status="truncated", content=content or "", finish_reason=finish, tool_calls=calls,
                     error="the reply was cut off at max_tokens (finish_reason 'length')", **tokens)  # fmt: skip
    if calls:  # (each call, well-formed or not, is the env's to judge)
        return Reply(status="ok", content=content or "", finish_reason=finish, tool_calls=calls, **tokens)
    if not content or not content.strip():
        return Reply(status="empty", content=content or "", finish_reason=finish, error="the reply has no text", **tokens)
    return Reply(status="ok", content=content, finish_reason=finish, **tokens)


def request_key(problem_id: str, sample: int, request: Mapping[str, Any]) -> str:
    """The record's key of one call: the request's content, the problem and the sample index."""
    blob = json.dumps({"problem_id": problem_id, "sample": sample, "request": request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Transport(abc.ABC):
    """Answers requests: ``LiveTransport`` (the endpoint, recording) or ``ReplayTransport``."""

    endpoint: Endpoint

    @abc.abstractmethod
    def call(self, problem_id: str, sample: int, turn: int, request: dict[str, Any], trace_id: str | None = None) -> Reply:
        """The reply to one request of sample ``sample``'s conversation at ``turn``; raises
        ``EndpointError`` (and ``ReplayError``) only for what must stop the whole run.
        ``trace_id``: the env step's (``code_env.tracing``), written on the record's line."""

    def close(self) -> None:  # noqa: B027 - nothing to release unless a transport holds something
        """Release what the transport holds (the HTTP client)."""


def _auth_message(endpoint: Endpoint, status: int | None) -> str:
    source = ("no key was sent (llm_agent.api_key is unset and OPENAI_API_KEY is not set)" if endpoint.key_source == "none"
              else f"check the key in {endpoint.key_source}")  # fmt: skip
    return f"{endpoint.base_url} refused the API key (HTTP {status}): {source}"


def _not_found_message(endpoint: Endpoint) -> str:
    return (f"{endpoint.base_url} answered 404 for model {endpoint.model!r}: check base_url (an OpenAI-compatible "
            "API usually ends in /v1) and the model id")  # fmt: skip


class LiveTransport(Transport):
    """The real ``openai`` client; every call is appended to the record (flushed per line)."""

    def __init__(self, endpoint: Endpoint, settings: LLMAgentSettings, record: TextIO) -> None:
        try:
            import openai
        except ModuleNotFoundError:
            raise ConfigError("the LLM agent needs the openai client: pip install 'code-env[llm]'") from None
        self.openai = openai
        self.endpoint = endpoint
        channel = settings.llm  # (its timeout and retries; without it, the aliases')
        self.client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key,
                                    timeout=channel.timeout_s if channel else settings.timeout_s,
                                    max_retries=channel.max_retries if channel else settings.max_retries)  # fmt: skip
        self.record = record
        self.lock = threading.Lock()

    def _redact(self, text: str) -> str:
        key = self.endpoint.api_key
        return text.replace(key, "[api key]") if key and key != NO_KEY else text

    def call(self, problem_id: str, sample: int, turn: int, request: dict[str, Any], trace_id: str | None = None) -> Reply:
        openai = self.openai
        started = time.monotonic()
        body: str | None = None
        error: dict[str, Any] | None = None
        fatal: str | None = None
        try:
            raw = self.client.chat.completions.with_raw_response.create(**request)
            body = self._redact(str(raw.http_response.text))
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            fatal = _auth_message(self.endpoint, exc.status_code)
            error = {"kind": "auth_error", "type": type(exc).__name__, "status_code": exc.status_code}
        except openai.NotFoundError as exc:
            fatal = _not_found_message(self.endpoint)
            error = {"kind": "not_found", "type": type(exc).__name__, "status_code": exc.status_code}
        except openai.APIStatusError as exc:  # 5xx and 429 after the retries, another 4xx at once
            error = {"kind": "api_error", "type": type(exc).__name__, "status_code": exc.status_code,
                     "message": self._redact(f"HTTP {exc.status_code}: {exc.message}")[:500]}  # fmt: skip
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:  # after the retries
            error = {"kind": "api_error", "type": type(exc).__name__, "status_code": None,
                     "message": self._redact(f"{type(exc).__name__}: {exc}")[:500]}  # fmt: skip
        entry = {"type": "call", "key": request_key(problem_id, sample, request), "trace_id": trace_id, "problem_id": problem_id,
                 "sample": sample, "turn": turn, "request": request, "body": body, "error": error,
                 "latency_s": round(time.monotonic() - started, 3)}  # fmt: skip
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        _log_call(self.endpoint, entry, replayed=False)
        with self.lock:
            self.record.write(line)
            self.record.flush()
        if fatal is not None:
            raise EndpointError(fatal)
        return _reply_of(entry)

    def close(self) -> None:
        self.client.close()


def _log_call(endpoint: Endpoint, entry: Mapping[str, Any], *, replayed: bool) -> None:
    """One call on the channel's log (``code_env.llm``): its record without request and body."""
    error = entry.get("error") or {}
    record = {k: entry.get(k) for k in ("key", "trace_id", "problem_id", "sample", "turn", "latency_s")}
    log_call(endpoint.name, {"kind": "agent", "model": endpoint.model, "replayed": replayed,
                             "status": error.get("kind") or "ok", **record})  # fmt: skip


def _reply_of(entry: Mapping[str, Any]) -> Reply:
    """A recorded call -> ``Reply`` (live and replay go through this one function)."""
    if entry.get("body") is not None:
        return parse_reply(str(entry["body"]))
    error = entry.get("error") or {}
    return Reply(status="api_error", error=str(error.get("message") or error.get("type") or "no reply"),
                 timed_out=error.get("type") == "APITimeoutError")  # fmt: skip


class ReplayTransport(Transport):
    """Answers from a record; a request it lacks is a ``ReplayError``."""

    def __init__(self, path: Path, header: Mapping[str, Any], calls: dict[str, dict[str, Any]]) -> None:
        self.path, self.header, self.calls = path, header, calls
        endpoint = header.get("endpoint") or {}
        self.endpoint = Endpoint(base_url=str(endpoint.get("base_url")), model=str(endpoint.get("model")),
                                 key_source=str(endpoint.get("key_source")), name=str(endpoint.get("name") or "agent"))  # fmt: skip

    def call(self, problem_id: str, sample: int, turn: int, request: dict[str, Any], trace_id: str | None = None) -> Reply:
        key = request_key(problem_id, sample, request)
        entry = self.calls.get(key)
        if entry is None:
            raise ReplayError(
                f"{self.path}: no recorded reply for {problem_id} sample {sample} turn {turn} (request {key[:16]}): the "
                "tasks, the prompts or the sampling settings differ from the recorded run, or the sandbox judged an "
                "earlier turn differently so that its feedback changed")  # fmt: skip
        _log_call(self.endpoint, entry, replayed=True)
        kind = (entry.get("error") or {}).get("kind")
        if kind == "auth_error":
            raise EndpointError(_auth_message(self.endpoint, (entry.get("error") or {}).get("status_code")) + " (recorded)")
        if kind == "not_found":
            raise EndpointError(_not_found_message(self.endpoint) + " (recorded)")
        return _reply_of(entry)


def read_record(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The header and the calls (by key) of a record file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ReplayError(f"--replay {path}: cannot read: {exc.strerror}") from None
    header: dict[str, Any] | None = None
    calls: dict[str, dict[str, Any]] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind == "header" and header is None and lineno == 1:
            header = entry
        elif kind == "call" and header is not None and isinstance(entry.get("key"), str):
            calls[entry["key"]] = entry
        else:
            what = "a header line first" if header is None else "a call line"
            raise ReplayError(f"{path}:{lineno}: not an {RECORD_FORMAT} (expected {what})")
    if header is None:
        raise ReplayError(f"{path}: empty; not an {RECORD_FORMAT}")
    if header.get("format") != RECORD_FORMAT or header.get("version") != RECORD_VERSION:
        raise ReplayError(f"{path}: format {header.get('format')!r} version {header.get('version')!r}, expected "
                          f"{RECORD_FORMAT!r} version {RECORD_VERSION}")  # fmt: skip
    return header, calls


# --------------------------------------------------------------------------------- episodes


class SampleResult(BaseModel):
    """One sample (episode) of one task."""

    problem_id: str
    sample: int
    turns: int
    replies: list[ReplyStatus]
    passed: bool
    solved_turn: int | None = Field(None, description="the turn whose program passed every test")
    tier: str = Field(description="the tier the final step scored (code_env.logtools.outcome): out of turns, the last "
                      "program's own; budget_exhausted when another budget (characters, turn time, episode clock) "
                      "ended the episode")  # fmt: skip
    turns_exhausted: bool = Field(False, description="the episode ended because its turns (CodeAgent-v0: its tool calls) "
                                  "ran out (tier says what it scored)")  # fmt: skip
    episode_return: float | None = Field(description="the sum of the step rewards (None: the sandbox or the judge failed)")
    sandbox_error: str | None = None
    judge_error: str | None = Field(None, description="the LLM judge's endpoint failed: the sample is dropped")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests_with_usage: int = 0
    tool_calls: int | None = Field(None, description="CodeAgent-v0: the env steps (tool calls, and replies without one)")
    tool_errors: int | None = Field(None, description="CodeAgent-v0: the steps whose call could not be read or done")


def first_message(task: Any, prompt: str) -> str:
    """The first user message: the env's prompt and what to write."""
    if task.kind == "function":
        ask = f"Write the Python function `{task.entry_point}`."
    else:
        ask = "Write a Python program that reads standard input and prints the answer to standard output."
    return f"{prompt.rstrip()}\n\n{ask} Reply with the complete program in one ```python code block."


def feedback_message(lines: Sequence[str]) -> str:
    """A later user message: the env's rendering of its observation of the last program."""
    return ("Your program was run on the public tests:\n\n" + "\n".join(lines) +
            "\n\nFix the program. Reply with the complete corrected program in one ```python code block.")  # fmt: skip


class Stopped(Exception):
    """Another episode hit a fatal error: this one stops too."""


def run_sample(env: Any, task: Any, sample: int, settings: LLMAgentSettings, model: str, transport: Transport,
               stop: threading.Event | None = None) -> SampleResult:  # fmt: skip
    """One episode of ``CodeExec-v0``: ask, judge the reply's program, feed back, until the env
    ends it (``CodeAgent-v0``: ``run_agent_sample``)."""
    if settings.env == AGENT_ENV:
        return run_agent_sample(env, task, sample, settings, model, transport, stop)
    from code_env import extract_code
    from code_env.logtools import outcome, turns_exhausted

    obs, _ = env.reset(seed=settings.seed + sample, options={"problem_id": task.problem_id, "sample": sample})
    messages: list[dict[str, str]] = [{"role": "system", "content": settings.system_prompt},
                                      {"role": "user", "content": first_message(task, obs["prompt"])}]  # fmt: skip
    replies: list[ReplyStatus] = []
    ret = 0.0
    prompt_tokens = completion_tokens = with_usage = 0
    while True:
        if stop is not None and stop.is_set():
            raise Stopped
        request: dict[str, Any] = {"model": model, "messages": list(messages), "temperature": settings.temperature,
                                   "max_tokens": settings.max_tokens}  # fmt: skip
        if settings.send_seed:
            request["seed"] = settings.seed + sample
        turn = len(replies) + 1
        reply = transport.call(task.problem_id, sample, turn, request, trace_id=env.unwrapped.trace_id)
        env.unwrapped.end_generation(reply.generation_end)  # the agent owns the generating state
        replies.append(reply.status)
        if reply.prompt_tokens is not None or reply.completion_tokens is not None:
            with_usage += 1
            prompt_tokens += reply.prompt_tokens or 0
            completion_tokens += reply.completion_tokens or 0
        code = extract_code(reply.content) if reply.status in ("ok", "truncated") else ""
        obs, reward, terminated, truncated, info = env.step(code)
        ret += float(reward)
        if info.get("sandbox_error") or info.get("judge_error"):
            failed = {"sandbox_error": str(info["sandbox_error"])} if info.get("sandbox_error") else {"judge_error": str(info["judge_error"])}
            return SampleResult(problem_id=task.problem_id, sample=sample, turns=turn, replies=replies, passed=False,
                                tier=next(iter(failed)), episode_return=None, **failed,
                                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                requests_with_usage=with_usage)  # fmt: skip
        if terminated or truncated:
            tier = outcome(info)
            passed = bool(terminated and tier == "all_tests")
            return SampleResult(problem_id=task.problem_id, sample=sample, turns=turn, replies=replies, passed=passed,
                                solved_turn=turn if passed else None, tier=tier, turns_exhausted=turns_exhausted(info),
                                episode_return=round(ret, 6),
                                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                requests_with_usage=with_usage)  # fmt: skip
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": feedback_message(env.unwrapped.render_lines())})


def no_tool_message(why: str, tools: Sequence[str]) -> str:
    """The user message after a reply that called no tool (it counted as one call)."""
    return (f"Your reply called no tool ({why}); it counted as one of your tool calls. Reply with a function call: "
            f"{', '.join(tools)} (submit hands in main.py and ends the episode).")  # fmt: skip


def planned_calls(reply: Reply, turn: int) -> list[tuple[str, dict[str, Any], Any]]:
    """The function calls of a reply, in order, as ``(tool_call_id, the call for the assistant
    message, the env's action)``. A call whose id is missing or repeated gets ``call_<turn>_<i>``;
    the assistant message's copy is OpenAI's shape (name and arguments as strings), the action the
    call as the model sent it, so that the env judges it (and says what is wrong with it)."""
    out: list[tuple[str, dict[str, Any], Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(reply.tool_calls):
        fn = item.get("function") if isinstance(item, dict) else None
        call_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            call_id = f"call_{turn}_{i}"
        seen.add(call_id)
        name = fn.get("name") if isinstance(fn, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        echo = {"id": call_id, "type": "function",
                "function": {"name": name if isinstance(name, str) else "",
                             "arguments": args if isinstance(args, str) else json.dumps(args if args is not None else {})}}  # fmt: skip
        out.append((call_id, echo, fn if isinstance(fn, dict) else item))
    return out


def _agent_dropped(info: Mapping[str, Any]) -> dict[str, str] | None:
    """The episode's last step failed to be judged (the sandbox or the judge): the sample is
    dropped. A ``run`` call's own sandbox failure is only that call's (its result says so); it
    drops the sample only when the budget's final grading after it failed too."""
    if info.get("judge_error"):
        return {"judge_error": str(info["judge_error"])}
    if info.get("sandbox_error") and not (info.get("tool") == "run" and info.get("reward_breakdown")):
        return {"sandbox_error": str(info["sandbox_error"])}
    return None


def run_agent_sample(env: Any, task: Any, sample: int, settings: LLMAgentSettings, model: str, transport: Transport,
                     stop: threading.Event | None = None) -> SampleResult:  # fmt: skip
    """One episode of ``CodeAgent-v0`` through OpenAI function calling (see the module): ask with
    ``tools=``, play each call of the reply as a step and answer it with a ``tool`` message, until
    the env ends the episode."""
    from code_env.logtools import outcome

    obs, _ = env.reset(seed=settings.seed + sample, options={"problem_id": task.problem_id})
    tools: list[dict[str, Any]] = env.unwrapped.tools
    names = [t["function"]["name"] for t in tools]
    messages: list[dict[str, Any]] = [{"role": "system", "content": settings.system_prompt},
                                      {"role": "user", "content": f"{str(obs['prompt']).rstrip()}\n\n{obs['tool_result']}"}]  # fmt: skip
    replies: list[ReplyStatus] = []
    ret = 0.0
    prompt_tokens = completion_tokens = with_usage = steps = errors = 0
    while True:
        if stop is not None and stop.is_set():
            raise Stopped
        request: dict[str, Any] = {"model": model, "messages": list(messages), "tools": tools,
                                   "temperature": settings.temperature, "max_tokens": settings.max_tokens}  # fmt: skip
        if settings.send_seed:
            request["seed"] = settings.seed + sample
        turn = len(replies) + 1
        reply = transport.call(task.problem_id, sample, turn, request, trace_id=getattr(env.unwrapped, "trace_id", None))
        replies.append(reply.status)
        if reply.prompt_tokens is not None or reply.completion_tokens is not None:
            with_usage += 1
            prompt_tokens += reply.prompt_tokens or 0
            completion_tokens += reply.completion_tokens or 0
        actions: list[tuple[str | None, Any]]
        if reply.tool_calls:
            planned = planned_calls(reply, turn)
            messages.append({"role": "assistant", "content": reply.content or None, "tool_calls": [p[1] for p in planned]})
            actions = [(call_id, action) for call_id, _, action in planned]
        else:  # its text is the action: a <tool_call> in it is played, anything else calls no tool
            if reply.content:
                messages.append({"role": "assistant", "content": reply.content})
            actions = [(None, reply.content if reply.status in ("ok", "truncated", "empty") else "")]
        for call_id, action in actions:
            obs, reward, terminated, truncated, info = env.step(action)
            ret += float(reward)
            steps += 1
            errors += info.get("tool_error") is not None
            if terminated or truncated:
                counts = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "requests_with_usage": with_usage, "tool_calls": steps, "tool_errors": errors}  # fmt: skip
                dropped = _agent_dropped(info)
                if dropped is not None:
                    return SampleResult(problem_id=task.problem_id, sample=sample, turns=turn, replies=replies, passed=False,
                                        tier=next(iter(dropped)), episode_return=None, **dropped, **counts)  # fmt: skip
                exhausted = info.get("budget") == "tool_calls"  # main.py graded as submitted: its own tier
                tier = outcome({**info, "budget": None}) if exhausted else outcome(info)
                passed = bool(terminated and tier == "all_tests")
                return SampleResult(problem_id=task.problem_id, sample=sample, turns=turn, replies=replies, passed=passed,
                                    solved_turn=turn if passed else None, tier=tier, turns_exhausted=exhausted,
                                    episode_return=round(ret, 6), **counts)  # fmt: skip
            result = str(obs["tool_result"])
            if call_id is not None:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            elif info.get("tool") is not None:  # a call written in the text (<tool_call>...): its result
                messages.append({"role": "user", "content": f"Result of {info['tool']}:\n{result}"})
            else:
                why = (result if reply.status in ("ok", "truncated", "empty") else f"the request failed: {reply.error}"
                       if reply.status == "api_error" else f"the reply could not be read: {reply.error}")  # fmt: skip
                messages.append({"role": "user", "content": no_tool_message(why, names)})


# ---------------------------------------------------------------------------------- metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task with ``c`` correct of ``n`` samples: ``1 - C(n-c, k)/C(n, k)``,
    as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (Chen et al., 2021), numerically stable for any n.

    >>> round(pass_at_k(4, 2, 2), 12)  # 1 - C(2,2)/C(4,2) = 1 - 1/6
    0.833333333333
    >>> pass_at_k(4, 3, 2)  # n - c < k: every draw of 2 holds a correct sample
    1.0
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: expected 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def summarize(results: Sequence[SampleResult], settings: LLMAgentSettings) -> dict[str, Any]:
    """The evaluation's numbers (all of them follow from the replies and the sandbox's verdicts)."""
    by_task: dict[str, list[SampleResult]] = {}
    for r in results:
        by_task.setdefault(r.problem_id, []).append(r)
    judged = [r for r in results if r.sandbox_error is None and r.judge_error is None]
    out: dict[str, Any] = {}
    for k in settings.k:
        scores = [pass_at_k(n, c, k) for n, c in
                  ((sum(r.sandbox_error is None and r.judge_error is None for r in rs), sum(r.passed for r in rs)) for rs in by_task.values()) if n >= k]  # fmt: skip
        out[f"pass@{k}"] = sum(scores) / len(scores) if scores else None
        if len(scores) < len(by_task):
            out[f"pass@{k}_tasks"] = len(scores)  # tasks with fewer than k judged samples are left out
    n_judged = len(judged)
    horizon = settings.max_calls if settings.env == AGENT_ENV else settings.max_turns  # (a request costs a call at least)
    out["solved_within_turn"] = [sum(1 for r in judged if r.solved_turn is not None and r.solved_turn <= t) / n_judged
                                 if n_judged else None for t in range(1, horizon + 1)]  # fmt: skip
    returns = [r.episode_return for r in judged if r.episode_return is not None]
    out["reward_mean"] = sum(returns) / len(returns) if returns else None
    out["tiers"] = dict(sorted(Counter(r.tier for r in results).items()))
    out["turns_exhausted"] = sum(r.turns_exhausted for r in results)  # counted in "tiers" by what they scored
    statuses = Counter(s for r in results for s in r.replies)
    out["replies"] = {s: statuses.get(s, 0) for s in REPLY_STATUSES}
    out["requests"] = sum(statuses.values())
    out["api_errors"] = statuses.get("api_error", 0)
    out["tokens"] = {"prompt": sum(r.prompt_tokens for r in results), "completion": sum(r.completion_tokens for r in results),
                     "requests_with_usage": sum(r.requests_with_usage for r in results)}  # fmt: skip
    out["tasks"] = len(by_task)
    out["samples"] = len(results)
    out["samples_judged"] = n_judged
    out["sandbox_errors"] = sum(r.sandbox_error is not None for r in results)
    out["judge_errors"] = sum(r.judge_error is not None for r in results)
    if settings.env == AGENT_ENV:
        calls = [r.tool_calls for r in results if r.tool_calls is not None]
        out["tool_calls_mean"] = sum(calls) / len(calls) if calls else None
        out["tool_errors"] = sum(r.tool_errors or 0 for r in results)
    return out


# -------------------------------------------------------------------------------- evaluation


def load_tasks(settings: LLMAgentSettings) -> list[Any]:
    """The evaluation's tasks: the first ``n_tasks`` of the set (a synthetic set: ``n_tasks``
    generated with ``task_seed`` and ``difficulty``)."""
    import registry
    from registry.errors import RegistryError

    try:
        if settings.task_set.startswith("synthetic:"):
            return registry.load(settings.task_set, n=settings.n_tasks or 20, seed=settings.task_seed,
                                 difficulty=settings.difficulty)  # fmt: skip
        tasks = registry.load(settings.task_set)
    except (RegistryError, TypeError) as exc:
        raise ConfigError(f"llm_agent.task_set: {exc}") from None
    except ModuleNotFoundError as exc:
        raise ConfigError(f"llm_agent.task_set {settings.task_set!r} needs {exc.name}: pip install 'code-env[llm]'") from None
    if not tasks:
        raise ConfigError(f"llm_agent.task_set {settings.task_set!r} has no tasks")
    return tasks[: settings.n_tasks] if settings.n_tasks else tasks


def fingerprints(tasks: Sequence[Any]) -> dict[str, str]:
    from code_env.env import task_fingerprint

    return {t.problem_id: task_fingerprint(t) for t in tasks}


def evaluate_agent(cfg: RunConfig, tasks: Sequence[Any], transport: Transport, model: str, *, executor: Any = None,
                   log_dir: Path | None = None,
                   on_result: Callable[[SampleResult], None] | None = None) -> list[SampleResult]:  # fmt: skip
    """Every sample of every task, ``concurrency`` episodes at a time (one env per worker thread,
    one sandbox for all); results in (task, sample) order whatever order they finish in."""
    import gymnasium as gym
    from tqdm import tqdm

    import code_env  # noqa: F401 - registers CodeExec-v0 and CodeAgent-v0

    settings: LLMAgentSettings = cfg.algo  # type: ignore[assignment]
    executor = executor if executor is not None else cfg.env.runner()
    local = threading.local()
    envs: list[Any] = []
    envs_lock = threading.Lock()
    stop = threading.Event()

    def env_of_thread() -> Any:
        if not hasattr(local, "env"):
            options: dict[str, Any] = {"reward": cfg.reward, "executor": executor}
            if settings.env == AGENT_ENV:  # (no trajectory log there yet)
                options["max_calls"] = settings.max_calls
            else:
                options["max_turns"] = settings.max_turns
                if settings.llm_summary is not None:  # the next turn's message carries it (render_lines)
                    options |= {"include_llm_summary": True, "llm_summary": settings.llm_summary}
                if log_dir is not None:
                    options |= {"log_dir": str(log_dir), "log_every": cfg.env.log_every, "log_max_bytes": cfg.env.log_max_bytes,
                                "log_text_bytes": cfg.env.log_text_bytes}  # fmt: skip
            local.env = gym.make(settings.env, tasks=list(tasks), **options)
            with envs_lock:
                envs.append(local.env)
        return local.env

    def work(task: Any, sample: int) -> SampleResult:
        return run_sample(env_of_thread(), task, sample, settings, model, transport, stop)

    jobs = [(i, task, j) for i, task in enumerate(tasks) for j in range(settings.n_samples)]
    results: dict[tuple[int, int], SampleResult] = {}
    pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="llm-agent")
    bar = tqdm(total=len(jobs), desc="llm-agent", unit="sample", disable=None)
    try:
        futures: dict[Future[SampleResult], tuple[int, int]] = {pool.submit(work, task, j): (i, j) for i, task, j in jobs}
        for fut in as_completed(futures):
            result = fut.result()
            results[futures[fut]] = result
            if on_result is not None:
                on_result(result)
            bar.update()
            bar.set_postfix(passed=sum(r.passed for r in results.values()), refresh=False)
    except BaseException:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        bar.close()
        pool.shutdown(wait=True)
        for env in envs:
            env.close()
    return [results[(i, j)] for i, _, j in jobs]


# ----------------------------------------------------------------------------------- the CLI


def _replay_config(header: Mapping[str, Any], overrides: Sequence[str], path: Path) -> RunConfig:
    config = header.get("config")
    if not isinstance(config, dict) or not all(isinstance(config.get(s), dict) for s in ("env", "reward", NAME)):
        raise ReplayError(f"{path}: the header holds no configuration (sections env, reward, {NAME})")
    over = parse_overrides(overrides, ["env", "reward", NAME])
    where = f"{path} (header{', with --set' if any(over.values()) else ''})"
    env = validate_section(EnvSettings, {**config["env"], **over["env"]}, where, "env")
    reward = validate_section(RewardConfig, {**config["reward"], **over["reward"]}, where, "reward")
    algo = validate_section(LLMAgentSettings, {**config[NAME], **over[NAME]}, where, NAME)
    return RunConfig(algo_name=NAME, env=env, reward=reward, algo=algo)


def _check_env_overrides(overrides: Sequence[str]) -> None:
    for item in overrides:
        key = item.partition("=")[0].strip()
        section, _, name = key.partition(".")
        if section == "env" and name not in ENV_FIELDS_READ:
            raise ConfigError(f"--set {item!r}: the LLM agent reads only env.{', env.'.join(ENV_FIELDS_READ)}; its "
                              f"tasks and turns are llm_agent.task_set, n_tasks, task_seed, difficulty and max_turns")  # fmt: skip


def _print_summary(summary: Mapping[str, Any], settings: LLMAgentSettings, model: str) -> None:
    rows: list[list[Any]] = [["model", model], ["env", settings.env], ["tasks x samples", f"{summary['tasks']} x {settings.n_samples}"],
                             ["max tool calls", settings.max_calls] if settings.env == AGENT_ENV else ["max turns", settings.max_turns]]  # fmt: skip
    rows += [[k, summary[k]] for k in summary if k.startswith("pass@") and not k.endswith("_tasks")]
    if settings.env == AGENT_ENV:
        rows.append(["tool calls per episode (mean)", "-" if summary["tool_calls_mean"] is None else f"{summary['tool_calls_mean']:.2f}"])
        rows.append(["calls that could not be read or done", summary["tool_errors"]])
    elif settings.max_turns > 1:
        rows.append(["solved within turn 1..", ", ".join("-" if x is None else f"{x:.3f}" for x in summary["solved_within_turn"])])
    rows.append(["reward mean", summary["reward_mean"]])
    rows.append(["tiers", ", ".join(f"{t} {n}" for t, n in summary["tiers"].items())])
    if summary.get("turns_exhausted"):
        rows.append([f"{'tool calls' if settings.env == AGENT_ENV else 'turns'} ran out (in tiers above)", summary["turns_exhausted"]])
    rows.append(["replies", ", ".join(f"{s} {n}" for s, n in summary["replies"].items() if n)])
    tok = summary["tokens"]
    rows.append(["tokens (prompt / completion)", f"{tok['prompt']} / {tok['completion']} ({tok['requests_with_usage']} of "
                                                  f"{summary['requests']} requests reported usage)"])  # fmt: skip
    if summary["sandbox_errors"]:
        rows.append(["sandbox errors (dropped)", summary["sandbox_errors"]])
    if summary.get("judge_errors"):
        rows.append(["judge errors (dropped)", summary["judge_errors"]])
    print(format_table(["metric", "value"], [[a, "-" if b is None else b] for a, b in rows]))
    if summary["api_errors"]:
        print(f"warning: {summary['api_errors']} of {summary['requests']} requests failed after the retries; they count as "
              "failed attempts (pass@k is a lower bound)", file=sys.stderr)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.llm_agent", description=(__doc__ or "").split("\n\n")[0].strip())
    add_run_args(parser)
    parser.add_argument("--config", type=Path, default=None, help="the llm_agent.toml to use (default: the shipped one)")
    parser.add_argument("--replay", type=Path, default=None, metavar="RECORD.jsonl",
                        help="rerun offline from a record (its configuration; --set still applies)")  # fmt: skip
    parser.add_argument("--env", choices=ENVS, default=None,
                        help=f"the env of the episodes (--set llm_agent.env=...): {EXEC_ENV}, a program per reply (the "
                             f"default), or {AGENT_ENV}, OpenAI function calling over a workspace")  # fmt: skip
    args = parser.parse_args(argv)
    if args.env is not None:
        args.set = [*args.set, f"{NAME}.env={args.env}"]
    try:
        return _main(args)
    except ConfigError as exc:
        print(f"llm_agent: error: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    _check_env_overrides(args.set)
    record_file: TextIO | None = None
    transport: Transport
    if args.replay is not None:
        if args.config is not None or args.config_dir is not None:
            raise ConfigError("--replay takes its configuration from the record; change a field with --set")
        header, calls = read_record(args.replay)
        cfg = _replay_config(header, args.set, args.replay)
        settings: LLMAgentSettings = cfg.algo  # type: ignore[assignment]
        tasks = load_tasks(settings)
        recorded = header.get("tasks") or {}
        for pid, fp in fingerprints(tasks).items():
            if recorded.get(pid) != fp:
                why = "is not in the recorded run" if pid not in recorded else "changed since the recording"
                raise ReplayError(f"{args.replay}: task {pid} {why} (the replies were to other prompts)")
        transport = ReplayTransport(args.replay, header, calls)
        model = str((header.get("endpoint") or {}).get("model") or settings.model)
    else:
        cfg = load_config(NAME, LLMAgentSettings, config_dir=args.config_dir, overrides=args.set,
                          files={"algo": args.config} if args.config is not None else None)  # fmt: skip
        settings = cfg.algo  # type: ignore[assignment]
        endpoint = resolve_endpoint(settings)
        used = {"base_url": endpoint.base_url, "model": endpoint.model}
        settings = settings.model_copy(update={"llm": settings.llm.model_copy(update=used)} if settings.llm else used)
        cfg = cfg.model_copy(update={"algo": settings})  # config.json and the record's header: the endpoint used
        tasks = load_tasks(settings)
        model = endpoint.model
    with Run.create(args.name or "llm-agent", cfg, out=args.out) as run:
        if args.replay is None:
            header = {"type": "header", "format": RECORD_FORMAT, "version": RECORD_VERSION, "config": cfg.as_dict(),
                      "endpoint": {"base_url": endpoint.base_url, "model": endpoint.model, "key_source": endpoint.key_source,
                                   "name": endpoint.name},
                      "tasks": fingerprints(tasks)}  # fmt: skip
            record_file = open(run.path / RECORD_NAME, "w", encoding="utf-8")
            record_file.write(json.dumps(header, ensure_ascii=False) + "\n")
            record_file.flush()
            transport = LiveTransport(endpoint, settings, record_file)
        print(f"llm_agent: {len(tasks)} tasks x {settings.n_samples} samples, {model} "
              f"{'replayed from ' + str(args.replay) if args.replay else 'at ' + endpoint.base_url}; run dir {run.path}")  # fmt: skip
        started = time.monotonic()
        try:
            with open(run.path / "samples.jsonl", "w", encoding="utf-8") as samples:
                results = evaluate_agent(cfg, tasks, transport, model, log_dir=run.trajectories)
                for r in results:
                    samples.write(r.model_dump_json() + "\n")
        finally:
            transport.close()
            if record_file is not None:
                record_file.close()
        summary = summarize(results, settings)
        wall = time.monotonic() - started
        summary |= {"model": model, "env": settings.env, "task_set": settings.task_set, "n_samples": settings.n_samples,
                    "max_turns": settings.max_turns, "temperature": settings.temperature,
                    "mode": "replay" if args.replay else "live",
                    "record": str(args.replay) if args.replay else RECORD_NAME,
                    "timing": {"wall_s": round(wall, 3), "samples_per_s": round(len(results) / wall, 3) if wall > 0 else None}}  # fmt: skip
        run.write_summary(summary)
        _print_summary(summary, settings, model)
        print(f"summary: {run.path / 'summary.json'}")
    if summary["requests"] and summary["api_errors"] == summary["requests"]:
        print(f"llm_agent: every request failed after the retries: is {transport.endpoint.base_url} up?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
