"""The main job (``code-env demo``): ``CodeExec-v0`` on builtin tasks with several policies side
by side — the reference solutions, typical failures (a syntax error, an infinite loop, a memory
bomb, a program that hard-codes the public outputs) and, multi-turn, a scripted agent that fixes
its first wrong attempt from the feedback. Prints the reward table with its breakdown, the
episodes per second, and where the trajectory log went: each run logs to a directory of its own,
``runs/demo/<date>-<time>/``, and ``runs/demo/latest`` links to the newest."""

from __future__ import annotations

import errno
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

import registry
from registry import Task

from ._visible import visible
from .grading import shared_sandbox
from .vector import CodeExecVectorEnv

DEMO_TIMEOUT_S = 0.5  # per test: the failures time out quickly
DEMO_BOMB_MEMORY_MB = 64  # the memory bomb's limit: reached in its first block, well within the time limit
LOG_ROOT = "runs/demo"  # each run logs to a directory of its own in here


def hard_coded(task: Task) -> str:
    """A program that answers the public tests from a table and knows nothing else."""
    if task.kind == "function":
        table = {json.dumps([c.args, c.kwargs]): c.expected for c in task.public_tests}
        return (f"import json\nTABLE = json.loads({json.dumps(table)!r})\n"
                f"def {task.entry_point}(*args, **kwargs):\n    return TABLE[json.dumps([list(args), kwargs])]\n")  # fmt: skip
    table = {c.stdin or "": c.expected_stdout for c in task.public_tests}
    return f"import sys, json\nTABLE = json.loads({json.dumps(table)!r})\nsys.stdout.write(TABLE.get(sys.stdin.read(), ''))\n"


def wrong_first(task: Task) -> str:
    """A plausible but wrong first attempt: it runs, and fails the tests."""
    if task.kind == "function":
        return f"def {task.entry_point}(*args, **kwargs):\n    return None\n"
    return "import sys\nprint(sys.stdin.read().strip())\n"


@dataclass(frozen=True)
class Policy:
    name: str
    expect: str
    program: Callable[[Task], str]
    max_turns: int = 1
    memory_mb: int | None = None  # the task's own limit unless set


POLICIES = [
    Policy("reference solution", "1.0", lambda t: t.reference_solution),
    Policy("syntax error", "-1.0", lambda t: "def solve(:\n    return\n"),
    Policy("infinite loop", "-0.5 (timeout)", lambda t: "while True:\n    pass\n"),
    # under a limit one block exceeds: faulting in 256 MB took ~0.6 s on a busy machine (past the
    # per-test time limit: a timeout, not OOM); 64 MB takes a quarter of that, alone ~30 ms
    Policy("memory bomb", "-0.5 (OOM)", lambda t: "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\n",
           memory_mb=DEMO_BOMB_MEMORY_MB),
    Policy("hard-codes public outputs", "<= 0.8", hard_coded),
    Policy("scripted fixer (3 turns)", "1.0 in total", wrong_first, max_turns=3),
]


def pick_tasks(n: int) -> list[Task]:
    """``n`` builtin tasks spread over the difficulties and both kinds (deterministic)."""
    tasks = sorted(registry.load("builtin"), key=lambda t: (t.difficulty, t.kind, t.problem_id))
    n = min(n, len(tasks))
    return [tasks[round(i * (len(tasks) - 1) / max(n - 1, 1))] for i in range(n)]


def run_policy(policy: Policy, tasks: list[Task], log_dir: str | Path, bar: tqdm) -> list[dict[str, Any]]:
    """One episode per task, all tasks side by side in one vector env (their programs run together)."""
    # one episode per sub-env: a finished one is left alone (next-step autoreset: the steps the
    # others still take reset it without running its program), not started again
    envs = CodeExecVectorEnv(len(tasks), executor=shared_sandbox("auto"), tasks=tasks, max_turns=policy.max_turns,
                             timeout_s=DEMO_TIMEOUT_S, memory_mb=policy.memory_mb, log_dir=str(log_dir),
                             autoreset_mode="next_step")  # fmt: skip
    try:
        for i, (env, task) in enumerate(zip(envs.envs, tasks, strict=True)):
            env.reset(seed=i, options={"problem_id": task.problem_id})
        episodes: list[dict[str, Any]] = [{"policy": policy.name, "problem_id": t.problem_id, "rewards": [], "tier": None,
                                           "explanation": ""} for t in tasks]  # fmt: skip
        programs = [policy.program(t) for t in tasks]
        done = [False] * len(tasks)
        while not all(done):
            obs, rewards, terminated, truncated, infos = envs.step(tuple(programs))
            for i in range(len(tasks)):
                if done[i]:
                    continue
                ep = episodes[i]
                ep["rewards"].append(float(rewards[i]))
                ep["tier"] = infos["reward_breakdown"]["tier"][i]
                ep["explanation"] = infos["reward_breakdown"]["explanation"][i]
                ep["trace_id"] = infos["trace_id"][i]
                if terminated[i] or truncated[i]:
                    done[i] = True
                    bar.update(1)
                elif any(c["status"] != "passed" for c in json.loads(obs["feedback"][i])):
                    programs[i] = tasks[i].reference_solution  # the scripted fix, after reading the feedback
        return episodes
    finally:
        envs.close()


def new_run_dir(root: str | Path) -> Path:
    """A new, empty directory for one run's logs: ``<root>/<date>-<time>`` (``-2``, ``-3``, ...
    when another run took that second), with ``<root>/latest`` linked to it (a relative link, so
    the tree can move). ``OSError`` when ``root`` cannot hold it (not a directory, not writable,
    ``latest`` is not a link)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(root))
    root.mkdir(parents=True, exist_ok=True)
    latest = root / "latest"
    if latest.exists() and not latest.is_symlink():
        raise FileExistsError(errno.EEXIST, "exists and is not a symbolic link (move it away)", str(latest))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in itertools.count(1):
        run = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run.mkdir()
            break
        except FileExistsError:
            continue
    link = root / f".latest-{os.getpid()}"
    link.unlink(missing_ok=True)
    os.symlink(run.name, link)
    os.replace(link, latest)  # atomic: a concurrent reader sees the old run or the new one
    return run


def run_demo(*, n_tasks: int = 8, log_dir: str | Path | None = None, as_json: bool = False) -> int:
    """The main job, logging to ``log_dir`` (default: a ``new_run_dir`` under ``runs/demo``)."""
    log_dir = new_run_dir(LOG_ROOT) if log_dir is None else Path(log_dir)
    tasks = pick_tasks(n_tasks)
    shared_sandbox("auto")  # start the workers before the clock
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    with tqdm(total=len(POLICIES) * len(tasks), desc="episodes", unit="ep", disable=None) as bar:  # on a terminal
        for policy in POLICIES:
            results += run_policy(policy, tasks, log_dir, bar)
    elapsed = time.monotonic() - started
    where = _where(log_dir)
    if as_json:
        for r in results:
            print(json.dumps(r))
        print(where.splitlines()[0], file=sys.stderr)
        return 0
    print(f"CodeExec-v0 on {len(tasks)} builtin tasks (difficulties "
          f"{min(t.difficulty for t in tasks)}-{max(t.difficulty for t in tasks)}, "
          f"{sum(t.kind == 'stdio' for t in tasks)} stdio), per-test time limit {DEMO_TIMEOUT_S:g} s, "
          f"the memory bomb under {DEMO_BOMB_MEMORY_MB} MB\n")  # fmt: skip
    header = ("policy", "expected", "mean return", "min", "max", "tiers", "for example")
    rows: list[tuple[str, ...]] = [header]
    for n, policy in enumerate(POLICIES):
        mine = [r for r in results if r["policy"] == policy.name]
        returns = [sum(r["rewards"]) for r in mine]
        tiers = Counter(r["tier"] for r in mine)
        example = mine[(3 * n + 1) % len(mine)]  # a different task on every row
        rows.append((policy.name, policy.expect, f"{sum(returns) / len(returns):+.3f}", f"{min(returns):+.2f}",
                     f"{max(returns):+.2f}", ", ".join(f"{k} {v}" for k, v in tiers.most_common()),
                     f"{example['problem_id']}: {example['explanation'][:60]}"))  # fmt: skip
    rows = [tuple(visible(c, keep_newlines=False) for c in row) for row in rows]  # a task's id, an explanation
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\n{len(results)} episodes in {elapsed:.1f} s: {len(results) / elapsed:.1f} episodes/s "
          f"(the failures spend their time limits on purpose)")  # fmt: skip
    print(visible(where))
    print()
    agent_demo()
    return 0


# A scripted coding agent on CodeAgent-v0: it looks around, writes a program with a mistake, runs
# the public tests, fixes the mistake and submits (the calls as a model would send them)
AGENT_TASK = "builtin/sum-of-evens"
AGENT_CALLS: list[dict[str, Any]] = [
    {"name": "list_files", "arguments": {}},
    {"name": "read_file", "arguments": {"path": "PROMPT.md"}},
    {"name": "write_file", "arguments": {"path": "main.py", "content":
        "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2)\n"}},
    {"name": "run", "arguments": {"command": "python test_public.py"}},
    {"name": "run_tests", "arguments": {}},
    {"name": "edit_file", "arguments": {"path": "main.py", "old": "n % 2", "new": "n % 2 == 0"}},
    {"name": "run_tests", "arguments": {}},
    {"name": "submit", "arguments": {}},
]  # fmt: skip


def agent_demo() -> float:
    """Play ``AGENT_CALLS`` on ``CodeAgent-v0`` and print each call, its result's first line and
    its reward; the episode's return."""
    from .agent import CodeAgentEnv

    env = CodeAgentEnv("builtin")
    try:
        env.reset(seed=0, options={"problem_id": AGENT_TASK})
        print(f"CodeAgent-v0, a scripted agent on {AGENT_TASK} (tool calls on a workspace of files):")
        total = 0.0
        for action in AGENT_CALLS:
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            args = ", ".join(f"{k}={v!r}" if len(repr(v)) < 40 else f"{k}=..." for k, v in action["arguments"].items())
            lines = obs["tool_result"].splitlines() or [""]
            first = ", ".join(line.split(" (")[0] for line in lines) if action["name"] == "list_files" else lines[0]
            extra = f" | {obs['stdout'].splitlines()[0]}" if action["name"] == "run" and obs["stdout"] else ""
            print(visible(f"  {action['name']}({args}) -> {first[:70]}{extra[:50]}  reward {reward:+.2f}", keep_newlines=False))
            if terminated or truncated:
                break
        print(f"  return {total:+.2f} (the tier: the process bonus was an advance on it)")
        return total
    finally:
        env.close()


def _where(log_dir: Path) -> str:
    latest = log_dir.parent / "latest"
    linked = latest.is_symlink() and latest.resolve() == log_dir.resolve()
    return (f"trajectory log: {log_dir}{f' (linked as {latest})' if linked else ''}\n"
            f"  code-env stats {log_dir}   code-env audit {log_dir}   code-env replay {log_dir}")  # fmt: skip
