"""The ``code-env`` command.

    code-env run FILE [--json] [--timeout S] [--memory-mb M] [--backend B] [--stdin FILE] [...]
    code-env demo [--tasks N] [--log-dir DIR] [--json]
    code-env sandbox-demo [--backend B ...] [--json]
    code-env info [--backend B]
    code-env replay LOG
    code-env audit LOG [--top N] [--seed S]
    code-env stats LOG [--png FILE]

Every ``Limits`` field is a flag of ``run`` (``--cpu-time-s``, ``--max-output-bytes``, ...), with
``--timeout`` as the short name of ``--timeout-s``.
Exit status: 0 when the sandbox did its job (whatever the program did), 1 when the sandbox itself
failed (``sandbox_error``), 2 for bad usage or input. ``replay``: 0 when every re-judged reward
matches the log, 1 when some differ. LOG is a trajectory log file or a directory of them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from sandbox import BACKENDS, ExecutionResult, Limits, Sandbox, SandboxError

_ALIASES = {"timeout_s": ["--timeout"]}


def _add_limit_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("limits (defaults: sandbox.Limits)")
    for name, field in Limits.model_fields.items():
        flags = [f"--{name.replace('_', '-')}", *_ALIASES.get(name, [])]
        ann = field.annotation
        kind: Any = str
        if ann in (int,):
            kind = int
        elif ann in (float, float | None):
            kind = float
        default = field.default
        group.add_argument(
            *flags, dest=name, type=kind, default=None, metavar=name.rsplit("_", 1)[-1].upper(),
            help=f"{field.description} (default: {default})",
        )  # fmt: skip


def _limits_from(ns: argparse.Namespace) -> Limits:
    values = {k: getattr(ns, k) for k in Limits.model_fields if getattr(ns, k, None) is not None}
    return Limits(**values)


def _read_text(path: str, what: str) -> str:
    try:
        raw = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    except OSError as exc:
        raise SystemExit(_usage_error(f"cannot read {what} {path!r}: {exc.strerror}")) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SystemExit(
            _usage_error(f"{what} {path!r} is not UTF-8 text: byte {raw[exc.start]:#04x} at offset {exc.start}")
        ) from None


def _usage_error(msg: str) -> int:
    print(f"code-env: error: {msg}", file=sys.stderr)
    return 2


def summary(res: ExecutionResult) -> str:
    """A readable one-screen account of a result."""
    lines = [f"trace_id: {res.trace_id}   backend: {res.backend}   verdict: {verdict(res)}"]
    lines.append(
        f"exit_code: {res.exit_code}   signal: {res.signal_name}   wall: {res.execution_time_ms:.1f} ms   "
        f"cpu: {res.cpu_time_ms:.1f} ms   peak memory: {res.peak_memory_mb} MB"
    )
    if res.reruns:
        lines.append(f"re-run: {res.rerun_reason}")
    if res.sandbox_error:
        lines.append(f"sandbox error: {res.sandbox_error}")
    for name, text, cut in (("stdout", res.stdout, res.stdout_truncated), ("stderr", res.stderr, res.stderr_truncated)):
        if text or cut:
            lines.append(f"--- {name}{' (truncated)' if cut else ''} ---")
            lines.append(text if len(text) <= 4000 else text[:4000] + "\n[... shown 4000 chars ...]")
    return "\n".join(lines)


def verdict(res: ExecutionResult) -> str:
    if res.sandbox_error:
        return "SANDBOX ERROR"
    if res.oom:
        return "OOM"
    if res.timeout_hit:
        return f"TIMEOUT ({res.timeout_kind})"
    if res.output_limit_hit:
        return "OUTPUT LIMIT"
    if res.signal is not None:
        return f"KILLED ({res.signal_name})"
    return "OK" if res.exit_code == 0 else f"EXIT {res.exit_code}"


def cmd_run(ns: argparse.Namespace) -> int:
    code = _read_text(ns.file, "program")
    stdin = _read_text(ns.stdin, "stdin file") if ns.stdin else ""
    try:
        limits = _limits_from(ns)
    except ValidationError as exc:
        return _usage_error("invalid limits: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    try:
        with Sandbox(backend=ns.backend, workers=1) as sb:
            res = sb.run(code, stdin=stdin, limits=limits, trace_id=ns.trace_id)
    except (TypeError, ValueError, SandboxError) as exc:
        return _usage_error(str(exc))
    print(res.model_dump_json() if ns.json else summary(res))
    return 1 if res.sandbox_error else 0


def cmd_info(ns: argparse.Namespace) -> int:
    try:
        with Sandbox(backend=ns.backend, workers=1) as sb:
            print(json.dumps({"backend": sb.backend_name, "isolation": sb.isolation}, indent=2))
    except SandboxError as exc:
        return _usage_error(str(exc))
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(n_tasks=ns.tasks, log_dir=ns.log_dir, as_json=ns.json)


def cmd_sandbox_demo(ns: argparse.Namespace) -> int:
    from .sandbox_demo import run_demo

    return run_demo(ns.backend or ["process", "nsjail"], as_json=ns.json)


def cmd_tasks(ns: argparse.Namespace) -> int:
    import registry
    from registry.validate import validate

    try:
        if ns.tasks_command == "list":
            for name in registry.list():
                tasks = registry.load(name)
                print(f"{name}: {len(tasks)} tasks")
                for t in tasks:
                    print(f"  {t.problem_id:45} {t.kind:8} difficulty {t.difficulty}  {len(t.public_tests)} public, {len(t.hidden_tests)} hidden")
            return 0
        tasks = registry.load(ns.set)
        if ns.tasks_command == "show":
            task = registry.get(tasks, ns.problem_id)
            shown = task.model_dump(exclude={"hidden_tests"})
            shown["hidden_tests"] = f"{len(task.hidden_tests)} (not shown)"
            print(json.dumps(shown, indent=2))
            return 0
        with Sandbox(backend=ns.backend) as sb:
            reports = validate(tasks, sb, progress=True)
    except (registry.RegistryError, SandboxError) as exc:
        return _usage_error(str(exc))
    bad = [r for r in reports if not r.ok]
    for r in bad:
        print(f"REJECTED {r.problem_id}:")
        for p in r.problems:
            print(f"  - {p}")
    print(f"{len(reports) - len(bad)}/{len(reports)} tasks admitted")
    return 1 if bad else 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def cmd_replay(ns: argparse.Namespace) -> int:
    from .logtools import replay
    from .trajectory import LogFileError

    try:
        report = replay(ns.log, progress=True)
    except LogFileError as exc:
        return _usage_error(str(exc))
    print(report.summary())
    return 0 if report.ok else 1


def cmd_audit(ns: argparse.Namespace) -> int:
    from .logtools import audit, format_audit
    from .trajectory import LogFileError

    try:
        entries = audit(ns.log, top=ns.top, seed=ns.seed)
    except LogFileError as exc:
        return _usage_error(str(exc))
    print(format_audit(entries))
    return 0


def cmd_stats(ns: argparse.Namespace) -> int:
    from .logtools import stats, write_png
    from .trajectory import LogFileError

    try:
        st = stats(ns.log)
    except LogFileError as exc:
        return _usage_error(str(exc))
    print(st.table())
    if ns.png:
        try:
            write_png(st, ns.png)
        except ImportError:
            return _usage_error("--png needs matplotlib (pip install matplotlib)")
        except OSError as exc:
            return _usage_error(f"cannot write {ns.png!r}: {exc.strerror or exc}")
        print(f"wrote {ns.png}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="code-env", description="Sandboxed code execution for RL on code.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("run", help="run one Python file in the sandbox and print the result")
    r.add_argument("file", metavar="FILE", help="the program ('-' reads standard input)")
    r.add_argument("--json", action="store_true", help="print the ExecutionResult as JSON")
    r.add_argument("--backend", default="auto", help=f"sandbox backend: {', '.join(BACKENDS)} (default: auto)")
    r.add_argument("--stdin", metavar="FILE", help="file fed to the program's standard input")
    r.add_argument("--trace-id", default="cli/0", help="trace id recorded in the result")
    _add_limit_flags(r)
    r.set_defaults(func=cmd_run)
    d = sub.add_parser("demo", help="the main job: policies side by side on CodeExec-v0 (builtin tasks)")
    d.add_argument("--tasks", type=_positive_int, default=8, help="how many builtin tasks (default: 8)")
    d.add_argument("--log-dir", default="runs/demo", help="trajectory log directory (default: runs/demo)")
    d.add_argument("--json", action="store_true", help="print one JSON line per episode instead of the table")
    d.set_defaults(func=cmd_demo)
    d = sub.add_parser("sandbox-demo", help="run sample programs (good and hostile) through the backends")
    d.add_argument("--backend", action="append", help="backend to show (repeatable; default: process and nsjail)")
    d.add_argument("--json", action="store_true", help="print the results as JSON lines")
    d.set_defaults(func=cmd_sandbox_demo)
    t = sub.add_parser("tasks", help="list, show and validate task sets")
    tsub = t.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    tsub.add_parser("list", help="the task sets and their tasks")
    show = tsub.add_parser("show", help="one task (hidden tests not shown)")
    show.add_argument("problem_id")
    show.add_argument("--set", default="builtin", help="task set name or .jsonl path (default: builtin)")
    val = tsub.add_parser("validate", help="run every reference solution twice; reject tasks it fails")
    val.add_argument("set", metavar="NAME", help="task set name or .jsonl path")
    val.add_argument("--backend", default="auto")
    t.set_defaults(func=cmd_tasks)
    i = sub.add_parser("info", help="show the isolation a backend achieves on this machine")
    i.add_argument("--backend", default="auto")
    i.set_defaults(func=cmd_info)
    rp = sub.add_parser("replay", help="re-judge every logged step; report rewards that differ (exit 1)")
    rp.add_argument("log", metavar="LOG", help="trajectory log: a .jsonl file or a directory of them")
    rp.set_defaults(func=cmd_replay)
    au = sub.add_parser("audit", help="a random sample of the highest-return episodes, with code and outputs")
    au.add_argument("log", metavar="LOG", help="trajectory log: a .jsonl file or a directory of them")
    au.add_argument("--top", type=_positive_int, default=20, metavar="N", help="episodes to show (default: 20)")
    au.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the sample (default: 0)")
    au.set_defaults(func=cmd_audit)
    st = sub.add_parser("stats", help="pass rates, reward distribution and timing of a log")
    st.add_argument("log", metavar="LOG", help="trajectory log: a .jsonl file or a directory of them")
    st.add_argument("--png", metavar="FILE", help="also draw a reward and a timing histogram to FILE")
    st.set_defaults(func=cmd_stats)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `code-env tasks list | head`
        sys.stdout = open(os.devnull, "w")
        return 0


if __name__ == "__main__":
    sys.exit(main())
