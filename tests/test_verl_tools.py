"""verl's multi-turn tools (``code_env.verl_tools``) in verl's own venv, loaded by verl's tool
registry and called by verl's agent loop (``tests/_verl_agent_loop.py``: what runs there, and what
does not), and the parts of ``code_env.verl`` that need no verl: the rows, the tool config, and
the reward of a tool episode's state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from code_env import compute_score
from code_env.verl import AGENT_TOOLS, agent_rows, tool_config

from .conftest import REPO

VERL_PY = REPO / ".venv" / "verl" / "bin" / "python"
PID = "builtin/sum-of-evens"
RIGHT = "def sum_of_evens(nums):\n    return sum(n for n in nums if n % 2 == 0)\n"


def in_verl(script: str, *args: str) -> Any:
    if not VERL_PY.exists():
        if sys.prefix != str(REPO / ".venv"):
            pytest.skip("verl's venv is built by scripts/bootstrap.sh beside the repository's .venv")
        log = REPO / ".venv" / "verl-build.log"
        why = log.read_text(errors="replace")[-3000:] if log.exists() else "(no .venv/verl-build.log: the build was not tried)"
        pytest.fail(f"verl's venv (.venv/verl) is missing: scripts/bootstrap.sh builds it; its log ends:\n{why}")
    out = subprocess.run([str(VERL_PY), script, *args], capture_output=True, text=True, timeout=300, cwd=REPO,
                         stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(line[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def verl_run() -> dict[str, Any]:
    return in_verl(str(REPO / "tests" / "_verl_agent_loop.py"))


def test_verl_loads_the_tools_by_name_with_the_envs_schemas(verl_run: dict[str, Any]) -> None:
    assert verl_run["tool_names"] == sorted([*AGENT_TOOLS, "python"])
    by_name = {s["function"]["name"]: s for s in verl_run["schemas"]}
    assert by_name["edit_file"]["function"]["parameters"]["required"] == ["path", "old", "new"]
    assert by_name["python"]["function"]["parameters"]["required"] == ["code"]


def test_an_episode_through_verls_agent_loop(verl_run: dict[str, Any]) -> None:
    steps = verl_run["steps"]
    listed, _read, wrote, tested, b_wrote, b_saw, edited, py1, py2, b_py, tested2, submitted, after = steps[:13]
    assert "main.py" in listed["text"] and "test_public.py" in listed["text"] and "hidden" not in listed["text"]
    assert wrote["text"].startswith("wrote main.py")
    assert tested["text"].startswith("1/3 public tests passed") and tested["reward"] == 0.05  # the capped advance
    # the other trajectory's workspace: its own files only, never the first's edit
    assert b_wrote["text"].startswith("wrote probe.py") and "probe.py" in b_saw["text"]
    assert b_saw["metrics"]["calls"] == 2
    assert "['PROMPT.md', 'main.py', 'probe.py', 'solution.py', 'test_public.py'] False" in b_saw["text"], b_saw
    assert edited["text"] == "edited main.py"
    assert (py1["text"], py2["text"]) == ("Out[1]: 21", "Out[2]: 40")  # the session lives through the trajectory
    assert "NameError" in b_py["text"]  # and is the trajectory's own
    assert tested2["text"].startswith("3/3 public tests passed") and tested2["reward"] == 0.05
    assert submitted["text"].startswith("submitted: all_tests") and submitted["reward"] == pytest.approx(0.9)
    assert "the episode is over (submit)" in after["text"] and after["reward"] == 0.0
    # the reward function scores the episode (its return: the tier, advances included), not the response
    assert verl_run["score_a"]["score"] == 1.0 and verl_run["score_a"]["tier"] == "all_tests"
    state = verl_run["state_a"]
    assert (state["ended"], state["return"], state["main_py"]) == ("submit", 1.0, RIGHT)
    assert "expected" not in json.dumps(state)  # no test's expected value travels with the trajectory


def test_malformed_calls_are_answers_never_exceptions(verl_run: dict[str, Any]) -> None:
    unknown, not_json, traversal, missing = verl_run["steps"][13:17]
    assert unknown["text"].startswith("Unknown function 'rm_rf'")  # verl's own
    assert not_json["text"].startswith("Invalid JSON in arguments for 'read_file'")  # verl's own
    assert "may not hold '.', '..'" in traversal["text"] and traversal["metrics"]["tool_error"]
    assert missing["text"] == "read_file: missing argument 'path'"


def test_an_episode_left_without_submit_is_graded_as_submitted(verl_run: dict[str, Any]) -> None:
    assert verl_run["score_b"]["tier"] == "partial" and verl_run["score_b"]["score"] == 0.0  # the starter code
    assert verl_run["score_c"]["score"] == 1.0  # wrote the right program, never submitted
    budget = verl_run["budget_d"]
    assert budget["last"]["metrics"]["budget"] == "tool_calls" and "graded as submitted" in budget["last"]["text"]
    assert budget["score"]["tier"] == "partial"


def test_without_agent_data_the_instance_id_is_the_episode(verl_run: dict[str, Any]) -> None:
    got = verl_run["instance"]
    assert got["tested"] == "3/3 public tests passed (all_public)" and got["advance"] == 0.05 and got["before"] == 0.05
    assert got["submitted"].startswith("submitted: all_tests") and got["last"] == pytest.approx(0.95)
    assert (got["total"], got["after_release"]) == (1.0, 0.0)


def test_the_interpreter_alone_as_verls_tool(verl_run: dict[str, Any]) -> None:
    assert verl_run["interpreter"] == ["(no output)", "Out[2]: 28.27"]
    assert "NameError: name 'r' is not defined" in verl_run["interpreter_other"]
    assert "[timed out]" in verl_run["interpreter_hang"] and verl_run["interpreter_after"] == "Out[4]: 4"


def test_a_bad_tool_config_fails_when_verl_loads_it(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text(
        "import json, sys, yaml\nfrom verl.tools.tool_registry import initialize_tools_from_config\n"
        "errors = []\n"
        "for config in ({'tool': 'rm_rf'}, {'tool': 'run', 'max_calls': 0}, {'tool': 'run', 'max_cals': 3},\n"
        "               {'tool': 'run', 'tasks': 'no-such-set'}):\n"
        "    open(sys.argv[1], 'w').write(yaml.safe_dump({'tools': [{'class_name': 'code_env.verl_tools.CodeAgentTool',\n"
        "                                                            'config': {'type': 'native', **config}}]}))\n"
        "    try:\n        initialize_tools_from_config(sys.argv[1])\n        errors.append(None)\n"
        "    except Exception as exc:\n        errors.append(f'{type(exc).__name__}: {exc}')\n"
        "print('RESULT ' + json.dumps(errors))\n"
    )  # fmt: skip
    got = in_verl(str(script), str(tmp_path / "tools.yaml"))
    assert got[0].startswith("ValueError") and "config.tool: expected one of" in got[0] and "rm_rf" in got[0]
    assert "max_calls: expected an int >= 1" in got[1]
    assert "unknown config keys ['max_cals']" in got[2]
    assert "no-such-set" in got[3]


# --------------------------------------------------------------------------- without verl


def test_rows_and_tool_config() -> None:
    rows = agent_rows("builtin")
    row = next(r for r in rows if r["extra_info"]["problem_id"] == PID)
    assert (row["data_source"], row["agent_name"], row["reward_model"]) == ("builtin", "tool_agent",
                                                                            {"style": "rule", "ground_truth": PID})  # fmt: skip
    assert set(row["extra_info"]["tools_kwargs"]) == set(AGENT_TOOLS)
    assert row["extra_info"]["tools_kwargs"]["submit"] == {"create_kwargs": {"problem_id": PID}}
    text = json.dumps(row["prompt"])
    assert "main.py" in text and "submit" in text and "hidden" not in text.lower().replace("hidden tests", "")
    config = tool_config("builtin", interpreter=True, max_calls=5)
    assert [t["config"]["tool"] for t in config["tools"]] == [*AGENT_TOOLS, "python"]
    assert all(t["class_name"] == "code_env.verl_tools.CodeAgentTool" and t["config"]["max_calls"] == 5 for t in config["tools"])
    with pytest.raises(ValueError, match="tools: expected some of"):
        tool_config(tools=["rm"])
    with pytest.raises(TypeError, match=r"a task-set name or \.jsonl path"):
        agent_rows([])  # type: ignore[arg-type]


def state(**over: Any) -> dict[str, Any]:
    return {"problem_id": PID, "tasks": "builtin", "main_py": RIGHT, "rewards": [], "return": 0.0, "ended": None,
            "breakdown": None, "sandbox_error": None, "calls": 1, **over}  # fmt: skip


def test_compute_score_of_a_tool_episodes_state() -> None:
    def score(st: dict[str, Any], response: str = "no code here") -> Any:
        return compute_score("builtin", response, PID, {"code_env": st}, return_dict=True)

    assert score(state())["score"] == 1.0  # going on: main.py graded as submitted, whatever the response says
    assert score(state(main_py="def sum_of_evens(nums):\n    return 0\n"), f"```python\n{RIGHT}```")["tier"] == "partial"
    budget = score(state(ended="call_chars", rewards=[0.05, -0.05], **{"return": 0.0}))
    assert (budget["score"], budget["tier"]) == (0.0, "budget_exhausted") and "call_chars" in budget["explanation"]
    failed = score(state(ended="sandbox_error", sandbox_error="worker lost"))
    assert (failed["score"], failed["sandbox_error"], failed["tier"]) == (0.0, True, "sandbox_error")
    with pytest.raises(ValueError, match="the episode ran task 'builtin/fizzbuzz-line' but the row's ground truth"):
        score(state(problem_id="builtin/fizzbuzz-line"))
    with pytest.raises(TypeError, match=r"expected the state code_env\.verl_tools writes"):
        compute_score("builtin", "", PID, {"code_env": "x"})
