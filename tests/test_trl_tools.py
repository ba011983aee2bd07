"""TRL's multi-turn paths, for real: ``CodeExecTools`` as a ``GRPOTrainer`` ``environment_factory``
(TRL's own tool-calling loop, a chat template TRL parses tool calls from) and ``CodeExecRollout``
as its ``rollout_func`` (multi-turn ``CodeExec-v0`` episodes, the env's feedback masked out of the
loss). Tiny models built here from configs, tokenizers trained here; CPU, no downloads."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import code_env
import registry
from code_env.adapters import program_of
from code_env.trl import CodeExecRollout, CodeExecTools, episode_reward, feedback_ids, trl_rows

from .conftest import get_sandbox

# No model hub: everything below is built here. (Set before transformers is imported anywhere.)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"  # environment_factory and rollout_func are "experimental" in TRL 1.x

TASKS = registry.load("builtin")
EVENS = registry.get(TASKS, "builtin/sum-of-evens")
FIZZ = registry.get(TASKS, "builtin/fizzbuzz-line")
BITS = registry.get(TASKS, "builtin/count-set-bits")
WRONG_EVENS = "def sum_of_evens(nums):\n    return 0\n"  # passes 2 of the 3 public tests


def qwen_tokenizer(corpus: list[str], vocab_size: int = 1000) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, with Qwen2.5's special tokens and TRL's
    copy of Qwen2.5's chat template (``trl.chat_template_utils.qwen2_5_chat_template``): a
    template TRL recognises, so it sets the response parser that reads tool calls back."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  clean_up_tokenization_spaces=False)  # fmt: skip
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tok.chat_template = qwen2_5_chat_template
    return tok


@functools.cache
def _renderer() -> Any:
    return qwen_tokenizer(["x"], vocab_size=300)


def render(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
    """The text of a conversation through Qwen2.5's template (a throwaway tokenizer: the template
    is all that counts), for the tokenizer's training corpus."""
    return str(_renderer().apply_chat_template(messages, tools=tools, tokenize=False))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one thread for the test: a model this small gains nothing from two, and on a
    busy 2-core machine two threads per process make it several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_qwen(tok: Any, seed: int = 0) -> Any:
    """A randomly initialised Qwen2 of ~0.1M parameters for ``tok``'s vocabulary."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=None)  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return model


def memorize(model: Any, examples: list[tuple[list[int], list[int]]], pad_id: int, max_steps: int = 400) -> int:
    """Supervised warm start, as before RL: train ``model`` on each (prompt, completion) pair
    (loss on the completion) until its greedy choice is every completion token, five steps in a
    row. Returns the steps taken; fails the test when it does not get there."""
    import torch

    width = max(len(p) + len(c) for p, c in examples)
    ids = torch.full((len(examples), width), pad_id)  # padded on the right: no token attends to the padding
    labels = torch.full((len(examples), width), -100)
    for row, (p, c) in enumerate(examples):
        ids[row, : len(p) + len(c)] = torch.tensor(p + c)
        labels[row, len(p) : len(p) + len(c)] = torch.tensor(c)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    exact = 0
    for step in range(1, max_steps + 1):
        out = model(input_ids=ids, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        target, guess = labels[:, 1:], out.logits[:, :-1].argmax(-1)
        exact = exact + 1 if bool((guess[target != -100] == target[target != -100]).all()) else 0
        if exact == 5:
            return step
    raise AssertionError(f"the warm start did not learn its demonstrations in {max_steps} steps (loss {out.loss.item():.4f})")


# ------------------------------------------------------------------- environment_factory


def tool_call(name: str, code: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {"code": code}}}]}


@pytest.mark.slow
def test_tools_are_called_in_a_real_grpo_run(tmp_path: Path, one_thread: None) -> None:
    """``GRPOTrainer(environment_factory=CodeExecTools)``: TRL renders the tools into the prompt,
    parses the model's tool calls, calls ``run_tests`` and ``submit`` on the rollout's instance,
    feeds their results back and scores the rollout with ``get_reward``.

    A random tiny model never writes a well-formed tool call, so it gets what a real one gets
    first: a supervised warm start on a demonstration (per task: ``run_tests`` of the reference
    program, the real tool result, ``submit``, an empty closing reply), tokens exactly as TRL
    will render them; then one GRPO step samples from it (temperature 0.1)."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    sandbox = get_sandbox("process")
    tasks = [EVENS, BITS]  # (short programs: short demonstrations, a short warm start)
    rows = trl_rows(tasks)
    scripted = CodeExecTools(tasks, sandbox=sandbox)
    tools = [scripted.run_tests, scripted.submit]  # what TRL offers: the public methods but reset/get_reward
    conversations = []
    for row, task in zip(rows, tasks, strict=True):
        prompt = [dict(m) for m in row["prompt"]]
        prompt[-1]["content"] += scripted.reset(**row)  # TRL appends reset()'s text to the last user message
        shown = scripted.run_tests(task.reference_solution)
        assert shown.startswith("3/3 public tests passed")
        conversations.append((prompt, [*prompt, tool_call("run_tests", task.reference_solution),
                                       {"role": "tool", "name": "run_tests", "content": shown},
                                       tool_call("submit", task.reference_solution),
                                       {"role": "tool", "name": "submit", "content": scripted.submit(task.reference_solution)},
                                       {"role": "assistant", "content": ""}]))  # fmt: skip
    tok = qwen_tokenizer([render(whole, tools) for _, whole in conversations])
    examples = []
    for prompt, whole in conversations:
        p = tok.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
        full = tok.apply_chat_template(whole, tools=tools, tokenize=True, return_dict=False)
        assert full[: len(p)] == p and full[-2] == tok.eos_token_id  # (the template's "\n" after the last turn: not generated)
        examples.append((p, full[len(p) : -1]))
    model = tiny_qwen(tok)
    memorize(model, examples, tok.pad_token_id)
    longest = max(len(c) for _, c in examples)

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=longest + 16, temperature=0.1, learning_rate=1e-3, logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0, shuffle_dataset=False)  # fmt: skip
    trainer = GRPOTrainer(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(rows),
                          environment_factory=partial(CodeExecTools, tasks, sandbox=sandbox))  # fmt: skip
    assert getattr(tok, "response_template", None) is not None  # TRL recognised the template: it parses tool calls
    out = trainer.train()
    assert out.global_step == 1 and math.isfinite(out.training_loss)

    (logged,) = [h for h in trainer.state.log_history if "loss" in h]
    envs = trainer.environments
    assert len(envs) == 4 and all(isinstance(e, CodeExecTools) for e in envs)
    # TRL's count of the tool calls it executed is the count our instances saw, and none failed
    calls = [env.calls for env in envs]
    assert logged["tools/call_frequency"] == pytest.approx(sum(map(len, calls)) / len(envs))
    assert logged["tools/call_frequency"] >= 1 and logged["tools/failure_frequency"] == 0
    # each rollout's reward is get_reward's: the grade of its submitted (else last tested) program
    rewards = list(trainer._logs["rewards"]["CodeExecTools"])
    assert len(rewards) == 4 and logged["rewards/CodeExecTools/mean"] == pytest.approx(sum(rewards) / 4)
    for env, reward in zip(envs, rewards, strict=True):
        task = registry.get(TASKS, env._current().problem_id)
        submitted = [code for name, code in env.calls if name == "submit"]
        tested = [code for name, code in env.calls if name == "run_tests"]
        program = (submitted or tested or [""])[-1]
        assert reward == pytest.approx(code_env.grade(task, program, sandbox=sandbox).reward)
    assert any(name == "submit" and code == env._current().reference_solution for env in envs for name, code in env.calls)
    assert 1.0 in rewards  # a submission, graded on public and hidden tests: no other path gives 1.0
    # the tool's answer went back to the model, as a tool message of the completion TRL logged
    tool_messages = [m for completion in trainer._logs["completion"] for m in completion if m.get("role") == "tool"]
    assert any(m["name"] == "run_tests" and str(m["content"]).startswith("3/3 public tests passed") for m in tool_messages)
    assert torch.isfinite(torch.tensor(logged["loss"]))


# ------------------------------------------------------------------------- rollout_func


@pytest.fixture(scope="module")
def chat_tok() -> Any:
    rows = trl_rows([EVENS, FIZZ])
    corpus = [render([*r["prompt"], {"role": "assistant", "content": t.reference_solution}])
              for r, t in zip(rows, [EVENS, FIZZ], strict=True)]  # fmt: skip
    return qwen_tokenizer([*corpus, code_env.trl.feedback_message(["2/3 public tests passed, exit 0"])])


class Scripted:
    """A policy that writes given replies in turn (each reply's tokens, an end-of-sequence token
    after it unless ``stop=False``), recording what it was shown and allowed: it stands where a
    model's sampling would, so that the tokens of each turn are known."""

    def __init__(self, tok: Any, replies: list[str], stop: bool = True) -> None:
        self.tok, self.replies, self.stop = tok, replies, stop
        self.seen: list[list[list[int]]] = []
        self.allowed: list[list[int]] = []
        self.written: list[list[int]] = []

    def __call__(self, sequences: list[list[int]], max_new_tokens: list[int]) -> list[list[int]]:
        turn = len(self.seen)
        self.seen.append([list(s) for s in sequences])
        self.allowed.append(list(max_new_tokens))
        text = f"```python\n{self.replies[min(turn, len(self.replies) - 1)]}```"
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + ([self.tok.eos_token_id] if self.stop else [])
        self.written.append(ids)
        return [list(ids) for _ in sequences]


def test_rollout_masks_the_feedback_and_keeps_the_model_tokens(chat_tok: Any, tmp_path: Path) -> None:
    rollout = CodeExecRollout([EVENS, FIZZ], max_turns=3, sandbox=get_sandbox("process"), log_dir=str(tmp_path / "traj"))
    prompt = trl_rows([EVENS])[0]["prompt"]
    policy = Scripted(chat_tok, [WRONG_EVENS, EVENS.reference_solution])
    out = rollout.rollout([prompt, prompt], policy, chat_tok, max_completion_length=4000)

    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "code_env_return", "code_env_tier", "code_env_turns"}
    p_ids = chat_tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert out["prompt_ids"] == [p_ids, p_ids]
    first, second = policy.written
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        fb = ids[len(first) : len(ids) - len(second)]
        assert ids == first + fb + second  # the model's reply, the env's feedback, the model's next reply
        assert mask == [1] * len(first) + [0] * len(fb) + [1] * len(second)
        assert [t for t, m in zip(ids, mask, strict=True) if m] == first + second  # the model's tokens, all of them, only them
        shown = chat_tok.decode(fb)
        assert shown.startswith("\n<|im_start|>user\nYour program was run on the public tests:")
        assert "2/3 public tests passed" in shown and "expected 6, got 0" in shown
        assert shown.endswith("<|im_end|>\n<|im_start|>assistant\n")  # the next turn starts where the model writes
    assert policy.seen[1] == [p_ids + first + ids[len(first) : len(ids) - len(second)] for ids in out["completion_ids"]]
    assert out["code_env_return"] == [1.0, 1.0] and out["code_env_tier"] == ["all_tests"] * 2 and out["code_env_turns"] == [2, 2]
    assert out["logprobs"] is None
    ep = rollout.last_episodes[0]
    assert ep.programs == [WRONG_EVENS, EVENS.reference_solution] and ep.end == "terminated"
    assert ep.step_rewards == [0.05, 0.95] and len(ep.feedback) == 1  # the env's process bonus, then the rest of 1.0
    assert (ep.model_tokens, ep.feedback_tokens) == (len(first) + len(second), len(out["completion_ids"][0]) - len(first) - len(second))
    # the episodes are the env's: its trajectory log has every turn, as for any CodeExec-v0 episode
    from code_env.trajectory import read_log

    rollout.close()
    records = list(read_log(tmp_path / "traj"))
    assert sorted((r["sample"], r["turn"], r["reward"]) for r in records) == [(0, 0, 0.05), (0, 1, 0.95), (1, 0, 0.05), (1, 1, 0.95)]
    assert episode_reward(completions=["a", "b"], code_env_return=out["code_env_return"]) == [1.0, 1.0]


def test_rollout_ends_as_the_env_and_the_token_budget_say(chat_tok: Any) -> None:
    sandbox = get_sandbox("process")
    prompt = trl_rows([EVENS])[0]["prompt"]
    wrong = Scripted(chat_tok, [WRONG_EVENS])
    rollout = CodeExecRollout([EVENS], max_turns=2, sandbox=sandbox)
    out = rollout.rollout([prompt], wrong, chat_tok, max_completion_length=4000)
    (ep,) = rollout.last_episodes
    tier = code_env.grade(EVENS, WRONG_EVENS, sandbox=sandbox).reward  # 0.6 * 2/3
    assert ep.end == "truncated:turns" and ep.turns == 2 and out["code_env_return"] == [pytest.approx(tier)]
    assert ep.step_rewards == pytest.approx([0.05, tier - 0.05]) and ep.tier == "partial"  # the bonus, then the tier less it

    # no room for the feedback and one more token: the episode ends after the reply, with its tier
    reply = len(Scripted(chat_tok, [WRONG_EVENS])([[0]], [1])[0])
    out = rollout.rollout([prompt], Scripted(chat_tok, [WRONG_EVENS]), chat_tok, max_completion_length=reply + 5)
    assert rollout.last_episodes[0].end == "completion_length" and out["code_env_return"] == [pytest.approx(tier)]
    assert out["env_mask"] == [[1] * reply] and len(out["completion_ids"][0]) == reply

    # a reply cut at its budget (no end-of-sequence token) is still the env's action, marked overflowed
    cut = Scripted(chat_tok, [EVENS.reference_solution], stop=False)
    rollout = CodeExecRollout([EVENS], max_turns=2, sandbox=sandbox, max_turn_tokens=4)
    out = rollout.rollout([prompt], cut, chat_tok, max_completion_length=4000)
    assert cut.allowed == [[4], [4]] and out["env_mask"][0].count(1) == 8  # two replies of 4 tokens
    (ep,) = rollout.last_episodes
    assert ep.programs == [program_of(EVENS, chat_tok.decode(cut.written[0][:4]))] * 2  # what was written before the cut
    assert out["code_env_return"] == [code_env.grade(EVENS, ep.programs[-1], sandbox=sandbox).reward]
    assert rollout._envs[0].last_timing["transitions"][1][0] == "context_window_overflow"


def test_rollout_arguments_and_prompts_are_checked(chat_tok: Any) -> None:
    rollout = CodeExecRollout([EVENS], sandbox=get_sandbox("process"))
    assert rollout.task_of(trl_rows([EVENS], system_prompt="Be brief.")[0]["prompt"]) is EVENS  # any system message
    assert rollout.task_of([{"role": "user", "content": EVENS.prompt}]) is EVENS  # the task's own prompt
    with pytest.raises(ValueError, match=r"expected chat prompts .*trl_dataset\(format='chat'\)"):
        rollout.task_of(trl_rows([EVENS], format="plain")[0]["prompt"])
    with pytest.raises(KeyError, match=r"no task has the prompt 'Add two numbers\.'"):
        rollout.task_of([{"role": "user", "content": "Add two numbers."}])
    with pytest.raises(ValueError, match="max_turns: expected an integer >= 1, got 0"):
        CodeExecRollout([EVENS], max_turns=0)
    with pytest.raises(ValueError, match="max_turn_tokens: expected an integer >= 1 or None, got 0"):
        CodeExecRollout([EVENS], max_turn_tokens=0)
    with pytest.raises(TypeError, match="the env's 'reward' is CodeExecRollout's 'config' argument"):
        CodeExecRollout([EVENS], reward="reward.toml")
    with pytest.raises(KeyError, match="no 'code_env_return' column"):
        episode_reward(prompts=["p"], completions=["c"], problem_id=["x"])
    with pytest.raises(ValueError, match="no room for a reply"):
        rollout.rollout([trl_rows([EVENS])[0]["prompt"]], Scripted(chat_tok, ["x"]), chat_tok, max_completion_length=10,
                        max_length=5)  # fmt: skip
    fb = feedback_ids(chat_tok, "Try again.")
    assert chat_tok.decode(fb) == "\n<|im_start|>user\nTry again.<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
def test_rollout_in_a_real_grpo_step(tmp_path: Path, one_thread: None) -> None:
    """``GRPOTrainer(rollout_func=CodeExecRollout(...), reward_funcs=episode_reward)`` with a tiny
    random GPT-2 (``baselines.tiny_lm``): two-turn episodes generated by the trainer's model, the
    returns as rewards, and TRL counting only the model's tokens (the ``env_mask``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from baselines.tiny_lm import build_tiny_lm

    path = build_tiny_lm(tmp_path / "model", [t.prompt + t.reference_solution for t in TASKS])
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    rollout = CodeExecRollout([EVENS, FIZZ], max_turns=2, max_turn_tokens=6, sandbox=get_sandbox("process"))
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=900, learning_rate=1e-2, logging_steps=1, report_to="none",
                      save_strategy="no", use_cpu=True, bf16=False, seed=0)  # fmt: skip
    trainer = GRPOTrainer(model=model, args=args, processing_class=tok, train_dataset=code_env.trl_dataset([EVENS, FIZZ]),
                          rollout_func=rollout, reward_funcs=episode_reward)  # fmt: skip
    out = trainer.train()
    assert out.global_step == 1 and math.isfinite(out.training_loss)

    (logged,) = [h for h in trainer.state.log_history if "loss" in h]
    episodes = rollout.last_episodes
    assert len(episodes) == 4 and {e.problem_id for e in episodes} == {EVENS.problem_id, FIZZ.problem_id}
    assert all(e.turns == 2 and len(e.feedback) == 1 and e.end == "truncated:turns" for e in episodes)  # 6 tokens solve nothing
    returns = [e.reward for e in episodes]
    assert all(r is not None for r in returns)
    assert logged["rewards/episode_reward/mean"] == pytest.approx(sum(r for r in returns if r is not None) / 4)
    assert list(trainer._logs["rewards"]["episode_reward"]) == pytest.approx(returns)
    assert logged["code_env/turns"] == 2.0 and list(trainer._logs["extra"]["code_env_turns"]) == [2] * 4
    # TRL took the env mask: its completion lengths count the model's tokens (at most 6 a turn), not the feedback's
    assert all(1 <= e.model_tokens <= 12 and e.feedback_tokens > 12 for e in episodes)
    assert logged["completions/mean_length"] == pytest.approx(sum(e.model_tokens for e in episodes) / 4)
    assert logged["completions/max_length"] == max(e.model_tokens for e in episodes)
    completions = list(trainer._logs["completion"])
    assert all("Your program was run on the public tests" in c[0]["content"] for c in completions)  # the feedback is in the completion
