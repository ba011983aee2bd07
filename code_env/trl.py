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

Multi-turn, two ways: ``CodeExecTools``, an ``environment_factory`` (the model calls ``run_tests``
and ``submit`` as tools in TRL's own tool-calling loop; needs a chat template TRL parses tool
calls from), and ``CodeExecRollout``, a ``rollout_func`` (``CodeExec-v0`` episodes with
``max_turns > 1``: the env's feedback comes back as a user message, its tokens masked out of the
loss; ``episode_reward`` is the matching reward function).

A coding agent: ``CodeAgentTools``, an ``environment_factory`` over ``CodeAgent-v0`` (the model
lists, reads, writes and edits the files of a workspace, runs them and the public tests, and
submits ``main.py``; the reward is the episode's return); its dataset is
``trl_dataset(tasks, format="tools")``, whose prompts tell the model it works through tools.

Tool-integrated reasoning: ``CodeInterpreterTools``, an ``environment_factory`` whose one tool is
``python(code)``, a cell of a stateful sandboxed session (``code_env.interpreter``), fresh for
each episode; the reward is the user's ``reward_funcs``.

``datasets`` is imported only when ``trl_dataset`` is called (extra ``trl``); ``torch`` and
``trl`` only when ``CodeExecRollout`` generates with a trainer.
"""

from __future__ import annotations

import copy
import importlib
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from registry import Task
from registry.verify import FUNCTION_DRIVERS, Job, Runner, Verification, verify_many
from sandbox.languages import resolve as resolve_language

from .adapters import JoinPrompt, load_tasks, program_of, resolve_task, reward_config, stands_alone
from .agent import MAIN, CodeAgentEnv
from .env import CodeExecEnv, StepResult, task_prompt
from .grading import Grade, Judged, default_sandbox, grade_many, judge_many, program_language
from .interpreter import CellResult, CodeInterpreter, InterpreterLimits, interpreter_limits
from .records import grade_record
from .reward import RewardConfig
from .tracing import trace_id
from .trajectory import MAX_TOTAL_BYTES, TEXT_BYTES, TrajectoryLogger

if TYPE_CHECKING:
    import datasets

PromptFormat = Literal["chat", "plain", "tools"]
FORMATS: tuple[PromptFormat, ...] = ("chat", "plain", "tools")


def _ids(completion_ids: Any, i: int) -> list[int] | None:
    ids: Any = completion_ids[i] if completion_ids is not None else None
    return ids.tolist() if hasattr(ids, "tolist") else ids


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
    failed to run (twice), or whose LLM judge call failed (tier ``judge_error``: a timeout, a
    refused connection, HTTP 5xx/429 after the retries), gets ``None``, which TRL skips: a policy
    is never punished for our infrastructure. When TRL passes ``log_extra``/``log_metric`` (``log=True``), each
    completion's tier goes to TRL's completions table (column ``code_env_tier``) and the share of
    solved (``all_tests``), non-compiling and sandbox-failed samples to its metrics
    (``code_env/solved``, ``code_env/syntax_error``, ``code_env/sandbox_error``, ``code_env/judge_error``).
    ``last_grades`` keeps the ``Grade`` of every completion of the latest call. ``language``: the
    programs' (``sandbox.languages``; another than Python answers stdio tasks: ``trl_dataset(...,
    language=...)`` asks for them, and a compile error is the syntax-error tier).

    ``log_dir``: write every ``log_every``-th completion (counted over all calls) as a trajectory
    record (JSONL, ``code_env.records.grade_record``, bounded by ``log_max_bytes`` for the
    directory and ``log_text_bytes`` per text of a run: ``code_env.trajectory``): the prompt, the
    whole completion and its length in tokens, the program graded (``action``), the reward and
    its breakdown, the public tests' results, the raw ``ExecutionResult``s of the public and
    hidden runs, the timed states, ``trainer="trl"`` and ``step`` (TRL's ``global_step + 1`` at
    the call: the update the completion is generated for), and the task with a single-turn env
    config, so that ``code-env stats``/``audit`` read a TRL run and ``code-env replay``
    re-judges it like an environment's log. ``attach(trainer)`` adds what only the trainer
    knows: TRL's advantage of each completion, the prompt through the chat template, whether
    the completion was cut at ``max_completion_length``. Trace ids are ``<problem_id>/<n>/0``,
    ``n`` counting completions over all calls.
    """

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, sandbox: Runner | str | None = None,
                 config: RewardConfig | Mapping[str, Any] | str | Path | None = None, id_column: str = "problem_id",
                 join_prompt: JoinPrompt = "auto", log: bool = True, log_dir: str | Path | None = None,
                 log_every: int = 1, log_max_bytes: int = MAX_TOTAL_BYTES, log_text_bytes: int = TEXT_BYTES,
                 language: str = "python") -> None:  # fmt: skip
        if join_prompt not in ("auto", True, False):
            raise ValueError(f"join_prompt: expected 'auto', True or False, got {join_prompt!r}")
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 1:
            raise ValueError(f"log_every: expected an integer >= 1, got {log_every!r}")
        self.config = reward_config(config)
        self.tasks = {t.problem_id: t for t in load_tasks(tasks)}
        self.language = program_language(language)  # (a function task in another language: refused when graded)
        self.sandbox = sandbox
        self.id_column = id_column
        self.join_prompt = join_prompt
        self.log = log
        self.last_grades: list[Grade] = []
        self.completions_seen = 0
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.log_every = log_every
        self.log_max_bytes, self.log_text_bytes = log_max_bytes, log_text_bytes
        self._logger: TrajectoryLogger | None = None
        self._trainer: Any = None  # attach(trainer)
        self._pending: list[dict[str, Any]] = []  # records waiting for their step's advantages
        self._generating: float | None = None
        self._generated: float | None = None
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
            pairs.append((task, program_of(task, text, prompt if isinstance(prompt, str) else None, join_prompt=self.join_prompt,
                                           language=self.language)))  # fmt: skip
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
        trace_ids = [trace_id(task.problem_id, first + i) for i, (task, _) in enumerate(pairs)]
        sandbox = self.sandbox if self.sandbox is not None else default_sandbox()
        self._generated = time.time()
        cuts = self._cuts(completion_ids, len(pairs))
        judged = judge_many(pairs, sandbox=sandbox, config=self.config, trace_ids=trace_ids,
                            overflowed=[bool(c) for c in cuts], language=self.language)  # fmt: skip
        grades = [j.grade for j in judged]
        self.last_grades = grades
        self.completions_seen += len(pairs)
        if self.log:
            self._log(grades, kwargs.get("log_extra"), kwargs.get("log_metric"))
        if self.log_dir is not None:
            step = getattr(kwargs.get("trainer_state"), "global_step", None)
            records = self._records(first, trace_ids, prompts, completions, completion_ids, cuts, pairs, judged)
            if self._trainer is None:  # no trainer attached: no advantages to wait for
                for rec in records:
                    rec["step"] = None if step is None else step + 1
                self._write(records)
            else:
                self._pending.extend(records)
        return [g.reward for g in grades]

    def _cuts(self, completion_ids: Any, n: int) -> list[bool | None]:
        """Per completion: whether it stopped at ``max_completion_length`` (no end-of-sequence or
        pad token last, TRL's own rule), None when that is unknown (no trainer attached, no ids)."""
        tokenizer = getattr(self._trainer, "processing_class", None)
        stop = set(getattr(self._trainer, "eos_token_ids", None) or []) | {getattr(tokenizer, "pad_token_id", None)}
        out: list[bool | None] = []
        for i in range(n):
            ids = _ids(completion_ids, i)
            out.append(None if ids is None or self._trainer is None else (not ids or ids[-1] not in stop))
        return out

    def _records(self, first: int, trace_ids: list[str], prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Any, cuts: list[bool | None], pairs: list[tuple[Task, str]],
                 judged: list[Judged]) -> list[dict[str, Any]]:  # fmt: skip
        """The trajectory records of one call (every completion's, whether logged or not: the
        advantages of the batch are matched by position)."""
        tokenizer = getattr(self._trainer, "processing_class", None)
        out = []
        for i, ((task, program), j) in enumerate(zip(pairs, judged, strict=True)):
            ids = _ids(completion_ids, i)
            out.append(grade_record(task, program, j, self.config, trace_id=trace_ids[i], n=first + i,
                                    prompt=self._expanded(prompts[i], tokenizer), completion=_text(completions[i]),
                                    completion_truncated=cuts[i], completion_tokens=None if ids is None else len(ids),
                                    trainer="trl", generating=self._generating, generated=self._generated))  # fmt: skip
        return out

    def _expanded(self, prompt: Any, tokenizer: Any) -> Any:
        """The prompt as the model read it: a chat prompt through the tokenizer's chat template
        (as TRL applies it), when a trainer is attached; else as the dataset gave it."""
        if isinstance(prompt, str) or tokenizer is None or not getattr(tokenizer, "chat_template", None):
            return prompt
        kwargs = getattr(getattr(self._trainer, "args", None), "chat_template_kwargs", None) or {}
        return str(tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **kwargs))

    def _write(self, records: list[dict[str, Any]]) -> None:
        assert self.log_dir is not None
        if self._logger is None:
            self._logger = TrajectoryLogger(self.log_dir, every=self.log_every, max_total_bytes=self.log_max_bytes,
                                            text_bytes=self.log_text_bytes)  # fmt: skip
        for rec in records:
            if self._logger.wants(rec["sample"]):
                self._logger.write(rec)

    def attach(self, trainer: Any) -> TRLReward:
        """Follow ``trainer`` (a ``trl.GRPOTrainer`` that has this reward among its
        ``reward_funcs``) so that the trajectory records carry what only the trainer knows: each
        completion's advantage (TRL's own, read from the trainer's completion log
        ``_logs["advantages"]`` when the optimisation step ends), the step (``step``: the
        trainer's ``global_step`` after the first update that used the completion, the step of
        its row in the run's curve), the prompt through the chat template, whether the
        completion was cut at ``max_completion_length`` (no EOS or pad token at its end, TRL's own
        test) and when generation began. Records are then written when the step ends. Returns self.

        Train-mode generations only: with an eval dataset the eval completions, which have no
        update, would be matched to the next step's advantages: don't attach then."""
        from transformers import TrainerCallback

        logs = getattr(trainer, "_logs", None)
        if not isinstance(logs, dict) or "advantages" not in logs:
            raise TypeError(f"attach: expected a trl.GRPOTrainer with its completion log _logs['advantages'] "
                            f"(trl 1.x), got {type(trainer).__name__}")  # fmt: skip
        reward = self

        class _Follow(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                reward._generating = time.time()

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                reward._flush(state.global_step)

            def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                reward._flush(None)

        self._trainer = trainer
        trainer.add_callback(_Follow())
        return self

    def _flush(self, step: int | None) -> None:
        """Write the pending records with their advantages (``step`` None: the run ended, no update used them)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if step is not None:
            n = len(pending)
            world = int(getattr(getattr(self._trainer, "accelerator", None), "num_processes", 1))
            rank = int(getattr(getattr(self._trainer, "accelerator", None), "process_index", 0))
            every = list(self._trainer._logs["advantages"])[-n * world :]  # the generation batch, every process's
            if len(every) != n * world:
                raise RuntimeError(f"TRL's completion log holds {len(every)} advantages for {n} completions on "
                                   f"{world} processes: the records cannot be matched to them")  # fmt: skip
            for rec, adv in zip(pending, every[rank * n : (rank + 1) * n], strict=True):
                rec["advantage"], rec["step"] = float(adv), step
        self._write(pending)

    def close(self) -> None:
        """Write what is pending and close the trajectory log (a later call opens a new file)."""
        if self._pending:
            self._flush(None)
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
            for name, tier in (("solved", "all_tests"), ("syntax_error", "syntax_error"), ("sandbox_error", "sandbox_error"),
                               ("judge_error", "judge_error")):  # fmt: skip
                log_metric(f"code_env/{name}", tiers.count(tier) / len(tiers))


_INSTRUCTION = "Answer with the whole program in one ```python block."


def _user_message(task: Task, language: str = "python") -> str:
    if language != "python" and task.kind == "function":
        lang = resolve_language(language)
        return (f"{task.prompt.rstrip()}\n\nAnswer in one ```{lang.name} block: a {lang.title} function "
                f"`{task.entry_point}`, defined at the top level, called with JSON data and returning a JSON value.")
    if language != "python":
        lang = resolve_language(language)
        main = " Its class must be `public class Main`." if lang.name == "java" else ""
        return (f"{task.prompt.rstrip()}\n\nWrite a complete {lang.title} program in one ```{lang.name} block: it reads "
                f"standard input and writes standard output.{main}")  # fmt: skip
    if stands_alone(task, task.prompt):  # HumanEval: the prompt is the function's signature and docstring
        return f"Complete this Python function. {_INSTRUCTION}\n\n```python\n{task.prompt.rstrip()}\n```"
    if task.kind == "function":
        return f"{task.prompt.rstrip()}\n\n{_INSTRUCTION} It must define `{task.entry_point}`."
    return f"{task.prompt.rstrip()}\n\n{_INSTRUCTION} It reads standard input and writes standard output."


_TOOLS_INSTRUCTION = (f"You work through tool calls in a workspace of files; the file that is graded is {MAIN}. Write "
                      f"your solution in {MAIN}, run the public tests with run_tests() whenever you like, and call "
                      f"submit() when you are done: {MAIN} is then graded on the public and the hidden tests.")


def _tools_message(task: Task) -> str:
    """The user message of ``format="tools"``: the task for an agent that works through tools
    (``CodeAgentTools``, ``CodeAgent-v0``): the workspace, ``main.py`` the graded file, the public
    tests when it likes, ``submit`` when done; no answer block asked for."""
    if stands_alone(task, task.prompt):  # HumanEval: the prompt is main.py's code, the function to complete
        return (f"Complete the Python function in {MAIN}, which holds this code:\n\n```\n{task.prompt.rstrip()}\n```\n\n"
                f"{_TOOLS_INSTRUCTION}")  # fmt: skip
    if task.kind == "function":
        return f"{task.prompt.rstrip()}\n\n{_TOOLS_INSTRUCTION} {MAIN} must define `{task.entry_point}`."
    return (f"{task.prompt.rstrip()}\n\n{_TOOLS_INSTRUCTION} {MAIN} must be a whole program: it reads standard input "
            "and writes standard output.")  # fmt: skip


def _plain_prompt(task: Task, language: str = "python") -> str:
    if language != "python":
        return f"{task.prompt.rstrip()}\n\n```{resolve_language(language).name}\n"
    if stands_alone(task, task.prompt):
        return task.prompt  # a base model continues the function (TRLReward joins them back)
    return f"{task.prompt.rstrip()}\n\n```python\n"  # a base model writes the program in an open fence


def trl_rows(tasks: str | Path | Sequence[Task] = "builtin", *, format: PromptFormat = "chat",
             system_prompt: str | None = None, language: str = "python", **params: Any) -> list[dict[str, Any]]:  # fmt: skip
    """The rows of ``trl_dataset`` as plain dicts (no ``datasets`` needed)."""
    language = program_language(language)
    if format not in FORMATS:
        raise ValueError(f"format: expected 'chat' (a conversational dataset, for chat models), 'tools' (a conversation "
                         f"for an agent that works through tool calls: CodeAgentTools) or 'plain' (a prompt string "
                         f"that a base model continues), got {format!r}")  # fmt: skip
    if system_prompt is not None and format == "plain":
        raise ValueError("system_prompt: only a chat dataset has a system message (format='chat' or 'tools')")
    if format == "tools" and language != "python":
        raise ValueError(f"language {language!r}: format='tools' is for CodeAgent-v0, whose graded {MAIN} is Python")
    rows = []
    for task in load_tasks(tasks, **params):
        if language not in FUNCTION_DRIVERS and task.kind != "stdio":
            continue  # (a function task's tests call the function through a driver)
        if format == "plain":
            prompt: Any = _plain_prompt(task, language)
        else:
            text = _tools_message(task) if format == "tools" else _user_message(task, language)
            prompt = [{"role": "user", "content": text}]
            if system_prompt is not None:
                prompt.insert(0, {"role": "system", "content": system_prompt})
        rows.append({"prompt": prompt, "problem_id": task.problem_id})
    if not rows and language != "python":
        raise ValueError(f"no stdio task in {tasks if isinstance(tasks, (str, Path)) else 'the tasks'}: a {language} "
                         "program answers stdio tasks only (function tasks are graded in Python)")  # fmt: skip
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
                system_prompt: str | None = None, language: str = "python", **params: Any) -> datasets.Dataset:  # fmt: skip
    """A ``datasets.Dataset`` for TRL's trainers, one row per task: ``prompt`` and ``problem_id``
    (the column ``TRLReward`` reads).

    ``tasks``: a task-set name or path (``params`` go to ``registry.load``: ``n``, ``seed``,
    ``difficulty`` for a generated set), or a list of ``Task``. ``format="chat"`` (for chat
    models): the prompt is a conversation, an optional system message and a user message with
    the task and the answer format (one ```python block; a HumanEval prompt is shown as code to
    complete). ``format="tools"`` (for a chat model that works through tools: ``CodeAgentTools``,
    ``CodeAgent-v0``): the same conversation, but the user message tells it that it works in a
    workspace through tool calls, that the graded file is ``main.py``, that it runs the public
    tests (``run_tests``) when it likes and calls ``submit`` when done; it asks for no ```python
    block (a HumanEval prompt is shown as the code ``main.py`` holds, the function to complete;
    Python only). ``format="plain"`` (for base models): a prompt string to continue — a HumanEval
    prompt as it is (the model writes the rest of the function; ``TRLReward`` joins the two), any
    other task's text followed by an opened ```python fence. Another format is a ``ValueError``
    that lists these. ``language``: the programs' (another than Python keeps the stdio tasks, and
    the prompts ask for a program in that language, in its fence; ``TRLReward(language=...)``
    grades them).
    """
    try:
        ds = importlib.import_module("datasets")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "datasets":
            raise
        raise ModuleNotFoundError("code_env.trl_dataset needs the 'datasets' package: pip install 'code-env[trl]'",
                                  name="datasets") from exc  # fmt: skip
    return ds.Dataset.from_list(trl_rows(tasks, format=format, system_prompt=system_prompt, language=language, **params))


class CodeExecTools:
    """A TRL ``environment_factory`` for ``GRPOTrainer``: the model calls tools while it writes
    (TRL exposes every public method but ``reset`` and ``get_reward`` as a tool), and the episode's
    reward is ``grade``'s for the program it submitted::

        trainer = GRPOTrainer(model=..., train_dataset=code_env.trl_dataset("builtin"),
                              environment_factory=CodeExecTools)           # or functools.partial(CodeExecTools, "humaneval")

    TRL makes one instance per rollout and calls ``reset(**row)`` with the dataset's row (its
    ``problem_id`` names the task, ``id_column`` to rename it); the tools are ``run_tests(code)``
    (the public tests, with the per-test feedback ``CodeExec-v0`` gives: no hidden test, no
    expected value beyond the public ones) and ``submit(code)`` (public and hidden, the reward
    ladder; the last submission counts). ``get_reward()``: the submitted program's grade; with no
    submission, the grade of the last program given to ``run_tests``, else of an empty program
    (the "no attempt" tier). ``max_test_runs`` bounds ``run_tests`` calls per episode. A sample
    the sandbox failed on gets ``None`` (TRL leaves it out), as ``TRLReward`` gives. ``calls``:
    the episode's tool calls, for whoever inspects a rollout (TRL keeps the instances of the last
    batch in ``trainer.environments``, in the order of its completions)."""

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, sandbox: Runner | str | None = None,
                 config: RewardConfig | Mapping[str, Any] | str | Path | None = None, id_column: str = "problem_id",
                 language: str = "python", max_test_runs: int = 8) -> None:  # fmt: skip
        if isinstance(max_test_runs, bool) or not isinstance(max_test_runs, int) or max_test_runs < 0:
            raise ValueError(f"max_test_runs: expected an integer >= 0, got {max_test_runs!r}")
        self._config = reward_config(config)
        self._tasks = {t.problem_id: t for t in load_tasks(tasks)}
        self._language = program_language(language)
        self._sandbox = sandbox
        self._id_column = id_column
        self._max_test_runs = max_test_runs
        self._task: Task | None = None
        self._submitted: str | None = None
        self._tested: str | None = None
        self._test_runs = 0
        self.calls: list[tuple[str, str]] = []
        """The episode's tool calls so far, ``(tool, code)`` each, in order (a call refused for
        the spent ``max_test_runs`` budget too); emptied by ``reset``."""

    def reset(self, **row: Any) -> str | None:
        """A new episode, for the dataset row TRL gives (its ``problem_id`` names the task)."""
        if self._id_column not in row:
            raise KeyError(f"CodeExecTools.reset: the dataset row has no {self._id_column!r} column (id_column=); "
                           f"it has {sorted(row)}")  # fmt: skip
        problem_id = row[self._id_column]
        task = self._tasks.get(problem_id) if isinstance(problem_id, str) else None
        self._task = task or resolve_task(problem_id, list(self._tasks.values()), what=self._id_column)
        self._submitted = self._tested = None
        self._test_runs = 0
        self.calls = []
        return ("Tools: run_tests(code) runs a complete program against the public tests and shows each result; "
                "submit(code) hands in the final program, graded on public and hidden tests.")  # fmt: skip

    def run_tests(self, code: str) -> str:
        """Run a complete program against the task's public tests.

        Args:
            code: The whole program, as it would be submitted.

        Returns:
            One line per public test (passed or failed, the input, the expected and the actual output, the error), and what the program printed.
        """
        task = self._current()
        self.calls.append(("run_tests", code))
        if self._test_runs >= self._max_test_runs:
            return f"run_tests: the budget of {self._max_test_runs} test runs for this task is spent; submit(code) to finish"
        self._test_runs += 1
        self._tested = code
        g = grade_many([(task, code)], sandbox=self._sandbox, config=self._config, hidden=False, language=self._language)[0]
        if g.sandbox_error is not None:
            return "run_tests: the sandbox failed (not your program's fault); try again"
        lines = [f"{g.breakdown.public_passed}/{g.breakdown.public_total} public tests passed ({g.breakdown.tier})"]
        for c in g.feedback:
            line = f"- test {c.index}: {c.status}; input {c.input}; expected {c.expected}; got {c.got}"
            lines.append(line + (f"; {c.error}" if c.error else ""))
        if g.run.stdout or g.run.stderr:
            lines.append(f"stdout: {g.run.stdout[-2000:]}\nstderr: {g.run.stderr[-2000:]}")
        return "\n".join(lines)

    def submit(self, code: str) -> str:
        """Hand in the final program: it is graded on the public and the hidden tests, and the episode's reward is its grade.

        Args:
            code: The whole program.

        Returns:
            That the program was received (the grade comes as the reward).
        """
        self._current()
        self.calls.append(("submit", code))
        self._submitted = code
        return "submitted"

    def get_reward(self) -> float | None:
        """The episode's reward: ``grade``'s for the submitted program (see the class)."""
        task = self._current()
        program = self._submitted if self._submitted is not None else self._tested if self._tested is not None else ""
        g = grade_many([(task, program)], sandbox=self._sandbox, config=self._config, language=self._language)[0]
        return g.reward

    def _current(self) -> Task:
        if self._task is None:
            raise RuntimeError("CodeExecTools: a tool was called before reset()")
        return self._task


class CodeAgentTools:
    """A TRL ``environment_factory`` for ``GRPOTrainer`` over ``CodeAgent-v0``: the model works in
    a workspace through the env's tools, and the episode's return is the reward::

        trainer = GRPOTrainer(model=..., train_dataset=code_env.trl_dataset("builtin", format="tools"),
                              environment_factory=CodeAgentTools)   # or partial(CodeAgentTools, "humaneval", max_calls=20)

    Each instance holds one ``CodeAgentEnv`` (TRL makes one instance per rollout and keeps it for
    later batches); ``reset(**row)`` starts an episode on the row's task (its ``problem_id``,
    ``id_column`` to rename it; an id of no task given, such as a generated one, is made from
    the id) and returns the text TRL appends to the prompt. The tools are the env's, as methods
    TRL exposes (every public method but ``reset`` and ``get_reward``): ``list_files``,
    ``read_file``, ``write_file``, ``edit_file``, ``run``, ``run_tests`` and ``submit``; each steps
    the env with its call and returns the observation's ``tool_result`` (a call the env refuses is
    its error message, the episode going on). After ``submit``, or once a budget of the env ended
    the episode, every tool answers that the episode is over.

    ``get_reward()``: the episode's return, the sum of the env's rewards (the process bonus of
    ``run_tests`` is an advance on the final tier: a submitted episode returns its tier). A rollout
    that ends without ``submit`` (the model stopped calling tools, or TRL's
    ``max_tool_calling_iterations``) is ended as the env ends it when its calls run out: ``main.py``
    graded as submitted (one last ``submit`` step; past ``episode_time_s``, the env's budget rule
    instead). ``None`` when the sandbox failed (TRL leaves the sample out).

    ``sandbox``: the env's executor (default: the process-wide sandbox), ``config``: the reward (as
    for ``TRLReward``), ``env_kwargs``: any other ``CodeAgent-v0`` argument (``max_calls``,
    ``call_time_s``, ``episode_time_s``, ``max_call_chars``, the workspace's limits). ``env``: the
    episode's env (``env.workspace``: its files; ``env.close()`` when done with the instance);
    ``calls``: the episode's tool calls, ``(tool, arguments)`` each; ``rewards``: the env's reward
    of each step; ``ended``: how the episode ended (``"submit"``, a budget's label, ``"rollout"``:
    graded when TRL asked for the reward, ``"sandbox_error"``), None while it goes on."""

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, sandbox: Runner | str | None = None,
                 config: RewardConfig | Mapping[str, Any] | str | Path | None = None, id_column: str = "problem_id",
                 **env_kwargs: Any) -> None:  # fmt: skip
        for key, ours in (("executor", "sandbox"), ("reward", "config")):
            if key in env_kwargs:
                raise TypeError(f"CodeAgentTools: the env's {key!r} is CodeAgentTools' {ours!r} argument")
        self.env = CodeAgentEnv(tasks, executor=sandbox, reward=config, **env_kwargs)
        self._id_column = id_column
        self._started = False
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.rewards: list[float] = []
        self.ended: str | None = None
        self._failed = False

    def reset(self, **row: Any) -> str | None:
        """A new episode on the task of the dataset row TRL gives (its ``problem_id``)."""
        if self._id_column not in row:
            raise KeyError(f"CodeAgentTools.reset: the dataset row has no {self._id_column!r} column (id_column=); "
                           f"it has {sorted(row)}")  # fmt: skip
        problem_id = row[self._id_column]
        if not (isinstance(problem_id, str) and problem_id in self.env.by_id):
            task = resolve_task(problem_id, self.env.tasks, what=self._id_column)
            self.env.by_id[task.problem_id] = task  # (a generated task: the env episodes it by its id)
            problem_id = task.problem_id
        obs, _ = self.env.reset(options={"problem_id": problem_id})
        self._started, self._failed = True, False
        self.calls, self.rewards, self.ended = [], [], None
        return (f"\n\nYou work through tools in a workspace of your own; the program that is graded is {MAIN}. "
                f"{obs['tool_result']}")  # fmt: skip

    def list_files(self) -> str:
        """List the files of the workspace with their sizes.

        Returns:
            One line per file: its path and its size in bytes.
        """
        return self._call("list_files", {})

    def read_file(self, path: str) -> str:
        """Read a file of the workspace (UTF-8 text).

        Args:
            path: The file's path, relative to the workspace (such as main.py).

        Returns:
            The file's text.
        """
        return self._call("read_file", {"path": path})

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file of the workspace.

        Args:
            path: The file's path, relative to the workspace (such as main.py).
            content: The whole text of the file.

        Returns:
            That the file was written, and its size.
        """
        return self._call("write_file", {"path": path, "content": content})

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of a text in a file of the workspace by another.

        Args:
            path: The file's path, relative to the workspace.
            old: The text to replace; it must occur exactly once in the file.
            new: The text that replaces it.

        Returns:
            That the file was edited, or why it was not.
        """
        return self._call("edit_file", {"path": path, "old": old, "new": new})

    def run(self, path: str | None = None, command: str | None = None, stdin: str = "") -> str:
        """Run a file of the workspace in the sandbox; the files it writes stay in the workspace.

        Args:
            path: The file to run, in the language of its extension (.py as `python FILE`, .js, .sh, .c, .cpp, .rs, .go, .java, .ts).
            command: Instead of path: a runtime and a file of the workspace, such as `python test_public.py`.
            stdin: The program's standard input.

        Returns:
            The exit code (or the compile error), and what the program printed on stdout and stderr.
        """
        args: dict[str, Any] = {"stdin": stdin}
        if path is not None:
            args["path"] = path
        if command is not None:
            args["command"] = command
        return self._call("run", args)

    def run_tests(self) -> str:
        """Run main.py against the task's public tests.

        Returns:
            How many public tests passed, and one line per test: its input, the expected and the actual output, the error.
        """
        return self._call("run_tests", {})

    def submit(self) -> str:
        """Hand in main.py: it is graded on the public and the hidden tests, and the episode ends.

        Returns:
            The grade: its tier and reward.
        """
        return self._call("submit", {})

    def get_reward(self) -> float | None:
        """The episode's return (see the class); a rollout still going on is graded first."""
        self._env()
        if self.ended is None:
            self._step("submit", {})
            if self.ended == "submit":
                self.ended = "rollout"
        return None if self._failed else round(sum(self.rewards), 6)

    def _call(self, name: str, args: dict[str, Any]) -> str:
        self._env()
        if self.ended is not None:
            return f"{name}: the episode is over ({self._ending()}); no tool can change it any more"
        self.calls.append((name, dict(args)))
        return self._step(name, args)

    def _step(self, name: str, args: dict[str, Any]) -> str:
        obs, reward, terminated, truncated, info = self.env.step({"name": name, "arguments": args})
        self.rewards.append(float(reward))
        if terminated or truncated:
            self._failed = truncated and info.get("budget") is None  # (the env's end for a failed sandbox or judge)
            self.ended = "sandbox_error" if self._failed else info.get("budget") or name
        return str(obs["tool_result"])

    def _ending(self) -> str:
        return {"submit": f"{MAIN} was submitted", "sandbox_error": "the sandbox failed",
                "rollout": f"{MAIN} was graded"}.get(self.ended or "", f"its {self.ended} budget is spent")  # fmt: skip

    def _env(self) -> CodeAgentEnv:
        if not self._started:
            raise RuntimeError("CodeAgentTools: a tool was called before reset()")
        return self.env


class CodeInterpreterTools:
    """A TRL ``environment_factory`` for tool-integrated reasoning: the model calls ``python(code)``
    while it reasons, and each call is a cell of a stateful, sandboxed Python session
    (``code_env.interpreter.CodeInterpreter``: variables, functions and imports stay defined
    between the calls of one episode)::

        trainer = GRPOTrainer(model=..., train_dataset=math_problems, reward_funcs=[my_answer_reward],
                              environment_factory=CodeInterpreterTools)    # or partial(CodeInterpreterTools, limits={...})

    The dataset and the reward are the user's: any chat dataset, and ``reward_funcs`` (this class
    has no ``get_reward``, which TRL does not require: a reward function may still read an
    instance, ``environments[i]``, TRL passing them). TRL makes one instance per rollout and keeps
    it for later batches; ``reset(**row)`` ends the instance's previous session and starts a fresh
    one (a new ``session_id``, no variable of before), and returns None: the prompt stays as the
    dataset wrote it, TRL renders the ``python`` tool's schema into it. The one tool TRL sees is
    ``python`` (TRL offers every public function of the class but ``reset`` and ``get_reward``;
    ``close`` is a property, so that it is not among them). A session that ran out of one of its
    limits says so in the tool's answer, and stays over until the next ``reset``.

    ``sandbox``: what runs the cells (a ``Sandbox``, ``"ray"``, any runner with ``run_many``;
    default: a handle on the process-wide sandbox, as the env-backed classes hold, kept from one
    episode to the next and let go by ``close()``). ``limits``: ``InterpreterLimits``, or a mapping
    of its fields (checked here: a ``ValueError`` names a bad one). ``calls``: the episode's calls,
    ``(code, CellResult)`` each; ``session``: the episode's ``CodeInterpreter`` (None before the first
    ``reset`` and after ``close``). ``close()`` ends the session for good (nothing of it runs between
    cells, so nothing is left in the sandbox); a later ``reset`` starts a new one."""

    def __init__(self, *, sandbox: Runner | str | None = None,
                 limits: InterpreterLimits | Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self.limits = interpreter_limits(limits, "CodeInterpreterTools")
        self._sandbox = sandbox
        self._session: CodeInterpreter | None = None
        self.calls: list[tuple[str, CellResult]] = []

    @property
    def session(self) -> CodeInterpreter | None:
        """The episode's session (None before the first ``reset`` and after ``close``)."""
        return self._session

    def reset(self, **row: Any) -> str | None:
        """A new episode: the previous session ended, a fresh one started (the row is not read)."""
        if self._session is None:
            self._session = CodeInterpreter(self._sandbox, limits=self.limits)
        else:
            self._session.reset()  # (the same executor handle: the sandbox's workers stay between episodes)
        self.calls = []
        return None

    def python(self, code: str) -> str:
        """Run Python code in a persistent session: variables, functions and imports stay defined between calls.

        Args:
            code: The Python code to run; the value of its last expression is shown.

        Returns:
            What the code printed on stdout and stderr, the value of its last expression, or what went wrong.
        """
        if self._session is None:
            raise RuntimeError("CodeInterpreterTools: python() was called before reset() (or after close())")
        result = self._session.run(code)
        self.calls.append((code, result))
        return result.text()

    @property
    def close(self) -> Callable[[], None]:
        """``close()``: end the session for good (idempotent; see the class). A property giving the
        method, so that TRL does not offer it to the model as a tool."""
        return self._close

    def _close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def __enter__(self) -> CodeInterpreterTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


Generate = Callable[[list[list[int]], list[int]], list[list[int]]]
"""``generate(sequences, max_new_tokens)``: for each token sequence (a prompt and the episode so
far), the tokens the policy writes next, at most ``max_new_tokens[i]`` of them, ending with an
end-of-sequence token when the policy stopped by itself."""


@dataclass
class Episode:
    """One rollout of ``CodeExecRollout``: what the model wrote and what the env made of it."""

    problem_id: str
    trace_id: str
    """``problem_id/sample``: what the env's trace ids of the episode's turns begin with."""
    programs: list[str] = field(default_factory=list)
    """The program of each turn (``program_of`` of the reply), as the env ran it."""
    step_rewards: list[float] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    """The feedback message after each turn but the last (as the model read it)."""
    model_tokens: int = 0
    """Tokens the model wrote (``env_mask`` 1)."""
    feedback_tokens: int = 0
    """Tokens of the feedback between the replies (``env_mask`` 0: not trained on)."""
    reward: float | None = None
    """The episode's return (None: the sandbox or the LLM judge's endpoint failed; TRL skips it)."""
    tier: str = ""
    end: str = ""
    """``terminated`` (every public test passed, or a single-turn episode), ``truncated:<budget>``
    (the env's budget: ``turns``, ...), ``completion_length`` (no room left for the feedback and
    another turn in ``max_completion_length``), ``sandbox_error`` or ``judge_error``."""

    @property
    def turns(self) -> int:
        return len(self.programs)


def feedback_message(lines: Sequence[str], language: str = "python") -> str:
    """The default feedback of ``CodeExecRollout``: the env's rendering of its observation of the
    last program (``CodeExecEnv.render_lines``: public tests passed, the failing ones, stderr) and
    what to do next — the message ``baselines/llm_agent.py`` sends."""
    return ("Your program was run on the public tests:\n\n" + "\n".join(lines) +
            f"\n\nFix the program. Reply with the complete corrected program in one ```{language} code block.")  # fmt: skip


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _chat_ids(tokenizer: Any, messages: list[dict[str, Any]], kwargs: Mapping[str, Any], *, generation: bool) -> list[int]:
    ids: Any = tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True, return_dict=False,
                                             **kwargs)  # fmt: skip
    if isinstance(ids, Mapping):  # (a tokenizer that returns its BatchEncoding anyway)
        ids = ids["input_ids"]
    return [int(t) for t in (ids.tolist() if hasattr(ids, "tolist") else ids)]


def feedback_ids(tokenizer: Any, text: str, *, eos_token_ids: Sequence[int] = (),
                 chat_template_kwargs: Mapping[str, Any] | None = None) -> list[int]:  # fmt: skip
    """The tokens that follow a model's reply when ``text`` comes back as the next user message:
    the end of the assistant's turn the chat template adds after the reply's end-of-sequence
    token, the user message, and the next assistant header (the generation prompt). Computed as
    TRL computes a tool response's tokens (``GRPOTrainer._get_tool_suffix_ids``): the template
    applied to a dummy exchange with and without the message, the shorter cut after its last
    end-of-sequence token; the episode's tokens are then concatenated, never re-tokenized. A
    template that renders earlier messages differently once another follows (not
    prefix-preserving) is refused."""
    kwargs = dict(chat_template_kwargs or {})
    exchange = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
    before = _chat_ids(tokenizer, exchange, kwargs, generation=False)
    after = _chat_ids(tokenizer, [*exchange, {"role": "user", "content": text}], kwargs, generation=True)
    stops = set(eos_token_ids) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
    ends = [i for i, t in enumerate(before) if t in stops]
    if ends:
        before = before[: ends[-1] + 1]
    if after[: len(before)] != before:
        raise ValueError("the chat template renders a conversation differently once another message follows (it is not "
                         "prefix-preserving): the feedback's tokens cannot be appended to the episode's")  # fmt: skip
    return after[len(before) :]


class CodeExecRollout:
    """A TRL ``rollout_func`` for ``GRPOTrainer``: every completion is a multi-turn ``CodeExec-v0``
    episode (``max_turns``, default 3). The trainer's model writes a reply; its program
    (``program_of``) is the env's action; unless the episode is over, the env's feedback on the
    public tests comes back as the next user message (``feedback``, default ``feedback_message``
    of ``env.render_lines()``) and the model replies again::

        rollout = code_env.trl.CodeExecRollout("builtin", max_turns=3)
        trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=code_env.trl_dataset("builtin"),
                              rollout_func=rollout, reward_funcs=code_env.trl.episode_reward)

    The completion TRL trains on is the whole episode after the prompt: the model's replies and,
    between them, the feedback's tokens (through the chat template, ``feedback_ids``), which the
    returned ``env_mask`` marks 0 so that they are left out of the loss (and of TRL's completion
    lengths); the model's own tokens are 1. The episode's return goes to the reward function as
    the column ``code_env_return`` (``episode_reward`` reads it; ``None`` when the sandbox or the
    LLM judge's endpoint failed, which TRL skips), with ``code_env_tier`` and ``code_env_turns``.

    The task of a prompt: its last user message is looked up among the tasks' messages
    (``trl_dataset(tasks)`` builds them; the task's own prompt is accepted too; a system message
    may be anything). Chat prompts only: the feedback is a conversation turn.

    Token budget: the episode's completion (replies and feedback) holds at most
    ``max_completion_length`` tokens (TRL's), and each reply at most ``max_turn_tokens`` (None:
    what is left). A reply cut by either is still the env's action (its generation marked
    ``context_window_overflow``). When the feedback and one more token no longer fit, the episode
    ends there with the last program's tier, as when the env's turns run out.

    Generation: ``__call__`` (what TRL calls) generates with the trainer's model through
    ``model.generate`` and the trainer's ``generation_config`` (sampling settings, end-of-sequence
    tokens), all open episodes of a turn in one batch, unwrapped as TRL unwraps it
    (``trl.models.unwrap_model_for_generation``; tested in one CPU process, not under FSDP, whose
    parameter gathering TRL's own generation adds). A trainer with ``use_vllm=True`` is refused:
    this path does not drive vLLM. ``rollout(prompts, generate, tokenizer, ...)`` runs episodes
    with any ``Generate`` callable. ``logprobs`` is ``None``, as TRL's own ``generate`` path gives.

    The envs: one ``CodeExecEnv`` per completion of a batch (kept for the next), on ``sandbox``
    (default: the process-wide sandbox), with ``config`` (the reward, as for ``TRLReward``),
    ``language`` and ``env_kwargs`` (any other ``CodeExec-v0`` argument: ``turn_time_s``,
    ``log_dir`` for trajectory logs, ...); all programs of a round go to the sandbox in one
    batch. ``last_episodes``: the ``Episode`` of every completion of the latest call."""

    def __init__(self, tasks: str | Path | Sequence[Task] = "builtin", *, max_turns: int = 3,
                 sandbox: Runner | str | None = None, config: RewardConfig | Mapping[str, Any] | str | Path | None = None,
                 language: str = "python", join_prompt: JoinPrompt = "auto", max_turn_tokens: int | None = None,
                 feedback: Callable[[Sequence[str]], str] | None = None, **env_kwargs: Any) -> None:  # fmt: skip
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns: expected an integer >= 1, got {max_turns!r}")
        if max_turn_tokens is not None and (isinstance(max_turn_tokens, bool) or not isinstance(max_turn_tokens, int)
                                            or max_turn_tokens < 1):  # fmt: skip
            raise ValueError(f"max_turn_tokens: expected an integer >= 1 or None, got {max_turn_tokens!r}")
        if join_prompt not in ("auto", True, False):
            raise ValueError(f"join_prompt: expected 'auto', True or False, got {join_prompt!r}")
        for key, ours in (("executor", "sandbox"), ("reward", "config")):
            if key in env_kwargs:
                raise TypeError(f"CodeExecRollout: the env's {key!r} is CodeExecRollout's {ours!r} argument")
        self.language = program_language(language)
        self.tasks = [t for t in load_tasks(tasks) if self.language in FUNCTION_DRIVERS or t.kind == "stdio"]
        if not self.tasks:
            raise ValueError(f"CodeExecRollout: no stdio task among the tasks: a {self.language} program answers stdio "
                             "tasks only (function tasks are graded in Python)")  # fmt: skip
        self.config = reward_config(config)
        self.max_turns = max_turns
        self.join_prompt = join_prompt
        self.max_turn_tokens = max_turn_tokens
        self.feedback: Callable[[Sequence[str]], str] = feedback or (lambda lines: feedback_message(lines, self.language))
        self._sandbox = sandbox
        self._env_kwargs = env_kwargs
        self._envs: list[CodeExecEnv] = []
        self._by_message: dict[str, Task | None] = {}
        for task in self.tasks:
            for key in {text.strip() for text in (_user_message(task, self.language), task_prompt(task, self.language), task.prompt)}:
                seen = self._by_message.get(key, task)
                self._by_message[key] = task if seen is task or (seen is not None and seen.problem_id == task.problem_id) else None
        self.episodes_seen = 0
        self.last_episodes: list[Episode] = []

    # -------------------------------------------------------------------------------- TRL

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """TRL's ``rollout_func(prompts, trainer)``: one episode per prompt (TRL hands each prompt
        ``num_generations`` times already)."""
        if getattr(trainer, "use_vllm", False):
            raise NotImplementedError("CodeExecRollout generates with trainer.model.generate; with use_vllm=True use "
                                      "environment_factory=code_env.trl.CodeExecTools (TRL's own tool loop) instead")  # fmt: skip
        processing = trainer.processing_class
        tokenizer = getattr(processing, "tokenizer", processing)
        config = getattr(trainer.model, "config", None)
        max_length = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        eos = list(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])
        return self.rollout(prompts, partial(_trainer_generate, trainer, tokenizer, eos), tokenizer,
                            max_completion_length=int(trainer.max_completion_length), max_length=max_length,
                            eos_token_ids=eos, chat_template_kwargs=getattr(trainer, "chat_template_kwargs", None))  # fmt: skip

    def close(self) -> None:
        """Close the envs (their trajectory logs); a later call makes new ones."""
        envs, self._envs = self._envs, []
        for env in envs:
            env.close()

    # ---------------------------------------------------------------------------- episodes

    def task_of(self, prompt: Any) -> Task:
        """The task a chat prompt asks for (its last user message; see the class)."""
        if isinstance(prompt, str) or not isinstance(prompt, list) or not all(isinstance(m, dict) for m in prompt):
            raise ValueError("CodeExecRollout: expected chat prompts (lists of messages; trl_dataset(format='chat')), got "
                             f"{type(prompt).__name__}: the feedback comes back as a conversation turn")  # fmt: skip
        users = [m for m in prompt if m.get("role") == "user"]
        text = _message_text(users[-1].get("content")).strip() if users else ""
        if text not in self._by_message:
            raise KeyError(f"CodeExecRollout: no task has the prompt {text[:80]!r}...: build the dataset with "
                           "code_env.trl_dataset(tasks) from the tasks given to CodeExecRollout")  # fmt: skip
        task = self._by_message[text]
        if task is None:
            raise KeyError(f"CodeExecRollout: several tasks have the prompt {text[:80]!r}...: it names none of them")
        return task

    def _env_pool(self, n: int) -> list[CodeExecEnv]:
        while len(self._envs) < n:
            self._envs.append(CodeExecEnv(self.tasks, executor=self._sandbox, reward=self.config, max_turns=self.max_turns,
                                          language=self.language, **self._env_kwargs))  # fmt: skip
        return self._envs[:n]

    def rollout(self, prompts: Sequence[Any], generate: Generate, tokenizer: Any, *, max_completion_length: int,
                max_length: int | None = None, eos_token_ids: Sequence[int] = (),
                chat_template_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        """Run one episode per prompt with ``generate`` as the policy; TRL's rollout result:
        ``prompt_ids``, ``completion_ids``, ``logprobs`` (None), ``env_mask`` (1: the model's
        token, 0: the env's), ``code_env_return``, ``code_env_tier``, ``code_env_turns``.
        ``max_length``: the model's context (prompt and completion), if it has one."""
        kwargs = dict(chat_template_kwargs or {})
        tasks = [self.task_of(p) for p in prompts]
        stops = set(eos_token_ids) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
        prompt_ids = [_chat_ids(tokenizer, list(p), kwargs, generation=True) for p in prompts]
        envs = self._env_pool(len(prompts))
        episodes = []
        for i, (env, task) in enumerate(zip(envs, tasks, strict=True)):
            env.reset(options={"problem_id": task.problem_id, "sample": self.episodes_seen + i})
            episodes.append(Episode(problem_id=task.problem_id, trace_id=str(env.trace_id).rsplit("/", 2)[0]))
        self.episodes_seen += len(prompts)
        completion: list[list[int]] = [[] for _ in prompts]
        mask: list[list[int]] = [[] for _ in prompts]

        def room(i: int) -> int:
            left = max_completion_length - len(completion[i])
            if max_length is not None:
                left = min(left, max_length - len(prompt_ids[i]) - len(completion[i]))
            return left if self.max_turn_tokens is None else min(left, self.max_turn_tokens)

        for i in range(len(prompts)):
            if room(i) < 1:
                raise ValueError(f"CodeExecRollout: the prompt of {tasks[i].problem_id} leaves no room for a reply "
                                 f"({len(prompt_ids[i])} tokens; max_completion_length {max_completion_length}, "
                                 f"context {max_length})")  # fmt: skip
        active = list(range(len(prompts)))
        while active:
            rooms = [room(i) for i in active]
            replies = generate([prompt_ids[i] + completion[i] for i in active], rooms)
            if len(replies) != len(active):
                raise ValueError(f"generate: expected {len(active)} replies, got {len(replies)}")
            programs = []
            for i, reply, limit in zip(active, replies, rooms, strict=True):
                ids = [int(t) for t in reply][:limit]
                completion[i] += ids
                mask[i] += [1] * len(ids)
                episodes[i].model_tokens += len(ids)
                if not ids or ids[-1] not in stops:
                    envs[i].end_generation("context_window_overflow")
                text = tokenizer.decode(ids, skip_special_tokens=True)
                programs.append(program_of(tasks[i], text, None, join_prompt=self.join_prompt, language=self.language))
            results = _step_together([envs[i] for i in active], programs)
            still = []
            for i, program, (_, reward, terminated, truncated, info) in zip(active, programs, results, strict=True):
                ep = episodes[i]
                ep.programs.append(program)
                ep.step_rewards.append(float(reward))
                ep.tier = str(info["reward_breakdown"].get("tier", ""))
                failed = "sandbox_error" if info.get("sandbox_error") else "judge_error" if info.get("judge_error") else None
                if failed is not None:
                    ep.reward, ep.end, ep.tier = None, failed, failed
                elif terminated or truncated:
                    ep.reward = round(sum(ep.step_rewards), 6)
                    ep.end = "terminated" if terminated else f"truncated:{info.get('budget')}"
                else:
                    message = self.feedback(envs[i].render_lines())
                    more = feedback_ids(tokenizer, message, eos_token_ids=sorted(stops), chat_template_kwargs=kwargs)
                    completion[i] += more  # (taken back below when it leaves no room for a reply)
                    if room(i) >= 1:
                        mask[i] += [0] * len(more)
                        ep.feedback.append(message)
                        ep.feedback_tokens += len(more)
                        still.append(i)
                        continue
                    del completion[i][len(completion[i]) - len(more) :]
                    # as when the env's turns run out: the last program keeps its tier (the bonus paid is in the steps)
                    ep.reward = float(info["reward_breakdown"]["reward"])
                    ep.end = "completion_length"
            active = still
        self.last_episodes = episodes
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": None, "env_mask": mask,
                "code_env_return": [e.reward for e in episodes], "code_env_tier": [e.tier for e in episodes],
                "code_env_turns": [e.turns for e in episodes]}  # fmt: skip


def _step_together(envs: Sequence[CodeExecEnv], actions: Sequence[str]) -> list[StepResult]:
    """One step of each env, their verification rounds merged: every program of a round goes to
    the (shared) executor in one ``run_many``, as ``CodeExecVectorEnv`` does."""
    results: dict[int, StepResult] = {}
    rounds: dict[int, Generator[list[Job], list[Verification], StepResult]] = {}
    pending: dict[int, list[Job]] = {}
    for i, (env, action) in enumerate(zip(envs, actions, strict=True)):
        gen = env.step_rounds(action)
        try:
            pending[i] = next(gen)
            rounds[i] = gen
        except StopIteration as stop:  # decided without running anything (a budget)
            results[i] = stop.value
    while pending:
        order = list(pending)
        verdicts = verify_many([job for i in order for job in pending[i]], envs[order[0]].executor)
        at = 0
        for i in order:
            mine, at = verdicts[at : at + len(pending[i])], at + len(pending[i])
            try:
                pending[i] = rounds[i].send(mine)
            except StopIteration as stop:
                results[i] = stop.value
                del pending[i]
    return [results[i] for i in range(len(envs))]


def _trainer_generate(trainer: Any, tokenizer: Any, eos_token_ids: Sequence[int], sequences: list[list[int]],
                      max_new_tokens: list[int]) -> list[list[int]]:  # fmt: skip
    """``Generate`` with a TRL trainer's model: left-padded batch, the trainer's generation config
    (up to the largest ``max_new_tokens``), each reply cut after its first end-of-sequence token
    and at its own limit."""
    import torch
    from trl.models import unwrap_model_for_generation

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_token_ids[0]
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        attention[row, width - len(seq) :] = 1
    device = trainer.accelerator.device
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = max(max_new_tokens)
    args = trainer.args
    with (
        unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                    gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
                                    generation_kwargs=getattr(trainer, "generation_kwargs", None),
                                    gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None)) as model,
        torch.no_grad(),
    ):  # fmt: skip
        out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), generation_config=config)
    stops = set(eos_token_ids)
    replies = []
    for row, limit in zip(out[:, width:].cpu().tolist(), max_new_tokens, strict=True):
        cut = next((k + 1 for k, t in enumerate(row) if t in stops), len(row))
        replies.append(row[: min(cut, limit)])
    return replies


def episode_reward(prompts: Sequence[Any] = (), completions: Sequence[Any] = (), *,
                   code_env_return: Sequence[float | None] | None = None, code_env_tier: Sequence[str] | None = None,
                   code_env_turns: Sequence[int] | None = None, log_extra: Callable[[str, list[Any]], None] | None = None,
                   log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float | None]:  # fmt: skip
    """The ``reward_funcs`` entry for ``CodeExecRollout``: each completion's episode return (the
    column ``code_env_return`` the rollout adds; ``None`` for a sandbox or judge failure, which
    TRL skips). Logs each episode's tier and turns to TRL's completions table (``code_env_tier``,
    ``code_env_turns``) and the share of solved episodes and the mean turns to its metrics
    (``code_env/solved``, ``code_env/turns``)."""
    if code_env_return is None:
        raise KeyError("episode_reward: no 'code_env_return' column: it is the return that CodeExecRollout adds; "
                       "GRPOTrainer(rollout_func=code_env.trl.CodeExecRollout(...), reward_funcs=episode_reward)")  # fmt: skip
    if code_env_tier is not None and code_env_turns is not None:
        tiers, turns = list(code_env_tier), [int(t) for t in code_env_turns]
        if callable(log_extra):
            log_extra("code_env_tier", tiers)
            log_extra("code_env_turns", turns)
        if callable(log_metric) and tiers:
            log_metric("code_env/solved", tiers.count("all_tests") / len(tiers))
            log_metric("code_env/turns", sum(turns) / len(turns))
    return [None if r is None else float(r) for r in code_env_return]
