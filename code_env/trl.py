"""TRL: ``TRLReward``, a ``reward_funcs`` callable for ``trl.GRPOTrainer`` (and any trainer that
calls reward functions the same way), and ``trl_dataset``, the training set it expects.

A GRPO script is then the trainer and one line each::

    from trl import GRPOConfig, GRPOTrainer
    import code_env

    trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", args=GRPOConfig(output_dir="runs/grpo"),
                          train_dataset=code_env.trl_dataset("humaneval"),
                          reward_funcs=code_env.TRLReward("humaneval"))
    trainer.train()

For a base model (a tokenizer without a chat template) the dataset is ``format="plain"``:
``trl_dataset(tasks, format=code_env.trl.prompt_format(model))`` picks the right one.
``baselines/trl_grpo.py`` is this recipe with a config file and a run directory.

How TRL (>= 1.0) calls a reward function: ``f(prompts=..., completions=..., completion_ids=...,
**columns)``, all by keyword, one entry per completion (every prompt repeated once per
generation); ``columns`` are the dataset's other columns (``problem_id`` here) and TRL's own
``trainer_state``, ``log_extra`` and ``log_metric`` (and ``environments`` with an environment
factory). A conversational dataset gives chat prompts (lists of messages) and chat completions
(``[{"role": "assistant", "content": ...}]``); a plain one gives strings, the completion being
what the model wrote after the prompt. ``None`` in the returned list becomes NaN: a sample that
every reward function scored ``None`` is left out of its group's baseline and gets no advantage
(trl 1.16; beside other reward functions, TRL sums what they gave).

``datasets`` is imported only when ``trl_dataset`` is called (extra ``trl``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from registry import Task
from registry.verify import Runner

from .adapters import JoinPrompt, load_tasks, program_of, resolve_task, reward_config, stands_alone
from .env import MAX_TEXT_CHARS, EnvConfig, task_fingerprint
from .grading import Grade, default_sandbox, grade_many
from .reward import RewardConfig
from .trajectory import TrajectoryLogger

if TYPE_CHECKING:
    import datasets

PromptFormat = Literal["chat", "plain"]


def _text(completion: Any, what: str = "completion") -> str:
    """A completion as text: a string, or chat messages (the last assistant message's content, a
    string or a list of content parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, list) and completion and all(isinstance(m, dict) for m in completion):
        replies = [m for m in completion if m.get("role") == "assistant"] or completion
        content = replies[-1].get("content", "")
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
        return "" if content is None else str(content)
    raise TypeError(f"{what}: expected str or a list of chat messages, got {type(completion).__name__}")


def grade_record(task: Task, program: str, grade: Grade, config: RewardConfig, *, trace_id: str, n: int,
                 prompt: Any = None, completion: str | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A trajectory-log record (``code_env.trajectory``) of one graded sample outside an env (a
    single-turn episode as ``CodeExec-v0`` logs it): ``code-env stats``, ``audit`` and ``replay``
    read it. ``n`` is the sample's number; ``extra`` fields (a trainer's step) are added as given."""
    env = EnvConfig(tasks="<inline>", reward=config, max_action_chars=MAX_TEXT_CHARS).model_dump(mode="json")
    return {
        "trace_id": trace_id, "episode": n, "sample": n, "turn": 0, **extra,
        "problem_id": task.problem_id, "difficulty": task.difficulty, "task_fingerprint": task_fingerprint(task),
        "prompt": prompt, "completion": program if completion is None else completion, "action": program,
        "reward": grade.reward if grade.reward is not None else 0.0,  # a sandbox failure: 0 and truncated, as the env logs it
        "terminated": grade.sandbox_error is None, "truncated": grade.sandbox_error is not None,
        "budget": None, "sandbox_error": grade.sandbox_error,
        "reward_breakdown": grade.breakdown.model_dump(exclude_none=True),
        "public_cases": [c.model_dump() for c in grade.feedback],
        "execution_time_ms": grade.run.execution_time_ms, "config": env, "task": task.model_dump(mode="json"),
    }  # fmt: skip


class TRLReward:
    """``reward_funcs`` for TRL's ``GRPOTrainer``: ``(prompts, completions, **columns) -> list[float | None]``.

    The task of each completion comes from the dataset column ``problem_id`` (name it with
    ``id_column``), looked up in ``tasks`` (a task-set name, a path, or a list of ``Task``), else
    made from the id itself (``registry.resolve``: a generated id such as
    ``synthetic:arith/s0/d3/5`` regenerates its task); an id that names no task raises
    ``registry.UnknownTaskError``. ``config``: the reward's tiers and judge, a ``RewardConfig``, a
    mapping of its fields or the path of a TOML/JSON reward file (default: the defaults).

    The program: the completion's fenced block (a fence left open by ``max_completion_length`` is
    code too), or, for a base model that continues a plain prompt, the prompt followed by the
    completion: ``join_prompt="auto"`` (the default) joins them when the completion does not stand
    alone (it does not compile, or does not define the entry point) and the joined text does;
    ``True`` always joins, ``False`` never (see ``code_env.adapters.program_of``). Chat prompts
    are joined with the task's own prompt, as verl does.

    Every completion of the call is graded in one ``grade_many`` batch (a GRPO group, or the
    whole generation batch, runs on every worker at once; identical programs are judged once),
    through the same reward path as ``grade`` and the environments. A completion the sandbox
    failed to run (twice) gets ``None``, which TRL skips: a policy is never punished for our
    infrastructure. When TRL passes ``log_extra``/``log_metric`` (``log=True``), each
    completion's tier goes to TRL's completions table (column ``code_env_tier``) and the share of
    solved (``all_tests``), non-compiling and sandbox-failed samples to its metrics
    (``code_env/solved``, ``code_env/syntax_error``, ``code_env/sandbox_error``).
    ``last_grades`` keeps the ``Grade`` of every completion of the latest call.

    ``log_dir``: write every ``log_every``-th completion (counted over all calls) as a trajectory
    record (JSONL, ``code_env.trajectory``): the prompt, the completion, the program graded
    (``action``), the reward and its breakdown, the public tests' results, TRL's step, and the
    task with a single-turn env config, so that ``code-env stats`` summarises a TRL run and
    ``code-env replay`` re-judges it like an environment's log. Trace ids are
    ``<problem_id>/<n>/0``, ``n`` counting completions over all calls.
    """

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, sandbox: Runner | str | None = None,
                 config: RewardConfig | Mapping[str, Any] | str | Path | None = None, id_column: str = "problem_id",
                 join_prompt: JoinPrompt = "auto", log: bool = True, log_dir: str | Path | None = None,
                 log_every: int = 1) -> None:  # fmt: skip
        if join_prompt not in ("auto", True, False):
            raise ValueError(f"join_prompt: expected 'auto', True or False, got {join_prompt!r}")
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
            raise ValueError(f"log_every: expected an integer >= 1, got {log_every!r}")
        self.config = reward_config(config)
        self.tasks = {t.problem_id: t for t in load_tasks(tasks)}
        self.sandbox = sandbox
        self.id_column = id_column
        self.join_prompt = join_prompt
        self.log = log
        self.last_grades: list[Grade] = []
        self.completions_seen = 0
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.log_every = log_every
        self._logger: TrajectoryLogger | None = None
        self.__name__ = "code_env_reward"  # TRL names the reward's metrics after it

    def _task(self, problem_id: Any) -> Task:
        if isinstance(problem_id, str) and problem_id in self.tasks:
            return self.tasks[problem_id]
        task = resolve_task(problem_id, list(self.tasks.values()), what=self.id_column)
        self.tasks[task.problem_id] = task
        return task

    def programs(self, prompts: Sequence[Any], completions: Sequence[Any], problem_ids: Sequence[Any]) -> list[tuple[Task, str]]:
        """The (task, program) pair each completion is graded as."""
        if not len(prompts) == len(completions) == len(problem_ids):
            raise ValueError(f"{len(completions)} completions, {len(prompts)} prompts and "
                             f"{len(problem_ids)} {self.id_column!r} values: expected one of each per completion")  # fmt: skip
        pairs = []
        for i, (prompt, completion, pid) in enumerate(zip(prompts, completions, problem_ids, strict=True)):
            task = self._task(pid)
            text = _text(completion, f"completions[{i}]")
            pairs.append((task, program_of(task, text, prompt if isinstance(prompt, str) else None, join_prompt=self.join_prompt)))
        return pairs

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **kwargs: Any) -> list[float | None]:  # fmt: skip
        ids = kwargs.get(self.id_column)
        if ids is None:
            columns = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric", "environments"))
            raise KeyError(f"the dataset has no {self.id_column!r} column (columns passed: {columns}); "
                           "code_env.trl_dataset(...) makes one")  # fmt: skip
        pairs = self.programs(prompts, completions, ids)
        first = self.completions_seen
        trace_ids = [f"{task.problem_id}/{first + i}/0" for i, (task, _) in enumerate(pairs)]
        sandbox = self.sandbox if self.sandbox is not None else default_sandbox()
        grades = grade_many(pairs, sandbox=sandbox, config=self.config, trace_ids=trace_ids)
        self.last_grades = grades
        self.completions_seen += len(pairs)
        if self.log:
            self._log(grades, kwargs.get("log_extra"), kwargs.get("log_metric"))
        if self.log_dir is not None:
            step = getattr(kwargs.get("trainer_state"), "global_step", None)
            self._write(first, trace_ids, prompts, completions, pairs, grades, step)
        return [g.reward for g in grades]

    def _write(self, first: int, trace_ids: list[str], prompts: Sequence[Any], completions: Sequence[Any],
               pairs: list[tuple[Task, str]], grades: list[Grade], step: int | None) -> None:  # fmt: skip
        assert self.log_dir is not None
        if self._logger is None:
            self._logger = TrajectoryLogger(self.log_dir, every=self.log_every)
        for i, ((task, program), grade) in enumerate(zip(pairs, grades, strict=True)):
            n = first + i
            if not self._logger.wants(n):
                continue
            self._logger.write(grade_record(task, program, grade, self.config, trace_id=trace_ids[i], n=n,
                                            prompt=prompts[i], completion=_text(completions[i]), trl_step=step))  # fmt: skip

    def close(self) -> None:
        """Close the trajectory log (a later call opens a new file)."""
        if self._logger is not None:
            self._logger.close()
            self._logger = None

    @staticmethod
    def _log(grades: list[Grade], log_extra: Callable[[str, list[Any]], None] | None,
             log_metric: Callable[[str, float], None] | None) -> None:  # fmt: skip
        tiers: list[str] = [g.breakdown.tier for g in grades]
        if callable(log_extra):
            log_extra("code_env_tier", tiers)
        if callable(log_metric) and tiers:
            for name, tier in (("solved", "all_tests"), ("syntax_error", "syntax_error"), ("sandbox_error", "sandbox_error")):
                log_metric(f"code_env/{name}", tiers.count(tier) / len(tiers))


_INSTRUCTION = "Answer with the whole program in one ```python block."


def _user_message(task: Task) -> str:
    if stands_alone(task, task.prompt):  # HumanEval: the prompt is the function's signature and docstring
        return f"Complete this Python function. {_INSTRUCTION}\n\n```python\n{task.prompt.rstrip()}\n```"
    if task.kind == "function":
        return f"{task.prompt.rstrip()}\n\n{_INSTRUCTION} It must define `{task.entry_point}`."
    return f"{task.prompt.rstrip()}\n\n{_INSTRUCTION} It reads standard input and writes standard output."


def _plain_prompt(task: Task) -> str:
    if stands_alone(task, task.prompt):
        return task.prompt  # a base model continues the function (TRLReward joins them back)
    return f"{task.prompt.rstrip()}\n\n```python\n"  # a base model writes the program in an open fence


def trl_rows(tasks: str | Path | Sequence[Task] = "builtin", *, format: PromptFormat = "chat",
             system_prompt: str | None = None, **params: Any) -> list[dict[str, Any]]:  # fmt: skip
    """The rows of ``trl_dataset`` as plain dicts (no ``datasets`` needed)."""
    if format not in ("chat", "plain"):
        raise ValueError(f"format: expected 'chat' (a conversational dataset, for chat models) or 'plain' "
                         f"(a prompt string that a base model continues), got {format!r}")  # fmt: skip
    if system_prompt is not None and format != "chat":
        raise ValueError("system_prompt: only a chat dataset has a system message (format='chat')")
    rows = []
    for task in load_tasks(tasks, **params):
        if format == "plain":
            prompt: Any = _plain_prompt(task)
        else:
            prompt = [{"role": "user", "content": _user_message(task)}]
            if system_prompt is not None:
                prompt.insert(0, {"role": "system", "content": system_prompt})
        rows.append({"prompt": prompt, "problem_id": task.problem_id})
    return rows


def prompt_format(model: Any) -> PromptFormat:
    """The dataset format a model wants: ``"chat"`` when its tokenizer has a chat template (an
    instruct/chat model), else ``"plain"`` (a base model continues the prompt; TRL would fail on a
    conversational dataset without a template). ``model``: a tokenizer or processor, or the
    model's folder or hub id (its tokenizer is loaded: ``transformers``, extra ``trl``)."""
    tokenizer = model
    if isinstance(model, (str, Path)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model))
    if not hasattr(tokenizer, "chat_template"):
        raise TypeError(f"model: expected a tokenizer, a processor or a model's folder, got {type(model).__name__}")
    return "chat" if tokenizer.chat_template else "plain"


def trl_dataset(tasks: str | Path | Sequence[Task] = "builtin", *, format: PromptFormat = "chat",
                system_prompt: str | None = None, **params: Any) -> datasets.Dataset:  # fmt: skip
    """A ``datasets.Dataset`` for TRL's trainers, one row per task: ``prompt`` and ``problem_id``
    (the column ``TRLReward`` reads).

    ``tasks``: a task-set name or path (``params`` go to ``registry.load``: ``n``, ``seed``,
    ``difficulty`` for a generated set), or a list of ``Task``. ``format="chat"`` (for chat
    models): the prompt is a conversation, an optional system message and a user message with
    the task and the answer format (one ```python block; a HumanEval prompt is shown as code to
    complete). ``format="plain"`` (for base models): a prompt string to continue — a HumanEval
    prompt as it is (the model writes the rest of the function; ``TRLReward`` joins the two), any
    other task's text followed by an opened ```python fence.
    """
    try:
        ds = importlib.import_module("datasets")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "datasets":
            raise
        raise ModuleNotFoundError("code_env.trl_dataset needs the 'datasets' package: pip install 'code-env[trl]'",
                                  name="datasets") from exc  # fmt: skip
    return ds.Dataset.from_list(trl_rows(tasks, format=format, system_prompt=system_prompt, **params))
