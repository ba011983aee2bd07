"""Copy generated result tables into README.md between their markers:

    <!-- BEGIN generated: benchmarks/results/sandbox.md -->
    ...
    <!-- END generated: benchmarks/results/sandbox.md -->
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATTERN = re.compile(r"(<!-- BEGIN generated: (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- END generated: (?P=path) -->)", re.S)


def limits_table() -> str:
    """The `Limits` fields, defaults and units, straight from the model."""
    sys.path.insert(0, str(ROOT))
    from sandbox import Limits

    rows = ["| field | default | meaning |", "|---|---|---|"]
    for name, field in Limits.model_fields.items():
        default = field.default
        shown = "`timeout_s`" if name == "cpu_time_s" else f"`{default!r}`"
        rows.append(f"| `{name}` | {shown} | {field.description} |")
    return "\n".join(rows) + "\n"


def reward_table() -> str:
    """The reward tiers and their default values, straight from `RewardConfig`."""
    sys.path.insert(0, str(ROOT))
    from code_env.reward import RewardConfig

    meaning = {
        "syntax_error": "the program does not compile, or is no Python source at all (a NUL byte, not UTF-8, over 1 MiB): "
        "refused unrun, on either task kind",
        "timeout": "a public test ran out of time (and not all passed), or the grade's time budget was spent "
        "(`grade_budget_runs`)",
        "oom": "the program ran out of memory (and not all public tests passed)",
        "no_attempt": "the program answered nothing: nothing defined, no entry point, it raised, exited or died while "
        "loading (before any test), every call returned None, or no output on a stdio task, crashed or not "
        "(0 gives back the plain ladder)",
        "partial_max": "k of n public tests pass: `partial_max * k / n`",
        "all_public": "every public test passes (hidden ones do not all pass)",
        "all_tests": "every public and hidden test passes (at least one hidden: a task without hidden tests tops out at `all_public`)",
        "budget_exhausted": "an episode budget (characters, turn time, episode clock) cut the episode short: at most this, "
        "and never above the tier of the program it stopped or of the episode's last one; out of turns, the last "
        "program keeps its own tier",
        "context_window_overflow": "the reply stopped at the model's token or context limit: `None` judges its program as "
        "it is; a number is its reward, unrun (the sample ends in the state `context_window_overflow`)",
        "process_bonus": "per verified revision in a multi-turn episode",
        "process_bonus_cap": "cap of the process bonus per episode",
        "judge": "optional LLM judge (`JudgeConfig`, weight <= 0.3): scales a positive reward by `1 - w * (1 - s)` "
        "(s = 0.5 for a reply without a score, 0 for code past its window: unjudged)",
        "grade_budget_runs": "a grade's total time budget (`registry.budget`), in one-run limits (per-test limit + 0.25 s), "
        "plus 2 % of the per-test limit per test (and 0.25 s per stdio test): once the sample's runs have spent it, its "
        "remaining runs are stopped or not started and it is a `timeout`; `None`: no budget",
    }
    rows = ["| tier | default | when |", "|---|---:|---|"]
    for name, field in RewardConfig.model_fields.items():
        rows.append(f"| `{name}` | {field.default} | {meaning.get(name, field.description or '')} |")
    rows.append("| tampered | lowest of `timeout`, `oom`, `no_attempt`, 0 | the program wrote into the verifier's result "
                "channel (forged, duplicate, malformed or late result lines, a closed channel): none of its answers count |")
    rows.append("| sandbox failure | `None` | the sandbox itself failed (after one more try): never scored (TRL skips `None`) |")
    rows.append("| judge failure (`judge_error`) | `None` | the LLM judge's endpoint timed out, refused the connection or "
                "answered 5xx/429 after its retries: never scored, dropped like a sandbox failure |")
    return "\n".join(rows) + "\n"


def task_table() -> str:
    """The shipped task sets (generated ones at their defaults), their tests, and the tasks whose
    top tier is `all_public` because they have no hidden test (`code-env tasks validate` warns)."""
    sys.path.insert(0, str(ROOT))
    import registry

    rows = ["| task set | tasks | public + hidden tests | without a hidden test (top tier `all_public`) |", "|---|---:|---:|---|"]
    for name in registry.list():
        tasks = registry.load(name)
        public, hidden = sum(len(t.public_tests) for t in tasks), sum(len(t.hidden_tests) for t in tasks)
        capped = [t.problem_id for t in tasks if not t.hidden_tests]
        rows.append(f"| `{name}` | {len(tasks)} | {public} + {hidden} | {', '.join(f'`{p}`' for p in capped) or 'none'} |")
    return "\n".join(rows) + "\n"


def languages_table() -> str:
    """The languages table (`sandbox.languages.LANGUAGES`): names, files, commands, flags, what brings each."""
    sys.path.insert(0, str(ROOT))
    from sandbox.languages import LANGUAGES, RUNNABLE

    rows = ["| language | also answers to | source | compile | run | flags | toolchain | runs in the sandbox |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for lang in LANGUAGES.values():
        aliases = ", ".join(f"`{a}`" for a in lang.aliases) or "–"
        compile_ = f"`{' '.join(lang.compile)}`" if lang.compile else "–"
        rows.append(f"| `{lang.name}` ({lang.title}) | {aliases} | `{lang.source}` | {compile_} | `{' '.join(lang.run)}` | "
                    f"{lang.flags} | {lang.install} | {'yes' if lang.name in RUNNABLE else 'not yet'} |")
    return "\n".join(rows) + "\n"


GENERATORS = {"sandbox.languages": languages_table, "sandbox.Limits": limits_table, "code_env.RewardConfig": reward_table, "registry.tasks": task_table}


def main() -> int:
    readme = ROOT / "README.md"
    text = readme.read_text()
    missing: list[str] = []

    def fill(m: re.Match[str]) -> str:
        if m.group("path") in GENERATORS:
            return m.group(1) + GENERATORS[m.group("path")]() + m.group(4)
        src = ROOT / m.group("path")
        if not src.exists():
            missing.append(m.group("path"))
            return m.group(0)
        return m.group(1) + src.read_text() + m.group(4)

    new = PATTERN.sub(fill, text)
    if missing:
        print(f"not generated yet (run scripts/bench.sh): {', '.join(missing)}", file=sys.stderr)
    if new != text:
        readme.write_text(new)
        print("README.md updated")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
