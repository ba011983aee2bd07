"""What a person reads shows what is there (issue 19): a program that writes terminal control
sequences, BEL, a bidi override or zero-width characters, in its code, its output or its return
values, cannot hide anything from ``code-env audit``, ``run``, ``trace`` or ``env.render()``:
each such character shows as its escape. The programs run for real in the sandbox; everything
is checked from the host's side, where the auditor sits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import registry
from code_env import CodeExecEnv
from code_env._visible import visible
from code_env.cli import main

ESC, BEL = "\x1b", "\x07"
UP_ERASE = f"{ESC}[1A{ESC}[2K"  # cursor up one line, erase it
RLO, LRI, ZWSP, ZWJ, BOM = "\u202e", "\u2066", "\u200b", "\u200d", "\ufeff"
RAW = (ESC, BEL, RLO, LRI, ZWSP, ZWJ, BOM)
SUFFIX = f"{UP_ERASE}{BEL}{RLO}{ZWSP}"  # on every return value (the tests expect it)

# A hard-coded table, and under it a comment of cursor-up/erase-line sequences that wipes it (and
# the lines above) off the auditor's terminal; prints and a return value full of the same.
TABLE_LINE = "TABLE = {1: 'one', 2: 'two', 3: 'three'}"
PROGRAM = (
    f"{TABLE_LINE}\n"
    f"# {UP_ERASE * 3}{BEL}nothing to see{RLO}{ZWSP}{BOM}\n"
    "import sys\n"
    "def name(n):\n"
    f"    print('stdout{UP_ERASE}{BEL}{RLO}{ZWSP}', n)\n"
    f"    print('stderr{UP_ERASE}{LRI}{ZWJ}', n, file=sys.stderr)\n"
    "    return TABLE[n] + SUFFIX\n"
    f"SUFFIX = '{SUFFIX}'\n"
)
WRONG = PROGRAM.replace("return TABLE[n] +", "return 'zero' +")
TASK = registry.Task(
    problem_id="hide/name", prompt="Return the English name of n.", kind="function", entry_point="name",
    reference_solution=f"def name(n):\n    return ['one', 'two', 'three'][n - 1] + {SUFFIX!r}\n",
    public_tests=[registry.TestCase(args=[1], expected="one" + SUFFIX), registry.TestCase(args=[2], expected="two" + SUFFIX)],
    hidden_tests=[registry.TestCase(args=[3], expected="three" + SUFFIX)],
)  # fmt: skip


def assert_nothing_hidden(text: str) -> None:
    raw = [f"U+{ord(c):04X}" for c in RAW if c in text]
    assert not raw, f"raw {raw} reach the reader"


# --------------------------------------------------------------------------- the function


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x00", "\\x00"), ("\x07", "\\x07"), ("\x08", "\\x08"), ("\x1b[2K", "\\x1b[2K"), ("\r", "\\r"),
        ("\x0b\x0c", "\\x0b\\x0c"), ("\x1f", "\\x1f"), ("\x7f", "\\x7f"), ("\x85", "\\x85"), ("\x9b", "\\x9b"),
        ("\u202a\u202b\u202c\u202d\u202e", "\\u202a\\u202b\\u202c\\u202d\\u202e"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("a\u200bb\u200cc\u200dd", "a\\u200bb\\u200cc\\u200dd"), ("\u2060\ufeff\u00ad", "\\u2060\\ufeff\\xad"),
        ("\U000e0041\U000e007f", "\\U000e0041\\U000e007f"),  # tag characters (ASCII smuggling)
        ("\ud800", "\\ud800"), ("\udfff", "\\udfff"),  # lone surrogates
        ("\u2028\u2029", "\\u2028\\u2029"), ("\ue000\U0010fffd", "\\ue000\\U0010fffd"), ("\U00050000", "\\U00050000"),
        ("\u3164 = 1", "\\u3164 = 1"), ("\u115f\u1160\uffa0\u034f", "\\u115f\\u1160\\uffa0\\u034f"),
        ("a\ufe0f", "a\\ufe0f"), ("\u2764\ufe0f\ufe0f", "\u2764\ufe0f\\ufe0f"), ("x\U000e0100", "x\\U000e0100"),
        ("x\u200dy", "x\\u200dy"),  # a joiner between letters is no emoji
    ],
    ids=["NUL", "BEL", "BS", "ESC", "CR", "VT-FF", "US", "DEL", "NEL", "CSI", "bidi-embed-override",
         "bidi-isolates", "bidi-marks", "zero-width", "joiners-BOM-soft-hyphen", "tags", "high-surrogate",
         "low-surrogate", "line-separators", "private-use", "unassigned", "hangul-filler-name", "fillers",
         "selector-on-letter", "second-selector", "supplementary-selector", "joiner-in-word"],
)  # fmt: skip
def test_visible_escapes_every_hidden_class(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(raw).isprintable() or "\u2764\ufe0f" in raw  # (the kept selector is not "printable")


@pytest.mark.parametrize(
    "text",
    ["plain ASCII: def f(x):\n\treturn x  # ok", "café, naïve, Ærøskøbing", "中文 日本語 한국어 العربية עברית",
     "emoji 👍 🎉 🇫🇷 👍🏽 ❤️ ‼️ 1️⃣", "a ZWJ family 👨\u200d👩\u200d👧 and a flag 🏳️\u200d🌈", "spaces\u00a0\u3000\u2009",
     "replacement \ufffd, math ∑ ≠ ∞, box ┌─┐", ""],
    ids=["ascii-tab-newline", "latin", "cjk-rtl-letters", "emoji", "zwj-sequences", "spaces", "symbols", "empty"],
)  # fmt: skip
def test_visible_leaves_plain_text_unchanged(text: str) -> None:
    assert visible(text) == text


def test_visible_on_one_line_and_its_errors() -> None:
    assert visible("a\nb\tc", keep_newlines=False) == "a\\nb\tc"
    assert visible("\x1b\n", keep_newlines=False) == "\\x1b\\n"
    with pytest.raises(TypeError, match="expected a str, got bytes"):
        visible(b"\x1b")  # type: ignore[arg-type]


# ------------------------------------------------------------------ from the host's side


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str, list[str], np.ndarray]:
    """The program's episodes, run in the real sandbox: the log of its 1.0 episode and of a wrong
    variant's; ``render_lines`` and the ``ansi`` render after the first, ``render_lines`` after
    the wrong one (its failing tests) and its ``rgb_array`` render."""
    d = tmp_path_factory.mktemp("hide")
    env = CodeExecEnv([TASK], log_dir=str(d), render_mode="ansi")
    env.reset(seed=0, options={"problem_id": TASK.problem_id})
    assert env.step(PROGRAM)[1] == 1.0  # it ran, and the table earned the top reward
    lines, text = env.render_lines(), env.render()
    env.reset(seed=1, options={"problem_id": TASK.problem_id})
    assert env.step(WRONG)[1] == 0.0
    wrong = env.render_lines()
    env.close()
    assert isinstance(text, str)
    image_env = CodeExecEnv([TASK], render_mode="rgb_array")
    image_env.reset(seed=0, options={"problem_id": TASK.problem_id})
    image_env.step(WRONG)
    image = image_env.render()
    assert image_env.render_lines() == wrong
    image_env.close()
    assert isinstance(image, np.ndarray)
    return d, lines, text, wrong, image


def test_the_log_keeps_the_raw_characters(episode: tuple[Path, list[str], str, list[str], np.ndarray]) -> None:
    """The machine-readable record is not changed: the escapes are only for people."""
    (f,) = episode[0].glob("*.jsonl")
    rec = json.loads(f.read_text(encoding="utf-8").splitlines()[0])
    assert rec["action"] == PROGRAM
    assert any(UP_ERASE in (run.get("stderr") or "") for run in rec["executions"])


def test_audit_shows_the_hidden_table(episode: tuple[Path, list[str], str, list[str], np.ndarray], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(episode[0])]) == 0
    out = capsys.readouterr().out
    assert_nothing_hidden(out)
    comment = "# " + "\\x1b[1A\\x1b[2K" * 3 + "\\x07nothing to see\\u202e\\u200b\\ufeff"
    assert f"--- code ---\n{TABLE_LINE}\n{comment}\n" in out  # the table, and what would have wiped it
    assert '[0] passed  input 1  got "one\\u001b[1A\\u001b[2K\\u0007\\u202e\\u200b"' in out  # (the verifier's JSON)
    assert "stdout\\x1b[1A\\x1b[2K\\x07\\u202e\\u200b 1" in out  # the prints (a function task's, on stderr)
    assert "stderr\\x1b[1A\\x1b[2K\\u2066\\u200d 1" in out


def test_render_shows_what_the_program_wrote(episode: tuple[Path, list[str], str, list[str], np.ndarray]) -> None:
    _, lines, text, wrong, _ = episode
    for shown in (text, "\n".join(lines), "\n".join(wrong)):
        assert_nothing_hidden(shown)
    assert all("\n" not in line for line in lines + wrong)
    assert text == "\n".join(lines) + "\n"
    assert "  stderr\\x1b[1A\\x1b[2K\\u2066\\u200d 1" in lines and "  stderr\\x1b[1A\\x1b[2K\\u2066\\u200d 1" in wrong
    # a failing test: what was expected and what the program returned, each with its escapes
    got = next(line for line in wrong if line.startswith("test 1 failed"))
    assert got.count("[1A") == 2 and got.count("\\u202e") == 2 and "one" in got and "zero" in got, got


def test_rgb_array_draws_the_escapes(episode: tuple[Path, list[str], str, list[str], np.ndarray]) -> None:
    """The image is ``render_lines`` drawn: each escape as its characters, where a raw ESC would
    be one box and a zero-width space nothing."""
    from code_env._textimage import RED, text_image

    _, _, _, wrong, image = episode
    assert np.array_equal(image, text_image(wrong, [RED]))


def test_run_shows_what_the_program_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prog = tmp_path / "hide.py"
    prog.write_text(PROGRAM + "name(1)\n", encoding="utf-8")
    (tmp_path / "empty").write_text("", encoding="utf-8")
    assert main(["run", str(prog), "--stdin", str(tmp_path / "empty")]) == 0
    out = capsys.readouterr().out
    assert_nothing_hidden(out)
    assert "--- stdout ---\nstdout\\x1b[1A\\x1b[2K\\x07\\u202e\\u200b 1" in out
    assert "--- stderr ---\nstderr\\x1b[1A\\x1b[2K\\u2066\\u200d 1" in out
    assert main(["run", "--json", str(prog), "--stdin", str(tmp_path / "empty")]) == 0  # the machine-readable form keeps the text as it was
    assert json.loads(capsys.readouterr().out)["stdout"] == f"stdout{UP_ERASE}{BEL}{RLO}{ZWSP} 1\n"


def test_trace_and_stats_of_a_task_whose_id_hides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task set is data too: an id with a bidi override and a zero-width space shows escaped."""
    task = TASK.model_copy(update={"problem_id": f"hide/{RLO}eman{ZWSP}"})
    env = CodeExecEnv([task], log_dir=str(tmp_path))
    env.reset(seed=0, options={"problem_id": task.problem_id})
    trace_id = env.step(PROGRAM)[4]["trace_id"]
    env.close()
    assert main(["trace", str(tmp_path), trace_id]) == 0
    out = capsys.readouterr().out
    assert_nothing_hidden(out)
    assert out.count("hide/\\u202eeman\\u200b/0/0") >= 2  # the step and its runs
    assert main(["stats", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert_nothing_hidden(out)
    assert "hide/\\u202eeman\\u200b" in out


def test_an_error_line_shows_what_is_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(tmp_path / f"no{ESC}[2Klog{RLO}")]) == 2
    err = capsys.readouterr().err
    assert_nothing_hidden(err)
    assert "no\\x1b[2Klog\\u202e" in err and err.count("\n") == 1



def test_tasks_list_and_show_of_a_task_set_that_hides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = TASK.model_copy(update={"problem_id": f"hide/{RLO}eman{ZWSP}", "prompt": f"Return{UP_ERASE} the name.{BEL}"})
    path = tmp_path / "hide.jsonl"
    path.write_text(task.model_dump_json() + "\n", encoding="utf-8")
    assert main(["tasks", "list", "--set", str(path)]) == 0
    out = capsys.readouterr().out
    assert_nothing_hidden(out)
    assert "  hide/\\u202eeman\\u200b " in out
    assert main(["tasks", "show", task.problem_id, "--set", str(path)]) == 0
    out = capsys.readouterr().out
    assert_nothing_hidden(out)
    assert '"problem_id": "hide/\\u202eeman\\u200b"' in out and "Return\\u001b[1A\\u001b[2K the name.\\u0007" in out
    assert "\"hidden_tests\": \"1 (not shown)\"" in out


def test_replay_summary_keeps_each_difference_on_its_line() -> None:
    """A logged trace id (a task's id) with a newline and an ESC cannot forge or erase a line."""
    from code_env.logtools import Difference, ReplayReport

    report = ReplayReport(episodes=1, steps=1)
    report.differences.append(Difference(f"hide/a\nDIFF none{ESC}[2K{RLO}/0/0/0", "log.jsonl:1", 1.0, 0.8, "all_tests", "all_public"))
    text = report.summary()
    assert_nothing_hidden(text)
    assert len(text.splitlines()) == 2 and "DIFF hide/a\\nDIFF none\\x1b[2K\\u202e/0/0/0 (log.jsonl:1)" in text
