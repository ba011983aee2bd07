"""THE record of one sample judged outside ``CodeExec-v0``'s own step: GRPO (``baselines.grpo``),
TRL (``code_env.TRLReward`` and ``baselines.trl_grpo``), verl (``code_env.verl``) and
``CodeExecTokens-v0`` all write it through ``grade_record``, in the shape of a single-turn
``CodeExec-v0`` step's record, so that the same ``code_env.logtools`` read every log
(``code-env stats``, ``audit``, ``replay``).

The fields, beyond an env step's (``trace_id``, ``episode``, ``sample``, ``turn``, ``seed``,
``problem_id``, ``difficulty``, ``task_fingerprint``, ``prompt``, ``action``, ``reward``,
``terminated``, ``truncated``, ``budget``, ``sandbox_error``, ``judge_error``, ``reward_breakdown``,
``public_cases``, ``hidden_cases``, ``executions``, ``execution_time_ms``, ``transitions``,
``config``, and ``task`` for an inline task):

* ``grade_spent_s``: what the sample's runs were charged of its grade's time budget
  (``reward_breakdown["budget_s"]``, ``registry.budget``);

* ``trainer`` (``"grpo"``, ``"trl"``, ``"verl"``, ``"ppo"``, or None) and ``step``: the
  optimisation step the sample belongs to, the one whose row of the run's ``curve.csv`` has the
  update's loss, KL, entropy and learning rate (None where the trainer does not say);
* ``completion``: the model's whole reply, decoded, as generated (``action`` is the program
  extracted from it); ``completion_truncated``: the generation stopped at its length budget
  (``max_completion_length``, ``max_new_tokens``, ``max_tokens``) rather than by itself (None:
  unknown); ``completion_tokens``: its length in tokens (None: unknown);
* ``advantage``: the group-normalised advantage the update used for this sample (None where it
  does not apply or the trainer does not expose it);
* ``ran_as``: the trace id the sample's public runs carry in ``executions`` — its own (with the
  retry counter of the sandbox's try that counted), that of an identical (task, program) pair of
  the same batch judged for it, or, with ``cached`` true, of an earlier one answered from a cache
  (its runs are then in that sample's record, if it was logged, and ``executions`` is empty);
* ``retried_executions``: the runs of the tries the sandbox failed and the grader asked again
  (their trace ids carry the earlier retry counters; every id of the record has the same
  ``code_env.tracing.trace_key``).

``trace_id`` is ``problem_id/sample/turn/retry`` (``code_env.tracing``). ``transitions`` are
``[state, unix time]``: ``generating`` (the batch's generation began), ``context_window_overflow``
or ``timed-out`` when the generation ended so, then per verification round ``queued``, ``running``
(the first of the sample's runs left the executor's queue), ``timed-out`` (a deadline of the
executor's passed), ``executed``; ``judging``/``timed-out`` around an LLM judge; ``judged``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from registry import Task
from registry.verify import Verification

from .env import MAX_TEXT_CHARS, EnvConfig, task_fingerprint, task_prompt
from .grading import Grade, Judged
from .reward import RewardConfig
from .tracing import GenerationEnd, generation_marks

Transitions = Sequence[tuple[str, float]]


def grade_record(task: Task, program: str, judged: Judged | Grade, config: RewardConfig | EnvConfig, *, trace_id: str,
                 n: int, prompt: Any = None, completion: str | None = None, completion_truncated: bool | None = None,
                 completion_tokens: int | None = None, trainer: str | None = None, step: int | None = None,
                 advantage: float | None = None, generating: float | None = None, generated: float | None = None,
                 generation_end: GenerationEnd | None = None, cached: bool = False, ran_as: str | None = None,
                 **extra: Any) -> dict[str, Any]:  # fmt: skip
    """The trajectory-log record (``code_env.trajectory``) of one graded sample (see the module).

    ``judged``: the pair's ``Judged`` (from ``grading.judge_many``: runs, trace id of the runs,
    the batch's states), or only its ``Grade`` when it was answered from a cache (``cached``).
    ``config``: the reward (the record's env config is then a single-turn one with an inline
    task) or a whole ``EnvConfig`` that ``code-env replay`` rebuilds. ``prompt``: what the model
    read (default: the task's prompt as ``CodeExec-v0`` shows it). ``n``: the sample's number
    (``episode`` and ``sample`` unless ``extra`` sets them); ``generating``: when the
    generation began (``time.time()``), ``generated`` when it ended, ``generation_end`` how
    (default: ``"context_window_overflow"`` when ``completion_truncated``); ``ran_as``: the trace
    id of the runs when they are another sample's (default: the ``Judged``'s); ``extra`` fields
    are added as given."""
    env = config if isinstance(config, EnvConfig) else EnvConfig(tasks="<inline>", reward=config, max_action_chars=MAX_TEXT_CHARS)
    end = generation_end or ("context_window_overflow" if completion_truncated else None)
    marks = generation_marks(generating, generated, end)
    if isinstance(judged, Judged):
        grade, pub, hid, ran_as = judged.grade, judged.public, judged.hidden, ran_as or judged.ran_as
        transitions, failed = [*marks, *judged.transitions], judged.retried
    else:
        grade, pub, hid, transitions, failed = judged, None, None, marks, []
    record = {
        "trace_id": trace_id, "episode": n, "sample": n, "turn": 0, "seed": None, "trainer": trainer, "step": step,
        "problem_id": task.problem_id, "difficulty": task.difficulty, "task_fingerprint": task_fingerprint(task),
        "prompt": task_prompt(task) if prompt is None else prompt, "completion": program if completion is None else completion,
        "completion_truncated": completion_truncated, "completion_tokens": completion_tokens, "action": program,
        "reward": grade.reward if grade.reward is not None else 0.0,  # a sandbox or judge failure: 0 and truncated, as the env logs it
        "terminated": grade.reward is not None, "truncated": grade.reward is None,
        "budget": None, "sandbox_error": grade.sandbox_error, "judge_error": grade.judge_error,
        "reward_breakdown": grade.breakdown.model_dump(exclude_none=True), "advantage": advantage,
        "public_cases": [c.model_dump() for c in (pub.cases if pub is not None else grade.feedback)],
        "hidden_cases": [{"status": c.status, "elapsed_ms": c.elapsed_ms} for c in hid.cases] if hid else [],
        "executions": [r.model_dump() for r in _executions(pub, hid)], "ran_as": ran_as, "cached": cached,
        "retried_executions": [r.model_dump() for v in failed for r in v.executions],
        "execution_time_ms": grade.run.execution_time_ms, "grade_spent_s": grade.spent_s, "transitions": [list(t) for t in transitions],
        **extra, "config": env.model_dump(mode="json"),
    }  # fmt: skip
    if env.tasks == "<inline>":
        record["task"] = task.model_dump(mode="json")
    return record


def _executions(pub: Verification | None, hid: Verification | None) -> list[Any]:
    return [*(pub.executions if pub is not None else []), *(hid.executions if hid is not None else [])]
