"""The ``code-env`` command.

    code-env run FILE [--json] [--timeout S] [--memory-mb M] [--backend B] [--stdin FILE|-] [...]
    code-env demo [--tasks N] [--log-dir DIR] [--json]
    code-env sandbox-demo [--backend B ...] [--json]
    code-env info [--backend B]
    code-env replay LOG
    code-env audit LOG [--top N] [--seed S]
    code-env stats LOG [--png FILE]
    code-env tasks list [PATTERN] [--set S] [--difficulty D] | show ID [--set S] | validate NAME
    code-env tasks pass-rate SET --agent AGENT [--k K] [--samples N] [--out DIR] [--record FILE | --replay FILE]
    code-env executor --redis URL [--pool NAME] [--backend B] [--workers N] [--batch N] [...]
    code-env samples --redis URL [--run NAME] [--json] [--no-scan]
    code-env check-llm [--base-url URL] [--model ID] [--api-key '${VAR}'] [--config FILE] [...]

Every ``Limits`` field is a flag of ``run`` (``--cpu-time-s``, ``--max-output-bytes``, ...), with
``--timeout`` as the short name of ``--timeout-s``. ``run`` feeds the program its standard input
when that is not a terminal (``echo 3 | code-env run prog.py``), or ``--stdin FILE``.
Exit status: 0 when the sandbox did its job (whatever the program did), 1 when the sandbox itself
failed (``sandbox_error``), 2 for bad usage or input: one line on stderr, never a traceback.
``replay``: 0 when every re-judged reward matches the log (and, for a ``CodeAgent-v0`` episode,
every call's observation and workspace), 1 when some differ. ``check-llm``: 0 when the endpoint
answered the number asked for, 1 when it answered wrong or not at all (the line says what is wrong). ``tasks validate``:
1 when a task is rejected (a ``WARNING`` line, e.g. a task without hidden tests, does not reject). LOG is a trajectory log file or a directory of them.

What a person reads (every output but ``--json``, and the error lines) shows control, bidi,
zero-width and other invisible characters escaped (``code_env._visible``): a program cannot
move the cursor, erase lines or reorder text on the terminal of whoever reads its results.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import types
from collections.abc import Sequence
from typing import Any, Literal, NoReturn, Union, get_args, get_origin

from pydantic import ValidationError

from registry import RegistryError, Task
from sandbox import BACKENDS, Limits, RunRequest, Sandbox, SandboxError, UnknownBackendError

from ._errors import first_error
from ._verdicts import summary
from ._visible import visible
from .trajectory import LogFileError

_ALIASES = {"timeout_s": ["--timeout"]}


class UsageError(Exception):
    """Bad usage or input: reported as one line on stderr, exit status 2. ``prog`` names the
    (sub)command whose usage it was (default: the one that runs)."""

    def __init__(self, message: str, prog: str | None = None) -> None:
        self.prog = prog
        super().__init__(message)


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line that says where to read more (argparse's
    own print the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')", self.prog)


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text.strip())


def _why(exc: OSError) -> str:
    """An ``OSError`` in words: its reason, and the path it concerns (a parent, maybe)."""
    reason = exc.strerror or str(exc)
    return f"{reason}: {exc.filename}" if exc.filename else reason


# ------------------------------------------------------------------------------ arguments


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _backend(text: str) -> str:
    """A backend name, checked while the arguments are parsed (before anything starts)."""
    if text in BACKENDS:
        return text
    close = difflib.get_close_matches(text, BACKENDS, n=1)
    raise argparse.ArgumentTypeError(str(UnknownBackendError(text, list(BACKENDS), close[0] if close else None)))


def _difficulty(text: str) -> range:
    """``3`` or ``2-4`` (inclusive), within 1..5."""
    m = re.fullmatch(r"\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?", text)
    if m is not None:
        lo, hi = int(m[1]), int(m[2] or m[1])
        if 1 <= lo <= hi <= 5:
            return range(lo, hi + 1)
    raise argparse.ArgumentTypeError(f"expected a difficulty 1..5 or a range such as 2-4, got {text!r}")


def _flag_type(annotation: Any) -> tuple[Any, tuple[str, ...] | None]:
    """The argparse ``type`` and ``choices`` of a ``Limits`` field (``float | None`` is a float)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return str, tuple(str(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _flag_type(inner[0]) if len(inner) == 1 else (str, None)
    return (annotation if annotation in (int, float) else str), None


def _add_limit_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("limits (defaults: sandbox.Limits)")
    for name, field in Limits.model_fields.items():
        flags = [f"--{name.replace('_', '-')}", *_ALIASES.get(name, [])]
        kind, choices = _flag_type(field.annotation)
        text = field.description or name
        if "(default:" not in text:  # a description may say it itself (cpu_time_s: "timeout_s")
            text += f" (default: {field.default})"
        group.add_argument(
            *flags, dest=name, type=kind, choices=choices, default=None,
            metavar=None if choices else name.rsplit("_", 1)[-1].upper(), help=text.replace("%", "%%"),
        )  # fmt: skip


def _limits_from(ns: argparse.Namespace) -> Limits:
    values = {k: getattr(ns, k) for k in Limits.model_fields if getattr(ns, k, None) is not None}
    return Limits(**values)


def _read_text(path: str, what: str) -> str:
    """A text file (``-``: standard input), UTF-8; anything else is a one-line ``UsageError``."""
    try:
        if path == "-":
            if sys.stdin is None:
                raise UsageError(f"cannot read {what} from standard input: it is closed")
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as fh:
                raw = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path!r} is not UTF-8 text: byte {raw[exc.start]:#04x} at offset {exc.start}") from None


def _stdin_is_piped() -> bool:
    """Standard input is a pipe or a file (``echo 3 | code-env run p.py``, ``< in.txt``), not a terminal."""
    return sys.stdin is not None and not sys.stdin.isatty()


# ------------------------------------------------------------------------------- commands


def cmd_run(ns: argparse.Namespace) -> int:
    if ns.file == "-" and ns.stdin == "-":
        raise UsageError("the program and its input cannot both come from standard input: give --stdin FILE")
    code = _read_text(ns.file, "program")
    if ns.stdin is not None:
        stdin = _read_text(ns.stdin, "standard input" if ns.stdin == "-" else "stdin file")
    elif ns.file != "-" and _stdin_is_piped():
        stdin = _read_text("-", "standard input")
    else:
        stdin = ""
    try:
        limits = _limits_from(ns)
    except ValidationError as exc:
        raise UsageError(f"invalid limits: {first_error(exc)}") from None
    from sandbox import LanguageUnavailableError
    from sandbox.languages import language_for_file, resolve

    try:  # --language, else the file's extension, else Python (standard input, no extension)
        language = resolve(ns.language).name if ns.language else (
            language_for_file(ns.file).name if ns.file != "-" and os.path.splitext(ns.file)[1] else "python")
    except ValueError as exc:
        raise UsageError(str(exc) + ("" if ns.language else "; name it with --language")) from None
    try:
        RunRequest(code=code, stdin=stdin, limits=limits, trace_id=ns.trace_id)  # checks sizes before a sandbox starts
    except ValidationError as exc:
        raise UsageError(first_error(exc)) from None
    with Sandbox(backend=ns.backend, workers=1) as sb:
        try:
            res = sb.run(code, stdin=stdin, limits=limits, trace_id=ns.trace_id, language=language)
        except LanguageUnavailableError as exc:
            raise UsageError(str(exc)) from None
    print(res.model_dump_json() if ns.json else summary(res))
    return 1 if res.sandbox_error else 0


def cmd_info(ns: argparse.Namespace) -> int:
    from sandbox.languages import toolchains

    with Sandbox(backend=ns.backend, workers=1) as sb:
        info: dict[str, Any] = {"backend": sb.backend_name, "isolation": sb.isolation}
    # every language of the table: the toolchain found (its version) or what brings it, and
    # whether the sandbox runs it (sandbox.languages.RUNNABLE, where its toolchain is here)
    info["languages"] = {t.language: {"toolchain": t.version, "runs_in_sandbox": t.runs_in_sandbox,
                                      **({} if t.found else {"missing": t.missing, "install": t.install})}
                         for t in toolchains()}  # fmt: skip
    print(json.dumps(info, indent=2))
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    from .demo import new_run_dir, run_demo

    try:
        run_dir = new_run_dir(ns.log_dir)
    except OSError as exc:
        raise UsageError(f"--log-dir {ns.log_dir!r}: cannot make a run directory there: {_why(exc)}") from None
    return run_demo(n_tasks=ns.tasks, log_dir=run_dir, as_json=ns.json)


def cmd_sandbox_demo(ns: argparse.Namespace) -> int:
    from .sandbox_demo import run_demo

    return run_demo(list(dict.fromkeys(ns.backend or ["process", "nsjail"])), as_json=ns.json)


def _load_set(name: str) -> list[Task]:
    import registry

    # a task file unvalidated: `tasks list/show` look at it, `tasks validate` reports on each task
    try:
        return registry.load(name, validate=False)
    except OSError as exc:
        raise UsageError(f"cannot read task set {name!r}: {exc.strerror or exc}") from None


def cmd_tasks(ns: argparse.Namespace) -> int:
    import registry

    if ns.tasks_command == "list":
        pattern = (ns.pattern or "").lower()
        for name in [ns.set] if ns.set else registry.list():
            tasks = _load_set(name)
            shown = [t for t in tasks if pattern in t.problem_id.lower() and (ns.difficulty is None or t.difficulty in ns.difficulty)]
            print(visible(f"{name}: {len(shown)} tasks", keep_newlines=False)
                  + (f" (of {len(tasks)})" if len(shown) != len(tasks) else ""))  # fmt: skip
            for t in shown:
                capped = "" if t.hidden_tests else "  (top tier all_public: no hidden test)"
                print(f"  {visible(t.problem_id, keep_newlines=False):45} {t.kind:8} difficulty {t.difficulty}  "
                      f"{len(t.public_tests)} public, {len(t.hidden_tests)} hidden{capped}")
        return 0
    if ns.tasks_command == "show":
        # the id names its set (builtin/..., HumanEval/..., synthetic:...); a bare name is looked up among the builtin tasks
        task = registry.get(_load_set(ns.set), ns.problem_id) if ns.set else registry.resolve(ns.problem_id, _load_set("builtin"))
        data = task.model_dump(mode="json", exclude={"hidden_tests"})
        data["hidden_tests"] = f"{len(task.hidden_tests)} (not shown)"
        print(visible(json.dumps(data, indent=2, ensure_ascii=False)))  # (JSON escapes C0 itself; visible, the rest)
        return 0
    from registry.validate import validate

    tasks = _load_set(ns.set)
    with Sandbox(backend=ns.backend) as sb:
        reports = validate(tasks, sb, progress=True)
    bad = [r for r in reports if not r.ok]
    for r in reports:
        for w in r.warnings:
            print(f"WARNING {visible(r.problem_id, keep_newlines=False)}: {visible(w)}")
    for r in bad:
        print(f"REJECTED {visible(r.problem_id, keep_newlines=False)}:")
        for p in r.problems:
            print(f"  - {visible(p)}")
    counts: dict[str, int] = {}
    for r in reports:
        for lang in r.languages:
            counts[lang] = counts.get(lang, 0) + 1
    langs = ", ".join(f"{lang} {n}" for lang, n in counts.items())
    print(f"{len(reports) - len(bad)}/{len(reports)} tasks admitted (solutions run, by language: {langs})")
    return 1 if bad else 0


def cmd_tasks_pass_rate(ns: argparse.Namespace) -> int:
    """``tasks pass-rate``: measure, write the csv, table and plot, print the table."""
    import registry

    from .passrate import RECORD_NAME, AgentSpecError, make_agent, measure, write

    if ns.samples < ns.k:
        raise UsageError(f"--samples {ns.samples} is below --k {ns.k}: pass@k needs at least k samples per task")
    generated = ns.set.startswith(("synthetic:", "mix:"))
    try:
        tasks = registry.load(ns.set, **({"n": ns.n, "seed": ns.task_seed} if generated and ns.n else {}))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"task set {ns.set!r}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot read task set {ns.set!r}: {exc.strerror or exc}") from None
    tasks = tasks if generated or ns.n is None else tasks[: ns.n]
    openai = ns.agent.split(":", 1)[0] == "openai"
    record = None
    try:
        if openai and ns.replay is None:
            os.makedirs(ns.out, exist_ok=True)
            record = open(ns.record or os.path.join(ns.out, RECORD_NAME), "w", encoding="utf-8")
        elif ns.record is not None:
            raise UsageError("--record is the openai agent's (its calls); other agents are reproduced by --seed")
        agent = make_agent(ns.agent, seed=ns.seed, temperature=ns.temperature, max_tokens=ns.max_tokens,
                           llm_config=ns.llm_config, record=record, replay=ns.replay)  # fmt: skip
        try:
            with Sandbox(backend=ns.backend) as sb:
                result = measure(agent, tasks, k=ns.k, samples=ns.samples, sandbox=sb, task_set=ns.set)
        finally:
            agent.close()
        paths = write(result, ns.out)
    except AgentSpecError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--out {ns.out!r}: {_why(exc)}") from None
    finally:
        if record is not None:
            record.close()
    print(visible(paths["md"].read_text(encoding="utf-8")), end="")
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}")
    return 0


def cmd_replay(ns: argparse.Namespace) -> int:
    from .logtools import replay

    report = replay(ns.log, progress=True)
    print(report.summary())
    return 0 if report.ok else 1


def cmd_audit(ns: argparse.Namespace) -> int:
    from .logtools import audit, format_audit

    print(format_audit(audit(ns.log, top=ns.top, seed=ns.seed)))
    return 0


def cmd_trace(ns: argparse.Namespace) -> int:
    from .logtools import format_trace, trace

    lines = trace(ns.run, ns.key)
    print(format_trace(lines))
    return 0 if lines else 1


def cmd_stats(ns: argparse.Namespace) -> int:
    from .logtools import stats, write_png

    st = stats(ns.log)
    print(st.table())
    if ns.png:
        try:
            write_png(st, ns.png)
        except ImportError:
            raise UsageError("--png needs matplotlib (pip install matplotlib)") from None
        except OSError as exc:
            raise UsageError(f"cannot write {ns.png!r}: {exc.strerror or exc}") from None
        print(f"wrote {ns.png}")
    return 0


def cmd_samples(ns: argparse.Namespace) -> int:
    """Each state of a run's samples in Redis: how many, the oldest, how many past their deadline."""
    from .samples import SampleStateError, SampleStates, format_counts

    try:
        states = SampleStates(ns.redis, run=ns.run)
        counts = states.counts(scan=not ns.no_scan)
        others = [r for r in states.runs() if r != ns.run] if counts.total == 0 and not counts.unreadable else []
    except (ImportError, ValueError, SampleStateError) as exc:
        raise UsageError(str(exc)) from None
    if ns.json:
        print(counts.model_dump_json())
        return 0
    print(visible(format_counts(counts)))
    if others:
        print(visible(f"no samples in run {ns.run!r}; runs here: {', '.join(others)} (--run NAME)"))
    return 0


def cmd_serve(ns: argparse.Namespace) -> int:
    try:
        from .service import ServiceLimits, serve
    except ImportError as exc:
        raise UsageError(f"serve needs FastAPI and uvicorn (pip install 'code-env[serve]'): {exc}") from None
    token = ns.token if ns.token is not None else os.environ.get("CODE_ENV_TOKEN") or None
    limits = ServiceLimits(max_body_bytes=ns.max_body_mb << 20, max_code_bytes=ns.max_code_kb << 10, max_batch=ns.max_batch,
                           max_pending_runs=ns.max_pending, max_client_requests=ns.max_client_requests)  # fmt: skip
    serve(host=ns.host, port=ns.port, token=token, backend=ns.backend, workers=ns.workers, limits=limits,
          log_level=ns.log_level, announce=lambda text: print(text, file=sys.stderr, flush=True))  # fmt: skip
    return 0


def cmd_executor(ns: argparse.Namespace) -> int:
    """An executor of a Redis pool (``sandbox.RedisExecutor``'s other side) until SIGTERM or
    SIGINT: the requests it holds are finished and answered, then it exits 0."""
    import logging
    import signal
    import threading

    try:
        from sandbox._redis import connect, serve
    except ImportError as exc:  # (the redis package: imported by connect)
        raise UsageError(str(exc)) from None
    try:
        connect(ns.redis).close()  # the URL's form, before a sandbox starts (Redis itself may come later)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"--redis: {exc}") from None
    logging.basicConfig(level=getattr(logging, ns.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    mover = observe = None
    if ns.samples_run is not None:  # the runs' samples move on: running, then executed_with_result
        from .samples import SampleStates, StateMover, sample_of

        mover = StateMover(SampleStates(ns.redis, run=ns.samples_run))
        to = {"running": "running", "answered": "executed_with_result"}

        def observe(event: str, trace_ids: list[str]) -> None:
            mover.put([(sample_of(t), to[event], "executor") for t in trace_ids])
            if event == "answered":  # done before the answers are written: their readers move the samples on
                mover.flush()

    with Sandbox(backend=ns.backend, workers=ns.workers) as sb:
        try:
            serve(ns.redis, ns.pool, sb, name=ns.name, batch=ns.batch, lease_s=ns.lease_s,
                  max_payload_bytes=ns.max_payload_bytes, stop=stop, observe=observe,
                  announce=lambda text: print(text, file=sys.stderr, flush=True))  # fmt: skip
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        finally:
            if mover is not None:
                mover.close()
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def cmd_check_llm(ns: argparse.Namespace) -> int:
    """One short request to an LLM channel (``code_env.llm.check_llm``): one line, OK or what is wrong.
    The channel: ``--config``'s ``[llm]`` table, the flags on top; without either, ``OPENAI_BASE_URL``
    and ``OPENAI_MODEL``."""
    from .llm import LLMConfig, LLMConfigError, check_llm, load_llm_config

    flags = {"base_url": ns.base_url, "model": ns.model, "api_key": ns.api_key, "timeout_s": ns.timeout_s,
             "max_retries": ns.max_retries}  # fmt: skip
    try:
        if ns.config is not None:
            config = load_llm_config(ns.config, ns.table, **flags)
        else:
            flags["base_url"] = flags["base_url"] or os.environ.get("OPENAI_BASE_URL")
            flags["model"] = flags["model"] or os.environ.get("OPENAI_MODEL")
            missing = [f"--{f.replace('_', '-')} (or ${var})" for f, var in (("base_url", "OPENAI_BASE_URL"), ("model", "OPENAI_MODEL"))
                       if not flags[f]]  # fmt: skip
            if missing:
                raise UsageError(f"no endpoint: give {' and '.join(missing)}, or --config FILE with an [llm] table")
            config = LLMConfig.model_validate({"name": "check-llm", **{k: v for k, v in flags.items() if v is not None}})
        result = check_llm(config)
    except ValidationError as exc:
        raise UsageError(first_error(exc)) from None
    except LLMConfigError as exc:
        raise UsageError(str(exc)) from None
    print(visible(result.line if result.ok else f"FAIL: {result.line}", keep_newlines=False))
    return 0 if result.ok else 1


# --------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from .demo import LOG_ROOT

    p = _Parser(prog="code-env", description="Sandboxed code execution for RL on code.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    backends = ", ".join(BACKENDS)
    r = sub.add_parser("run", help="run one program in the sandbox and print the result")
    r.add_argument("file", metavar="FILE", help="the program ('-' reads standard input); its extension names its "
                                                 "language (.py, .js, .sh, ...: code-env info lists them)")  # fmt: skip
    r.add_argument("--language", metavar="NAME", help="the program's language, whatever its extension "
                                                      "(python, javascript, bash, or an alias: nodejs, sh, ...)")  # fmt: skip
    r.add_argument("--json", action="store_true", help="print the ExecutionResult as JSON")
    r.add_argument("--backend", type=_backend, default="auto", help=f"sandbox backend: {backends} (default: auto)")
    r.add_argument("--stdin", metavar="FILE", help="the program's standard input: a file, or '-' for this command's "
                                                   "(the default when it is not a terminal; else empty)")  # fmt: skip
    r.add_argument("--trace-id", default="cli/0", help="trace id recorded in the result (default: cli/0)")
    _add_limit_flags(r)
    r.set_defaults(func=cmd_run, prog=r.prog)
    d = sub.add_parser("demo", help="the main job: policies side by side on CodeExec-v0 (builtin tasks)")
    d.add_argument("--tasks", type=_positive_int, default=8, help="how many builtin tasks (default: 8)")
    d.add_argument("--log-dir", default=LOG_ROOT, metavar="DIR",
                   help=f"each run logs to a new DIR/<date>-<time>/, linked as DIR/latest (default: {LOG_ROOT})")  # fmt: skip
    d.add_argument("--json", action="store_true", help="print one JSON line per episode instead of the table")
    d.set_defaults(func=cmd_demo, prog=d.prog)
    d = sub.add_parser("sandbox-demo", help="run sample programs (good and hostile) through the backends")
    d.add_argument("--backend", type=_backend, action="append",
                   help="backend to show (repeatable; default: process and nsjail)")  # fmt: skip
    d.add_argument("--json", action="store_true", help="print the results as JSON lines")
    d.set_defaults(func=cmd_sandbox_demo, prog=d.prog)
    t = sub.add_parser("tasks", help="list, show and validate task sets")
    tsub = t.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    ls = tsub.add_parser("list", help="the task sets and their tasks")
    ls.add_argument("pattern", nargs="?", metavar="PATTERN", help="only ids that contain this (any case)")
    ls.add_argument("--set", help="only this task set (a name or a .jsonl path; default: every named set)")
    ls.add_argument("--difficulty", type=_difficulty, metavar="D", help="only this difficulty (3) or range (2-4)")
    show = tsub.add_parser("show", help="one task (hidden tests not shown)")
    show.add_argument("problem_id", metavar="ID", help="e.g. builtin/sum-of-evens, HumanEval/0, synthetic:arith/s0/d3/5")
    show.add_argument("--set", help="look in this task set (a name or a .jsonl path; default: the one the id names)")
    val = tsub.add_parser("validate", help="run every reference solution twice; reject tasks it fails")
    val.add_argument("set", metavar="NAME", help="task set name or .jsonl path")
    val.add_argument("--backend", type=_backend, default="auto", help=f"sandbox backend: {backends} (default: auto)")
    for leaf in (ls, show, val):
        leaf.set_defaults(func=cmd_tasks, prog=leaf.prog)
    pr = tsub.add_parser("pass-rate", help="each task's public and hidden pass@k for an agent, by difficulty (csv, table, plot)",
                         description="Measure each task's public and hidden (every test) pass@k for an agent "
                                     "(code_env.passrate): writes DIR/pass_rate.csv, DIR/pass_rate.md and DIR/pass_rate.png; "
                                     "registry.filter_by_pass_rate keeps the tasks in a band.")  # fmt: skip
    pr.add_argument("set", metavar="SET", help="task set: a name, a mix:... or a .jsonl path")
    pr.add_argument("--agent", required=True, metavar="AGENT",
                    help="policy:PATH (a GRPO run dir), openai:MODEL@BASE_URL (or openai with --llm-config) or hf:PATH")
    pr.add_argument("--k", type=_positive_int, default=1, help="the k of pass@k (default: 1)")
    pr.add_argument("--samples", type=_positive_int, default=10, metavar="N", help="samples per task, >= k (default: 10)")
    pr.add_argument("--out", default="pass-rate", metavar="DIR", help="where the csv, table and plot go (default: pass-rate)")
    rr = pr.add_mutually_exclusive_group()
    rr.add_argument("--record", metavar="FILE", help="openai: record every call here (default: DIR/llm_record.jsonl)")
    rr.add_argument("--replay", metavar="FILE", help="openai: answer every request from this record (no network)")
    pr.add_argument("--llm-config", metavar="FILE", help="openai: a TOML file with an [llm] table (code_env.llm)")
    pr.add_argument("--n", type=_positive_int, default=None, help="tasks: a generated set's or mix's size, else the first N")
    pr.add_argument("--task-seed", type=int, default=0, help="seed of a generated set or mix (default: 0)")
    pr.add_argument("--seed", type=int, default=0, help="sample j is drawn with seed + j (default: 0)")
    pr.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0: greedy (default: 1)")
    pr.add_argument("--max-tokens", type=_positive_int, default=512, help="openai, hf: tokens per reply (default: 512)")
    pr.add_argument("--backend", type=_backend, default="auto", help=f"sandbox backend: {backends} (default: auto)")
    pr.set_defaults(func=cmd_tasks_pass_rate, prog=pr.prog)
    i = sub.add_parser("info", help="show the isolation a backend achieves on this machine, and the languages' toolchains")
    i.add_argument("--backend", type=_backend, default="auto", help=f"sandbox backend: {backends} (default: auto)")
    i.set_defaults(func=cmd_info, prog=i.prog)
    rp = sub.add_parser("replay", help="re-judge every logged step (CodeAgent-v0: make every call again); report "
                                       "rewards, and a call's observation or workspace, that differ (exit 1)")  # fmt: skip
    rp.add_argument("log", metavar="LOG", help="trajectory log: a .jsonl file or a directory of them")
    rp.set_defaults(func=cmd_replay, prog=rp.prog)
    au = sub.add_parser("audit", help="a random sample of the highest-return episodes, with code and outputs "
                                      "(CodeAgent-v0: every call, its result and its workspace diff)")  # fmt: skip
    au.add_argument("log", metavar="LOG", help="trajectory log: a .jsonl file or a directory of them")
    au.add_argument("--top", type=_positive_int, default=20, metavar="N", help="episodes to show (default: 20)")
    au.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the sample (default: 0)")
    au.set_defaults(func=cmd_audit, prog=au.prog)
    st = sub.add_parser("stats", help="pass rates, reward distribution and timing of a log")
    st.add_argument("log", metavar="LOG", help="trajectory log: a .jsonl file or a directory of them")
    st.add_argument("--png", metavar="FILE", help="also draw a reward and a timing histogram to FILE")
    st.set_defaults(func=cmd_stats, prog=st.prog)
    tr = sub.add_parser("trace", help="every line about one sample in every log of a run (exit 1: none)")
    tr.add_argument("run", metavar="RUN", help="a run directory (or one .jsonl file)")
    tr.add_argument("key", metavar="KEY", help="the sample's trace id, or its key problem_id/sample/turn")
    tr.set_defaults(func=cmd_trace, prog=tr.prog)
    sm = sub.add_parser("samples", help="each state of a run's samples held in Redis: how many, the oldest, how many overdue",
                        description="The per-sample state machines of a run in Redis (code_env.samples): for each state "
                                    "how many samples, the oldest (id, seconds in the state) and how many are past their "
                                    "deadline; then the keys of the run that do not read. Exit 2: Redis unreachable.")  # fmt: skip
    sm.add_argument("--redis", required=True, metavar="URL", help="the Redis, e.g. redis://127.0.0.1:6379/0")
    sm.add_argument("--run", default="default", metavar="NAME", help="the run's name (default: default)")
    sm.add_argument("--json", action="store_true", help="print the counts as JSON")
    sm.add_argument("--no-scan", action="store_true", help="skip the scan for unreadable keys (O(n)); counts only")
    sm.set_defaults(func=cmd_samples, prog=sm.prog)
    sv = sub.add_parser("serve", help="the sandbox and the grader as an HTTP service: SandboxFusion's /run_code and /v1/...",
                        description="Serve SandboxFusion's POST /run_code (verl's sandbox_fusion reward path and tool agents "
                                    "point at http://HOST:PORT/run_code) beside code-env's own API: POST /v1/run_many, "
                                    "/v1/grade, /v1/grade_many (by task id: hidden tests stay here), GET /v1/tasks, "
                                    "/v1/languages, /healthz, /metrics (Prometheus), /openapi.json. SIGTERM or Ctrl-C: "
                                    "new requests get 503, the running ones finish.")  # fmt: skip
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1; any other needs a token)")
    sv.add_argument("--port", type=int, default=8080, help="port (default: 8080)")
    sv.add_argument("--token", default=None, help="bearer token clients must send (default: $CODE_ENV_TOKEN; none on "
                                                   "the loopback; on another address one is generated and printed once)")  # fmt: skip
    sv.add_argument("--backend", type=_backend, default="auto", help=f"sandbox backend: {backends} (default: auto)")
    sv.add_argument("--workers", type=_positive_int, default=None, help="sandbox workers (default: one per core)")
    sv.add_argument("--max-body-mb", type=_positive_int, default=32, help="largest request body, MiB (default: 32)")
    sv.add_argument("--max-code-kb", type=_positive_int, default=1024, help="largest program, KiB (default: 1024)")
    sv.add_argument("--max-batch", type=_positive_int, default=1024, help="most requests or items in one batch (default: 1024)")
    sv.add_argument("--max-pending", type=_positive_int, default=4096,
                    help="most runs admitted and not finished; past it 429 with Retry-After (default: 4096)")
    sv.add_argument("--max-client-requests", type=_positive_int, default=64,
                    help="most requests in flight from one client address; past it 429 (default: 64)")
    sv.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                    help="uvicorn's log level (default: info)")
    sv.set_defaults(func=cmd_serve, prog=sv.prog)
    ex = sub.add_parser("executor", help="run requests of a Redis pool (sandbox.RedisExecutor's executors) until SIGTERM",
                        description="Be an executor of a pool of sandbox.RedisExecutor: take requests from the pool's "
                                    "stream on Redis, run them in a local sandbox, write their answers; watch the pool's "
                                    "other executors and take over the requests of those that died or stalled. SIGTERM "
                                    "or Ctrl-C: the requests held are finished and answered, then it exits.")  # fmt: skip
    ex.add_argument("--redis", required=True, metavar="URL", help="the Redis server: redis://HOST:PORT/DB (or rediss://, unix://)")
    ex.add_argument("--pool", default="default", help="the pool's name: its keys begin code-env:POOL: (default: default)")
    ex.add_argument("--backend", type=_backend, default="auto", help=f"sandbox backend: {backends} (default: auto)")
    ex.add_argument("--workers", type=_positive_int, default=None, help="sandbox workers (default: one per core)")
    ex.add_argument("--batch", type=_positive_int, default=None,
                    help="most requests held at once, read in one go (default: twice the workers)")
    ex.add_argument("--name", default=None, help="this executor's name in the pool (default: HOST:PID:random)")
    ex.add_argument("--lease-s", type=_seconds, default=10.0,
                    help="the heartbeat's time to live: silent that long, this executor is taken for dead and its "
                         "requests go to another (default: 10)")  # fmt: skip
    ex.add_argument("--max-payload-bytes", type=_positive_int, default=32 << 20,
                    help="larger entries are refused as bad input, answered sandbox_error (default: 32 MiB)")
    ex.add_argument("--samples-run", default=None, metavar="RUN",
                    help="move the states of this run's samples (code-env samples) as their runs go: running when a "
                         "run of it starts, executed_with_result when it is answered (its trace id names the sample)")  # fmt: skip
    ex.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                    help="log level on stderr (default: info)")
    ex.set_defaults(func=cmd_executor, prog=ex.prog)
    cl = sub.add_parser("check-llm", help="send an LLM endpoint one short request; one line: OK, or what is wrong "
                                          "(exit 1: the endpoint answered wrong or not at all)")  # fmt: skip
    cl.add_argument("--base-url", default=None, metavar="URL", help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    cl.add_argument("--model", default=None, metavar="ID", help="the model id to ask")
    cl.add_argument("--api-key", default=None, metavar="'${VAR}'",
                    help="the key as the name of an environment variable, in single quotes (default: $OPENAI_API_KEY if set)")
    cl.add_argument("--config", default=None, metavar="FILE", help="a TOML file with an [llm] table (the flags override it)")
    cl.add_argument("--table", default="llm", help="the table of --config to read, dotted (default: llm; e.g. reward.judge.llm)")
    cl.add_argument("--timeout-s", type=_seconds, default=None, help="the client's timeout (default: the config's, else 60)")
    cl.add_argument("--max-retries", type=int, default=None, help="the client's retries (default: the config's, else 2)")
    cl.set_defaults(func=cmd_check_llm, prog=cl.prog)
    return p


def _fail(prog: str, message: str) -> int:
    print(f"{prog}: error: {visible(_one_line(message), keep_newlines=False)}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; every error of usage or input is one line on stderr and exit status 2."""
    prog = "code-env"
    try:
        ns = build_parser().parse_args(argv)
        prog = ns.prog
        return int(ns.func(ns))
    except UsageError as exc:
        return _fail(exc.prog or prog, str(exc))
    except (SandboxError, RegistryError, LogFileError) as exc:  # each names what is wrong and how to fix it
        return _fail(prog, str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `code-env tasks list | head`
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":
    sys.exit(main())
