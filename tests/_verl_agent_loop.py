"""Run by ``tests/test_verl_tools.py`` in verl's own venv (``.venv/verl``, built by
scripts/bootstrap.sh: verl 0.9.1 and its transformers beside this venv's packages): our tools
loaded by verl's tool registry from the config file ``code_env.verl.tool_config`` gives, and called
by verl's own ``ToolAgentLoop._call_tool`` — verl's dispatch: the tool looked up by name, the
arguments parsed from the call's JSON, ``create``/``execute``/``release`` per call, the
trajectory's ``AgentData`` handed in — with the calls a model would make; then the reward as
verl's ``naive`` reward manager computes it (``extra_info`` updated with the loop's
``extra_fields``, then the custom reward function). What is not run: the LLM server that would
write the calls (the calls are scripted). Prints one JSON object of what happened."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from verl.experimental.agent_loop.tool_agent_loop import AgentData, FunctionCall, ToolAgentLoop
from verl.tools.tool_registry import initialize_tools_from_config

import code_env
from code_env.verl import agent_rows, tool_config

PID = "builtin/sum-of-evens"
WRONG = "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2)\n"
RIGHT = "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n"


def loop_with(tools: list[Any]) -> ToolAgentLoop:
    """verl's tool agent loop with only what ``_call_tool`` reads (its tools and the response
    truncation); its constructor would start a rollout server and a tokenizer."""
    loop = object.__new__(ToolAgentLoop)
    loop.tools = {t.name: t for t in tools}
    loop.max_tool_response_length = 4096
    loop.tool_response_truncate_side = "middle"
    return loop


def trajectory(row: dict[str, Any]) -> AgentData:
    return AgentData(messages=list(row["prompt"]), image_data=[], video_data=[], audio_data=None, mm_processor_kwargs=None,
                     metrics={}, request_id=f"req-{row['extra_info']['index']}", tools_kwargs=row["extra_info"]["tools_kwargs"])


async def call(loop: ToolAgentLoop, data: AgentData, name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    response, reward, metrics = await loop._call_tool(FunctionCall(name=name, arguments=text), data.tools_kwargs, data)
    data.tool_rewards.append(reward)
    return {"text": response.text, "reward": reward, "metrics": metrics}


def score(row: dict[str, Any], data: AgentData, response: str = "") -> dict[str, Any]:
    """verl's naive reward manager: the row's extra_info, updated with the loop's extra fields."""
    extra_info = dict(row["extra_info"])
    extra_info.update({**data.extra_fields, "turn_scores": data.turn_scores, "tool_rewards": data.tool_rewards}.items())
    got = code_env.compute_score(data_source=row["data_source"], solution_str=response,
                                 ground_truth=row["reward_model"]["ground_truth"], extra_info=extra_info, return_dict=True)
    assert isinstance(got, dict)
    return got


async def main(out: Path) -> dict[str, Any]:
    config = out / "tools.yaml"
    config.write_text(yaml.safe_dump(tool_config("builtin", interpreter=True, max_calls=12)))
    config_interp = out / "interpreter.yaml"
    config_interp.write_text(yaml.safe_dump({"tools": [{"class_name": "code_env.verl_tools.CodeInterpreterTool",
                                                         "config": {"type": "native", "limits": {"cell_timeout_s": 2}}}]}))
    tools = initialize_tools_from_config(str(config))
    loop = loop_with(tools)
    rows = {r["extra_info"]["problem_id"]: r for r in agent_rows("builtin", interpreter=True)}
    row = rows[PID]
    got: dict[str, Any] = {"tool_names": sorted(loop.tools), "schemas": [t.tool_schema.model_dump(exclude_none=True) for t in tools]}

    # an episode: look, write a mistake, test, fix, test, submit; a second trajectory on the same
    # task at the same time, which must not see the first's files
    a, b = trajectory(row), trajectory({**row, "extra_info": {**row["extra_info"], "index": 999}})
    steps = [await call(loop, a, "list_files", {}), await call(loop, a, "read_file", {"path": "main.py"})]
    steps.append(await call(loop, a, "write_file", {"path": "main.py", "content": WRONG}))
    steps += await asyncio.gather(call(loop, a, "run_tests", {}),
                                  call(loop, b, "write_file", {"path": "probe.py", "content": "import os\nprint(sorted(os.listdir('.')), 'n % 2' in open('main.py').read())"}))
    steps.append(await call(loop, b, "run", {"path": "probe.py"}))
    steps.append(await call(loop, a, "edit_file", {"path": "main.py", "old": "n % 2)", "new": "n % 2 == 0)"}))
    steps.append(await call(loop, a, "python", {"code": "x = 20\nx + 1"}))
    steps.append(await call(loop, a, "python", {"code": "x * 2"}))
    steps.append(await call(loop, b, "python", {"code": "x"}))
    steps.append(await call(loop, a, "run_tests", {}))
    steps.append(await call(loop, a, "submit", {}))
    steps.append(await call(loop, a, "run_tests", {}))  # after the episode
    # malformed calls: verl's own answers (an unknown tool, arguments that are not JSON) and ours
    steps.append(await call(loop, b, "rm_rf", {}))
    steps.append(await call(loop, b, "read_file", "{not json"))
    steps.append(await call(loop, b, "read_file", {"path": "../../etc/passwd"}))
    steps.append(await call(loop, b, "read_file", {}))
    got["steps"] = steps
    got["score_a"] = score(row, a, response="(the model's last words, not graded)")
    got["state_a"] = {k: v for k, v in a.extra_fields["code_env"].items() if k != "reward_config"}
    # b never submitted: its main.py (the starter code) is graded as submitted
    got["score_b"] = score(row, b)
    # c wrote the right program and stopped calling tools: graded as submitted, 1.0
    c = trajectory({**row, "extra_info": {**row["extra_info"], "index": 1000}})
    await call(loop, c, "write_file", {"path": "main.py", "content": RIGHT})
    got["score_c"] = score(row, c)
    # the calls run out (max_calls 12): main.py graded as submitted, the budget's label
    d = trajectory({**row, "extra_info": {**row["extra_info"], "index": 1001}})
    for _ in range(12):
        last = await call(loop, d, "list_files", {})
    got["budget_d"] = {"last": last, "score": score(row, d)}

    # a caller without agent_data that keeps one instance id per trajectory (verl's older SGLang
    # rollout: create(request_id) on every tool, release at the end): the episode of that id
    by = {t.name: t for t in tools}
    for name in ("write_file", "run_tests", "submit"):
        await by[name].create("traj-x", create_kwargs={"problem_id": PID})
    await by["write_file"].execute("traj-x", {"path": "main.py", "content": RIGHT})
    tested, reward, _ = await by["run_tests"].execute("traj-x", {})
    before = await by["submit"].calc_reward("traj-x")
    submitted, last, _ = await by["submit"].execute("traj-x", {})
    total = await by["run_tests"].calc_reward("traj-x")
    for name in ("write_file", "run_tests", "submit"):
        await by[name].release("traj-x")
    got["instance"] = {"tested": tested.text.splitlines()[0], "advance": reward, "before": before, "submitted": submitted.text,
                       "last": last, "total": total, "after_release": await by["submit"].calc_reward("traj-x")}

    # the interpreter alone, as its own tool config
    (interp,) = initialize_tools_from_config(str(config_interp))
    il = loop_with([interp])
    e, f = trajectory(row), trajectory({**row, "extra_info": {**row["extra_info"], "index": 7}})
    got["interpreter"] = [(await call(il, e, "python", {"code": c}))["text"] for c in ("import math\nr = 3", "round(math.pi * r * r, 2)")]
    got["interpreter_other"] = (await call(il, f, "python", {"code": "r"}))["text"]
    got["interpreter_hang"] = (await call(il, e, "python", {"code": "while True:\n    pass"}))["text"]
    got["interpreter_after"] = (await call(il, e, "python", {"code": "r + 1"}))["text"]
    return got


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(main(Path(tmp)))
    sys.stdout.write("RESULT " + json.dumps(result, default=str) + "\n")
