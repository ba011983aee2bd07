"""Measured difficulty: each task's public and hidden pass@k for one agent, by difficulty.

    code-env tasks pass-rate SET --agent AGENT [--k K] [--samples N] [--out DIR] [--record FILE | --replay FILE]

A task's ``difficulty`` field is its author's guess; what a curriculum needs is how often *this*
agent solves it. For every task of ``SET`` (any name ``registry.load`` takes: ``builtin``,
``humaneval``, ``synthetic:<family>``, ``mix:...``, a ``.jsonl`` file) the agent writes ``n``
programs (``--samples``), all of them are graded in one ``code_env.grade_many`` batch, and the
task's pass@k is the unbiased estimator of Chen et al. (2021) from ``c`` passes of ``n`` samples
(``baselines.llm_agent.pass_at_k``; ``n >= k``). Two rates per task: **public** (every public
test passed: tiers ``all_public`` and ``all_tests``) and **hidden** (every test passed, public and
hidden: ``all_tests``, or ``all_public`` for a task that has no hidden test). A sample the sandbox
failed to judge (reward None) counts in neither ``n`` nor ``c``; a task left with fewer than ``k``
judged samples has no rate (an empty cell).

Agents (``--agent``):

* ``policy:PATH`` — a GRPO baseline's GRU policy (``baselines/grpo.py``): PATH is its run directory
  (``checkpoints/grpo_final.pt`` and ``config.json``) or a checkpoint file in its ``checkpoints/``.
  Sample ``j`` of every task is drawn with a generator seeded ``seed + j`` at ``temperature``
  (default 1; 0: greedy). It writes ``f(x)`` from numeric examples: ``synthetic:arith`` and sets
  like it only (another task is refused, named).
* ``openai:MODEL@BASE_URL`` (or ``openai`` with ``llm_config``, a TOML file with an ``[llm]``
  table, ``code_env.llm``) — an OpenAI-compatible endpoint through the real ``openai`` client, one
  request per sample as ``baselines.llm_agent`` makes it (its system prompt and first message,
  ``seed + j`` for sample ``j``), recorded and replayed with that script's machinery: ``record``
  writes every call (and a header with the tasks' fingerprints), ``replay`` answers every request
  from such a file (no network) and refuses a task that changed.
* ``hf:PATH`` — a local Hugging Face causal LM folder (transformers, CPU): the prompt as the GRPO
  baseline's language-model policy builds it (``baselines.grpo.LMPolicy``), greedy at
  temperature 0, else sampled with a generator seeded ``seed + j``.

Outputs (``write``): ``DIR/pass_rate.csv`` (one row per task: problem_id, difficulty, n, the
public and hidden passes and pass@k), ``DIR/pass_rate.md`` (the table by difficulty: tasks, mean
public and hidden pass@k, how many tasks lie in the 20-40 % band) and ``DIR/pass_rate.png`` (pass@k
by difficulty). ``registry.filter_by_pass_rate(tasks, "DIR/pass_rate.csv", band=(0.2, 0.4))``
keeps the band. Everything is seeded: the same agent, set, seed and sandbox verdicts give the same
csv to the last digit.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from baselines.llm_agent import RECORD_NAME, pass_at_k
from registry import Task

from ._errors import first_error

__all__ = ["RECORD_NAME", "AgentSpecError", "PassRateResult", "TaskRate", "make_agent", "measure", "pass_at_k", "rates_of", "write"]

BAND = (0.2, 0.4)  # the seeds' band for the start model's public pass@1
CSV_NAME, MD_NAME, PNG_NAME = "pass_rate.csv", "pass_rate.md", "pass_rate.png"
CSV_COLUMNS = ("problem_id", "difficulty", "n", "k", "public_passed", "hidden_passed", "public_pass_at_k", "hidden_pass_at_k")
HF_BATCH = 8  # prompts per generate() call of an hf: agent


class AgentSpecError(ValueError):
    """An ``--agent`` that cannot be used: says which form was expected and what is wrong."""


class TaskRate(BaseModel):
    """One task's measurement: ``n`` judged samples, how many passed the public tests and every
    test, and the pass@k of each (None when ``n < k``)."""

    model_config = ConfigDict(frozen=True)

    problem_id: str
    difficulty: int
    n: int
    k: int
    public_passed: int
    hidden_passed: int
    public_pass_at_k: float | None
    hidden_pass_at_k: float | None


class PassRateResult(BaseModel):
    """Every task's rate for one agent on one set."""

    agent: str
    task_set: str
    k: int
    samples: int = Field(description="samples asked per task")
    dropped: int = Field(0, description="samples the sandbox failed to judge (in no n)")
    rows: list[TaskRate]

    def by_difficulty(self) -> list[dict[str, Any]]:
        """One entry per difficulty: tasks, the mean public and hidden pass@k over its tasks with a
        rate, and how many tasks' public pass@k lies in ``BAND``."""
        out = []
        for level in sorted({r.difficulty for r in self.rows}):
            rows = [r for r in self.rows if r.difficulty == level]
            pub = [r.public_pass_at_k for r in rows if r.public_pass_at_k is not None]
            hid = [r.hidden_pass_at_k for r in rows if r.hidden_pass_at_k is not None]
            out.append({"difficulty": level, "tasks": len(rows), "samples": sum(r.n for r in rows),
                        "public": sum(pub) / len(pub) if pub else None, "hidden": sum(hid) / len(hid) if hid else None,
                        "in_band": sum(BAND[0] <= x <= BAND[1] for x in pub)})  # fmt: skip
        return out

    def table(self) -> str:
        """The table by difficulty, as Markdown (what ``pass_rate.md`` holds)."""
        k = self.k
        lines = [f"| difficulty | tasks | samples | public pass@{k} | hidden pass@{k} | tasks with public pass@{k} "
                 f"in {BAND[0]:.0%}-{BAND[1]:.0%} |", "|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        entries = self.by_difficulty()
        for e in entries:
            lines.append(f"| {e['difficulty']} | {e['tasks']} | {e['samples']} | {_pct(e['public'])} | {_pct(e['hidden'])} "
                         f"| {e['in_band']} |")  # fmt: skip
        pub = [r.public_pass_at_k for r in self.rows if r.public_pass_at_k is not None]
        hid = [r.hidden_pass_at_k for r in self.rows if r.hidden_pass_at_k is not None]
        lines.append(f"| all | {len(self.rows)} | {sum(r.n for r in self.rows)} | {_pct(sum(pub) / len(pub) if pub else None)} "
                     f"| {_pct(sum(hid) / len(hid) if hid else None)} | {sum(e['in_band'] for e in entries)} |")  # fmt: skip
        return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


# ---------------------------------------------------------------------------------- agents


class Agent(Protocol):
    """Writes ``n`` programs for each task: ``programs[i][j]`` is sample ``j`` of ``tasks[i]``."""

    name: str

    def programs(self, tasks: Sequence[Task], n: int) -> list[list[str]]: ...

    def close(self) -> None: ...


def make_agent(spec: str, *, seed: int = 0, temperature: float = 1.0, max_tokens: int = 512,
               llm_config: str | Path | None = None, record: TextIO | None = None,
               replay: str | Path | None = None, concurrency: int = 4) -> Agent:  # fmt: skip
    """The agent an ``--agent`` spec names (see the module's docstring). ``record``: an open file
    the openai agent writes its calls to (after the header ``measure`` gives it); ``replay``: the
    path of such a record to answer from."""
    if not 0 <= temperature <= 2:
        raise AgentSpecError(f"temperature: expected 0..2, got {temperature}")
    kind, _, rest = spec.partition(":")
    if (record is not None or replay is not None) and kind != "openai":
        raise AgentSpecError(f"--record and --replay are the openai agent's (its calls); {kind}: agents are "
                             "reproduced by their seed")  # fmt: skip
    if kind == "policy":
        if not rest:
            raise AgentSpecError("policy:PATH: give the GRPO run directory (or a checkpoint .pt in its checkpoints/)")
        return PolicyAgent(Path(rest), seed=seed, temperature=temperature)
    if kind == "hf":
        if not rest:
            raise AgentSpecError("hf:PATH: give a local Hugging Face model folder (its config.json)")
        return HFAgent(Path(rest), seed=seed, temperature=temperature, max_tokens=max_tokens)
    if kind == "openai":
        return OpenAIAgent(rest, seed=seed, temperature=temperature, max_tokens=max_tokens, llm_config=llm_config,
                           record=record, replay=replay, concurrency=concurrency)  # fmt: skip
    raise AgentSpecError(f"--agent {spec!r}: expected policy:PATH (a GRPO run), openai:MODEL@BASE_URL (or openai with "
                         "--llm-config FILE) or hf:PATH (a local Hugging Face model folder)")  # fmt: skip


class PolicyAgent:
    """A GRPO baseline's GRU policy from its run directory."""

    def __init__(self, path: Path, *, seed: int, temperature: float) -> None:
        import torch

        from baselines.common import EnvSettings
        from baselines.grpo import GRPOSettings, GRUPolicy

        checkpoint = path / "checkpoints" / "grpo_final.pt" if path.is_dir() else path
        run_dir = checkpoint.parent.parent
        config_path = run_dir / "config.json"
        if not checkpoint.is_file():
            raise AgentSpecError(f"policy:{path}: no checkpoint {checkpoint} (a GRPO run directory holds "
                                 "checkpoints/grpo_final.pt)")  # fmt: skip
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            algo = GRPOSettings.model_validate(config["grpo"])
            env = EnvSettings.model_validate(config["env"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AgentSpecError(f"policy:{path}: cannot read the run's GRPO config {config_path}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None  # fmt: skip
        if algo.model is not None:
            raise AgentSpecError(f"policy:{path}: a language-model run ({algo.model}); measure it with hf:PATH")
        self.policy = GRUPolicy(algo.hidden, algo.n_examples, env.max_tokens, algo.grammar_mask, algo.pointer)
        try:
            state = torch.load(checkpoint, map_location="cpu", weights_only=True)
            self.policy.module.load_state_dict(state)
        except (OSError, RuntimeError, KeyError) as exc:
            raise AgentSpecError(f"policy:{path}: {checkpoint} is not a checkpoint of this run's GRU policy: "
                                 f"{str(exc).splitlines()[0]}") from None  # fmt: skip
        self.policy.module.eval()
        self.name, self.seed, self.temperature = f"policy:{path}", seed, temperature

    def programs(self, tasks: Sequence[Task], n: int) -> list[list[str]]:
        import torch

        for t in tasks:
            why = _not_arith(t)
            if why:
                raise AgentSpecError(f"{self.name}: the GRU policy writes f(x) from numeric examples (synthetic:arith); "
                                     f"task {t.problem_id} {why}")  # fmt: skip
        out: list[list[str]] = [[] for _ in tasks]
        for j in range(n):
            gen = torch.Generator().manual_seed(self.seed + j)
            greedy = self.temperature == 0
            samples = self.policy.sample(tasks, self.temperature or 1.0, None if greedy else gen, greedy=greedy)
            for i, p in enumerate(samples.programs):
                out[i].append(p)
        return out

    def close(self) -> None:
        pass


def _not_arith(task: Task) -> str | None:
    """Why the GRU policy cannot read ``task`` (None: it can)."""
    if task.kind != "function":
        return f"is a {task.kind} task"
    for case in task.public_tests:
        args = case.args or []
        if len(args) != 1 or not _is_number(args[0]) or not _is_number(case.expected):
            return "has a public test that is not one number in, one number out"
    return None


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class HFAgent:
    """A local Hugging Face causal LM through ``baselines.grpo.LMPolicy`` (its prompts and its
    program extraction), ``HF_BATCH`` prompts per ``generate`` call."""

    def __init__(self, path: Path, *, seed: int, temperature: float, max_tokens: int) -> None:
        from baselines.common import ConfigError
        from baselines.grpo import LMPolicy

        try:
            self.policy = LMPolicy(str(path), max_tokens)
        except ConfigError as exc:
            raise AgentSpecError(f"hf:{path}: {exc}") from None
        self.name, self.seed, self.temperature = f"hf:{path}", seed, temperature

    def programs(self, tasks: Sequence[Task], n: int) -> list[list[str]]:
        import torch

        greedy = self.temperature == 0
        out: list[list[str]] = [[] for _ in tasks]
        for j in range(n):
            gen = torch.Generator().manual_seed(self.seed + j)
            for start in range(0, len(tasks), HF_BATCH):
                chunk = tasks[start : start + HF_BATCH]
                samples = self.policy.sample(chunk, self.temperature or 1.0, None if greedy else gen, greedy=greedy)
                for i, p in enumerate(samples.programs):
                    out[start + i].append(p)
        return out

    def close(self) -> None:
        pass


class OpenAIAgent:
    """An OpenAI-compatible endpoint, one request per sample, recorded or replayed through
    ``baselines.llm_agent``'s transports."""

    def __init__(self, target: str, *, seed: int, temperature: float, max_tokens: int, llm_config: str | Path | None,
                 record: TextIO | None, replay: str | Path | None, concurrency: int) -> None:  # fmt: skip
        from baselines.common import ConfigError
        from baselines.llm_agent import (
            LiveTransport,
            LLMAgentSettings,
            ReplayTransport,
            read_record,
            resolve_endpoint,
        )

        from .llm import LLMConfigError, load_llm_config

        self.seed, self.temperature, self.max_tokens = seed, temperature, max_tokens
        self.header: dict[str, Any] | None = None
        try:
            if replay is not None:
                header, calls = read_record(Path(replay))
                self.header = header
                self.transport: Any = ReplayTransport(Path(replay), header, calls)
                self.model = self.transport.endpoint.model
                self.settings = LLMAgentSettings(temperature=temperature, max_tokens=max_tokens, seed=seed)
            else:
                if target:
                    m = re.fullmatch(r"([^@\s]+)@(https?://\S+)", target)
                    if m is None:
                        raise AgentSpecError(f"--agent openai:{target}: expected openai:MODEL@BASE_URL, e.g. "
                                             "openai:Qwen2.5-Coder-7B-Instruct@http://127.0.0.1:8000/v1")  # fmt: skip
                    if llm_config is not None:
                        raise AgentSpecError("the endpoint is given twice: openai:MODEL@BASE_URL and --llm-config; keep one")
                    llm: dict[str, Any] = {"name": "pass-rate", "model": m[1], "base_url": m[2]}
                elif llm_config is not None:
                    llm = load_llm_config(llm_config).model_dump()
                else:
                    raise AgentSpecError("--agent openai: give openai:MODEL@BASE_URL, or --llm-config FILE with an [llm] table")
                self.settings = LLMAgentSettings(llm=llm, temperature=temperature, max_tokens=max_tokens, seed=seed,
                                                  concurrency=concurrency)  # fmt: skip
                self.endpoint = resolve_endpoint(self.settings)
                self.model = self.endpoint.model
                if record is None:
                    raise AgentSpecError("the openai agent records every call: give it a record file")
                self.record = record
                self.transport = LiveTransport(self.endpoint, self.settings, record)
        except AgentSpecError:
            raise
        except ValidationError as exc:  # the settings' (a literal key, a URL that is not one)
            raise AgentSpecError(f"--agent openai: {first_error(exc)}") from None
        except (ConfigError, LLMConfigError) as exc:
            raise AgentSpecError(str(exc)) from None
        self.name = f"openai:{self.model}"
        self.concurrency = concurrency

    def header_of(self, tasks: Sequence[Task]) -> dict[str, Any]:
        """The record's first line: the format ``baselines.llm_agent`` reads, the endpoint (never
        the key) and the tasks' fingerprints."""
        from baselines.llm_agent import RECORD_FORMAT, RECORD_VERSION, fingerprints

        e = self.endpoint
        return {"type": "header", "format": RECORD_FORMAT, "version": RECORD_VERSION, "purpose": "code-env tasks pass-rate",
                "config": {"pass_rate": {"temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed}},
                "endpoint": {"base_url": e.base_url, "model": e.model, "key_source": e.key_source, "name": e.name},
                "tasks": fingerprints(tasks)}  # fmt: skip

    def start(self, tasks: Sequence[Task]) -> None:
        """Write the record's header (live), or check the record's tasks against these (replay)."""
        from baselines.llm_agent import fingerprints

        if self.header is None:
            self.record.write(json.dumps(self.header_of(tasks), ensure_ascii=False) + "\n")
            self.record.flush()
            return
        recorded = self.header.get("tasks") or {}
        for pid, fp in fingerprints(tasks).items():
            if recorded.get(pid) != fp:
                why = "is not in the recorded run" if pid not in recorded else "changed since the recording"
                raise AgentSpecError(f"--replay {self.transport.path}: task {pid} {why} (the replies were to other prompts)")

    def programs(self, tasks: Sequence[Task], n: int) -> list[list[str]]:
        from baselines.common import ConfigError
        from baselines.llm_agent import first_message

        from .adapters import extract_code
        from .env import task_prompt

        self.start(tasks)

        def one(i: int, j: int) -> str:
            task = tasks[i]
            messages = [{"role": "system", "content": self.settings.system_prompt},
                        {"role": "user", "content": first_message(task, task_prompt(task))}]  # fmt: skip
            request = {"model": self.model, "messages": messages, "temperature": self.temperature,
                       "max_tokens": self.max_tokens, "seed": self.seed + j}  # fmt: skip
            reply = self.transport.call(task.problem_id, j, 1, request, trace_id=f"{task.problem_id}/{j}/0")
            return extract_code(reply.content) if reply.status in ("ok", "truncated") else ""

        pairs = [(i, j) for i in range(len(tasks)) for j in range(n)]
        try:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                got = list(pool.map(lambda ij: one(*ij), pairs))  # in order, whatever order they finish in
        except ConfigError as exc:  # a refused key, a 404, a request the replayed record lacks
            raise AgentSpecError(str(exc)) from None
        out: list[list[str]] = [[] for _ in tasks]
        for (i, _), program in zip(pairs, got, strict=True):
            out[i].append(program)
        return out

    def close(self) -> None:
        self.transport.close()


# ------------------------------------------------------------------------------- measuring


def measure(agent: Agent, tasks: Sequence[Task], *, k: int = 1, samples: int = 1, sandbox: Any = None,
            task_set: str = "") -> PassRateResult:  # fmt: skip
    """Each task's public and hidden pass@k for ``agent`` from ``samples`` programs per task, all
    graded in one ``code_env.grade_many`` batch (``sandbox``: any runner ``grade_many`` takes)."""
    if k < 1 or samples < k:
        raise ValueError(f"expected 1 <= k <= samples (pass@k needs n >= k samples per task), got k={k}, samples={samples}")
    if not tasks:
        raise ValueError("no tasks to measure")
    from .grading import grade_many

    programs = agent.programs(tasks, samples)
    items = [(t, p) for t, ps in zip(tasks, programs, strict=True) for p in ps]
    ids = [f"{t.problem_id}/{j}/0" for t, ps in zip(tasks, programs, strict=True) for j in range(len(ps))]
    grades = grade_many(items, sandbox=sandbox, trace_ids=ids)
    rows, dropped, at = [], 0, 0
    for t, ps in zip(tasks, programs, strict=True):
        mine = grades[at : at + len(ps)]
        at += len(ps)
        judged = [g for g in mine if g.reward is not None]
        dropped += len(mine) - len(judged)
        pub = sum(g.breakdown.tier in ("all_public", "all_tests") for g in judged)
        every = sum(g.breakdown.tier == "all_tests" or (g.breakdown.tier == "all_public" and not g.breakdown.hidden_total)
                    for g in judged)  # fmt: skip
        n = len(judged)
        rows.append(TaskRate(problem_id=t.problem_id, difficulty=t.difficulty, n=n, k=k, public_passed=pub, hidden_passed=every,
                             public_pass_at_k=round(pass_at_k(n, pub, k), 6) if n >= k else None,
                             hidden_pass_at_k=round(pass_at_k(n, every, k), 6) if n >= k else None))  # fmt: skip
    return PassRateResult(agent=agent.name, task_set=task_set, k=k, samples=samples, dropped=dropped, rows=rows)


# --------------------------------------------------------------------------------- outputs


def write(result: PassRateResult, out: str | Path) -> dict[str, Path]:
    """``pass_rate.csv``, ``pass_rate.md`` and ``pass_rate.png`` into ``out`` (made if needed)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / CSV_NAME, "md": out / MD_NAME, "png": out / PNG_NAME}
    with open(paths["csv"], "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for r in result.rows:
            w.writerow(["" if v is None else f"{v:.6f}" if isinstance(v, float) else v
                        for v in (getattr(r, c) for c in CSV_COLUMNS)])  # fmt: skip
    head = (f"pass@{result.k} of {result.agent} on {result.task_set or 'the tasks'}: {len(result.rows)} tasks x "
            f"{result.samples} samples" + (f" ({result.dropped} dropped: the sandbox failed)" if result.dropped else ""))  # fmt: skip
    paths["md"].write_text(head + "\n\n" + result.table(), encoding="utf-8")
    plot(result, paths["png"])
    return paths


def plot(result: PassRateResult, path: Path) -> None:
    """Public and hidden pass@k by difficulty, as bars, with the 20-40 % band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = result.by_difficulty()
    xs = list(range(len(entries)))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    try:
        ax.axhspan(BAND[0], BAND[1], color="tab:green", alpha=0.12, label=f"{BAND[0]:.0%}-{BAND[1]:.0%} band")
        for offset, key, label in ((-0.2, "public", "public"), (0.2, "hidden", "every test")):
            ax.bar([x + offset for x in xs], [e[key] or 0.0 for e in entries], width=0.4, label=label)
        ax.set_xticks(xs, [str(e["difficulty"]) for e in entries])
        ax.set_xlabel("difficulty")
        ax.set_ylabel(f"pass@{result.k}")
        ax.set_ylim(0, 1)
        ax.set_title(f"{result.agent} on {result.task_set or 'the tasks'}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100, metadata={"Software": None})
    finally:
        plt.close(fig)


def rates_of(result: PassRateResult, which: str = "public") -> Mapping[str, float | None]:
    """``problem id -> pass@k`` of ``result``, as ``registry.filter_by_pass_rate`` takes it."""
    return {r.problem_id: r.public_pass_at_k if which == "public" else r.hidden_pass_at_k for r in result.rows}
