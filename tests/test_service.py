"""``code-env serve``: a real uvicorn server on a loopback port, real HTTP clients (``requests``,
and verl's own SandboxFusion client code, loaded from verl's wheel), the real sandbox behind.
SandboxFusion's ``/run_code`` field for field and verl's reading of it; the ``/v1`` API (batches
in order, grading by task id with the hidden tests kept on the server); the guards (token, sizes,
the bounded queue, a client that goes away); ``/metrics``; the async API under it; the command
itself, SIGTERM included."""

from __future__ import annotations

import asyncio
import base64
import glob
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
import uvicorn

import registry
from code_env import agrade_many
from code_env.service import ServiceLimits, create_app, fusion_response, wait_ready
from sandbox import ExecutionResult, Sandbox
from sandbox.languages import discover_cached

from .conftest import REPO, get_sandbox

pytestmark = pytest.mark.slow

EVENS = registry.resolve("builtin/sum-of-evens")
FIZZ = registry.resolve("builtin/fizzbuzz-line")


class Server:
    """The app on uvicorn in a thread, on a free loopback port."""

    def __init__(self, app: Any) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def serve(sb: Sandbox, **kw: Any) -> Iterator[Server]:
    server = Server(create_app(sb, **kw))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    yield from serve(get_sandbox("process"))


def post(srv: Server, path: str, body: Any, **kw: Any) -> requests.Response:
    return requests.post(srv.url + path, json=body, timeout=kw.pop("timeout", 60), **kw)


# --------------------------------------------------------------------------- SandboxFusion's API


def test_run_code_answers_as_sandboxfusion_does(srv: Server) -> None:
    r = post(srv, "/run_code", {"code": "import sys\nprint(input()[::-1])\nprint('e', file=sys.stderr)", "language": "python",
                                "stdin": "abc\n", "run_timeout": 5, "compile_timeout": 5, "memory_limit_MB": 256,
                                "files": {}, "fetch_files": []})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "Success" and body["message"] == "" and body["compile_result"] is None and body["files"] == {}
    run = body["run_result"]
    assert (run["status"], run["return_code"], run["stdout"], run["stderr"]) == ("Finished", 0, "cba\n", "e\n")
    assert 0 < run["execution_time"] < 5  # seconds, as SandboxFusion gives it
    failed = post(srv, "/run_code", {"code": "raise SystemExit(3)", "language": "python"}).json()
    assert (failed["status"], failed["run_result"]["status"], failed["run_result"]["return_code"]) == ("Failed", "Finished", 3)
    slow = post(srv, "/run_code", {"code": "while True: pass", "language": "python", "run_timeout": 0.5}).json()
    assert (slow["status"], slow["run_result"]["status"]) == ("Failed", "TimeLimitExceeded")


@pytest.mark.skipif(not discover_cached("cpp").found, reason="no C++ toolchain")
def test_run_code_has_the_compile_phase_of_a_compiled_language(srv: Server) -> None:
    ok = post(srv, "/run_code", {"code": "#include <cstdio>\nint main() { puts(\"hi\"); }\n", "language": "cpp"}).json()
    assert ok["status"] == "Success" and ok["compile_result"]["status"] == "Finished" and ok["compile_result"]["return_code"] == 0
    assert ok["run_result"]["stdout"] == "hi\n"
    bad = post(srv, "/run_code", {"code": "int main( {", "language": "cpp"}).json()
    assert (bad["status"], bad["compile_result"]["status"], bad["run_result"]) == ("Failed", "Finished", None)
    assert bad["compile_result"]["return_code"] != 0 and "main.cpp:1" in bad["compile_result"]["stderr"]


def test_an_unknown_language_is_a_4xx_with_the_list_not_a_sandbox_error(srv: Server) -> None:
    for name in ("php", "cobol"):
        r = post(srv, "/run_code", {"code": "x", "language": name})
        assert r.status_code == 400, r.text
        assert f"unknown language {name!r}" in r.json()["detail"] and "python" in r.json()["detail"]
    if discover_cached("javascript").found:  # SandboxFusion's name for Node.js
        assert post(srv, "/run_code", {"code": "console.log(1+1)", "language": "nodejs"}).json()["run_result"]["stdout"] == "2\n"


def test_run_code_carries_files_in_and_out(srv: Server) -> None:
    """SandboxFusion's ``files`` (base64, written to the run's work dir) and ``fetch_files`` (the
    files the run left, base64 in the answer's ``files``); a path outside the work dir is a 422."""
    code = ("import os\nprint(open('data/a.txt').read())\nos.mkdir('res')\n"
            "open('res/out.bin', 'wb').write(bytes([0, 255]))\nos.symlink('/etc/passwd', 'res/link')")  # fmt: skip
    body = post(srv, "/run_code", {"code": code, "language": "python",
                                   "files": {"data/a.txt": base64.b64encode(b"hi").decode()},
                                   "fetch_files": ["res", "data/a.txt", "nothing"]}).json()  # fmt: skip
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "hi\n", body
    assert {k: base64.b64decode(v) for k, v in body["files"].items()} == {"res/out.bin": b"\0\xff", "data/a.txt": b"hi"}
    for bad, why in (({"files": {"a.txt": "!!"}}, "not base64"), ({"files": {"../a": "aGk="}}, "'..'"),
                     ({"fetch_files": ["/etc/passwd"]}, "relative path"), ({"files": {"solution.py": ""}}, "own file")):  # fmt: skip
        r = post(srv, "/run_code", {"code": "print(1)", "language": "python", **bad})
        assert r.status_code == 422 and why in r.json()["detail"], r.text
    runs = post(srv, "/v1/run_many", {"requests": [{"code": "print(open('x').read())", "files": {"x": "aGk="},
                                                    "fetch_files": ["x"]}]}).json()["results"]  # fmt: skip
    assert runs[0]["stdout"] == "hi\n" and runs[0]["files"] == {"x": "aGk="}  # our API: base64 both ways
    for bad, why in (({"fetch_files": "x"}, "expected a list"), ({"files": {"x": "!!"}}, "not base64")):
        r = post(srv, "/v1/run_many", {"requests": [{"code": "print(1)", **bad}]})
        assert r.status_code == 422 and why in r.json()["detail"], r.text


def test_our_failure_is_a_sandbox_error_never_the_programs() -> None:
    res = fusion_response(ExecutionResult.infrastructure_failure("worker lost", trace_id="t", backend="process"))
    assert (res.status, res.message, res.run_result) == ("SandboxError", "worker lost", None)
    killed = fusion_response(ExecutionResult(trace_id="t", backend="process", signal=9, oom=True))
    assert (killed.status, killed.message, killed.run_result and killed.run_result.return_code) == ("Failed", "out of memory", -9)


def verl_sandbox_fusion(tmp: Path) -> ModuleType:
    """verl's own ``verl.utils.reward_score.sandbox_fusion`` (its client: requests and the
    standard library), loaded from verl's wheel without the rest of verl (which needs torch, Ray
    and another transformers)."""
    wheels = glob.glob(str(REPO / ".venv" / "wheels" / "verl-*.whl"))
    if not wheels:
        pytest.skip("verl's wheel is not in .venv/wheels (scripts/bootstrap.sh fetches it)")
    prefix = "verl/utils/reward_score/sandbox_fusion/"
    with zipfile.ZipFile(wheels[0]) as zf:
        for name in zf.namelist():
            if name.startswith(prefix) and name.endswith(".py"):
                (tmp / "verl_sandbox_fusion").mkdir(exist_ok=True)
                (tmp / "verl_sandbox_fusion" / name[len(prefix):]).write_bytes(zf.read(name))
    spec = importlib.util.spec_from_file_location("verl_sandbox_fusion", tmp / "verl_sandbox_fusion" / "__init__.py",
                                                  submodule_search_locations=[str(tmp / "verl_sandbox_fusion")])  # fmt: skip
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verl_sandbox_fusion"] = module
    spec.loader.exec_module(module)
    return module


def test_verls_own_client_scores_rows_against_the_service(srv: Server, tmp_path: Path) -> None:
    verl = verl_sandbox_fusion(tmp_path)
    url = srv.url + "/run_code"
    in_outs = {"inputs": [c.stdin for c in FIZZ.public_tests], "outputs": [c.expected_stdout for c in FIZZ.public_tests]}
    results, _ = verl.utils.check_correctness(url, in_outs, FIZZ.reference_solution, timeout=10, language="python")
    assert results == [True] * len(in_outs["inputs"])
    wrong, _ = verl.utils.check_correctness(url, in_outs, "print('nope')", timeout=10, language="python")
    assert wrong == [False] * len(in_outs["inputs"])
    # verl's codes: -2 runtime error, -3 timeout, -4 compile error (with a compiled language)
    crash, meta = verl.utils.check_correctness(url, {"inputs": ["1"], "outputs": ["1"]}, "raise ValueError", timeout=5)
    assert crash == [-2] and meta[0]["status"] == "runtime_error"
    slow, meta = verl.utils.check_correctness(url, {"inputs": ["1"], "outputs": ["1"]}, "while True: pass", timeout=1)
    assert slow == [-3] and meta[0]["status"] == "timeout"
    if discover_cached("cpp").found:
        broken, meta = verl.utils.check_correctness(url, {"inputs": ["1"], "outputs": ["1"]}, "int main( {", timeout=10,
                                                    language="cpp")  # fmt: skip
        assert broken == [-4] and meta[0]["status"] == "compile_error"
    # and verl's compute_score: a completion with a code block, the fraction of tests passed
    score, _ = verl.compute_score(url, None, 1024, f"```python\n{FIZZ.reference_solution}```", in_outs)
    assert score == 1.0


# --------------------------------------------------------------------------- our API


def test_v1_run_many_keeps_the_order(srv: Server) -> None:
    body = {"requests": [{"code": f"import time; time.sleep({0.2 if i % 2 else 0}); print({i})"} for i in range(8)]}
    r = post(srv, "/v1/run_many", body)
    assert r.status_code == 200, r.text
    assert [res["stdout"] for res in r.json()["results"]] == [f"{i}\n" for i in range(8)]


def test_v1_grade_by_task_id_keeps_the_hidden_tests_on_the_server(srv: Server) -> None:
    g = post(srv, "/v1/grade", {"problem_id": EVENS.problem_id, "code": EVENS.reference_solution}).json()
    assert (g["reward"], g["breakdown"]["tier"]) == (1.0, "all_tests")
    listed = requests.get(srv.url + "/v1/tasks", params={"task_set": "builtin"}, timeout=30).json()
    row = next(t for t in listed if t["problem_id"] == EVENS.problem_id)
    assert row["hidden_tests"] == len(EVENS.hidden_tests) and row["public_tests"] == len(EVENS.public_tests)
    wrong = post(srv, "/v1/grade", {"problem_id": EVENS.problem_id, "code": "def sum_of_evens(nums):\n    return 0\n"}).text
    everything = json.dumps(listed) + wrong
    for case in EVENS.hidden_tests:  # neither its arguments nor its value leaves the server
        assert json.dumps(case.args)[1:-1] not in everything or case.args in [c.args for c in EVENS.public_tests], case
    many = post(srv, "/v1/grade_many", {"items": [
        {"problem_id": EVENS.problem_id, "code": EVENS.reference_solution},
        {"task": json.loads(FIZZ.model_dump_json()), "code": FIZZ.reference_solution},  # an inline task
        {"problem_id": FIZZ.problem_id, "code": "print('x')", "hidden": False},
    ]}).json()  # fmt: skip
    assert [g["reward"] for g in many["grades"]] == [1.0, 1.0, 0.0]
    missing = post(srv, "/v1/grade", {"problem_id": "builtin/nope", "code": "x"})
    assert missing.status_code == 404 and "no task 'builtin/nope'" in missing.json()["detail"]
    both = post(srv, "/v1/grade", {"code": "x"})
    assert both.status_code == 422 and "give either problem_id" in both.json()["detail"]
    assert requests.get(srv.url + "/v1/tasks", params={"task_set": "nosuchset"}, timeout=30).status_code == 404


def test_health_metrics_and_the_openapi_schema(srv: Server) -> None:
    post(srv, "/run_code", {"code": "print(1)", "language": "python"})
    post(srv, "/run_code", {"code": "while True: pass", "language": "python", "run_timeout": 0.3})
    health = requests.get(srv.url + "/healthz", timeout=10).json()
    assert health["status"] == "ok" and health["workers"] >= 1
    text = requests.get(srv.url + "/metrics", timeout=10).text
    assert "# TYPE code_env_runs_total counter" in text and 'code_env_verdicts_total{verdict="timeout"}' in text
    assert 'code_env_requests_total{endpoint="/run_code",status="200"}' in text and "code_env_queue_depth 0" in text
    schema = requests.get(srv.url + "/openapi.json", timeout=10).json()
    assert {"/run_code", "/v1/run_many", "/v1/grade", "/v1/grade_many", "/v1/tasks"} <= set(schema["paths"])


# --------------------------------------------------------------------------- guards


def test_a_token_is_required_when_one_is_set() -> None:
    for srv in serve(get_sandbox("process"), token="s3cret"):
        assert post(srv, "/run_code", {"code": "print(1)"}).status_code == 401
        assert post(srv, "/run_code", {"code": "print(1)"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = post(srv, "/run_code", {"code": "print(1)"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["status"] == "Success"
        assert requests.get(srv.url + "/healthz", timeout=10).status_code == 200  # (a probe needs none)


def test_sizes_and_the_bounded_queue_are_refused_before_anything_runs() -> None:
    limits = ServiceLimits(max_body_bytes=64 << 10, max_code_bytes=1000, max_batch=3, max_pending_runs=4)
    for srv in serve(get_sandbox("process"), limits=limits):
        r = post(srv, "/run_code", {"code": "#" * 2000})
        assert r.status_code == 413 and "1000 bytes" in r.json()["detail"]
        r = post(srv, "/v1/run_many", {"requests": [{"code": "print(1)"}] * 4})
        assert r.status_code == 413 and "a batch of 4" in r.json()["detail"]
        r = post(srv, "/run_code", {"code": "print(1)", "stdin": "x" * (100 << 10)})
        assert r.status_code == 413
        chunks = (b'{"code": "print(1)", "stdin": "' + b"x" * (16 << 10) if i == 0 else b"x" * (16 << 10) for i in range(8))
        r = requests.post(srv.url + "/run_code", data=chunks, headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status_code == 413, r.text  # sent in chunks, no length said: counted as it comes
        # the queue: 3 slow runs admitted, the next 3 would pass 4: 429 with Retry-After
        slow = threading.Thread(target=post, args=(srv, "/v1/run_many", {"requests": [{"code": "import time; time.sleep(1.5)"}] * 3}))
        slow.start()
        deadline = time.monotonic() + 10
        while "code_env_queue_depth 3" not in requests.get(srv.url + "/metrics", timeout=10).text:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = post(srv, "/v1/run_many", {"requests": [{"code": "print(1)"}] * 2})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1", r.text
        slow.join()
        assert post(srv, "/v1/run_many", {"requests": [{"code": "print(1)"}] * 2}).status_code == 200


def test_a_client_that_goes_away_has_its_runs_withdrawn() -> None:
    sb = Sandbox(workers=1)
    started: list[str] = []
    original = sb._run_checked

    def counting(*args: Any, **kw: Any) -> ExecutionResult:
        started.append(args[3])
        return original(*args, **kw)

    sb._run_checked = counting  # type: ignore[method-assign]
    try:
        for srv in serve(sb):
            batch = {"requests": [{"code": "import time; time.sleep(1)", "trace_id": f"slow/{i}"} for i in range(12)]}
            with pytest.raises(requests.exceptions.ReadTimeout):
                post(srv, "/v1/run_many", batch, timeout=0.8)
            time.sleep(2.5)  # what had begun has ended by now (the rest must never begin)
            n = len(started)
            assert n < 12, started
            ok = post(srv, "/run_code", {"code": "print(7)"}).json()
            assert ok["run_result"]["stdout"] == "7\n" and len(started) == n + 1
    finally:
        sb.close()


# --------------------------------------------------------------------------- the async API


def test_the_async_api_runs_grades_and_withdraws_on_cancel() -> None:
    sb = get_sandbox("process")

    async def main() -> None:
        r = await sb.arun("print(input())", stdin="hi")
        assert r.stdout == "hi\n"
        results = await sb.arun_many([f"print({i})" for i in range(6)])
        assert [x.stdout for x in results] == [f"{i}\n" for i in range(6)]
        grades = await agrade_many([(EVENS, EVENS.reference_solution), (FIZZ, "print('x')")], sandbox=sb)
        assert [g.reward for g in grades] == [1.0, 0.0]
        task = asyncio.ensure_future(sb.arun_many(["import time; time.sleep(1)"] * 10))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await sb.arun("print(2)")).stdout == "2\n"

    asyncio.run(main())


# --------------------------------------------------------------------------- the command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "code_env", "serve", "--port", str(port), "--workers", "2",
                             "--log-level", "warning", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "CODE_ENV_TOKEN": ""})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, alive=lambda: proc.poll() is None)
    return proc, url


def test_serve_finishes_what_runs_on_sigterm_and_takes_nothing_new() -> None:
    proc, url = start()
    try:
        out: dict[str, Any] = {}
        slow = threading.Thread(target=lambda: out.update(
            requests.post(url + "/run_code", json={"code": "import time; time.sleep(2); print('done')"}, timeout=60).json()))
        slow.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        slow.join()
        assert out["status"] == "Success" and out["run_result"]["stdout"] == "done\n"  # it finished
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)  # (uvicorn ends by the signal it caught, once done)
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.post(url + "/run_code", json={"code": "print(1)"}, timeout=5)
    finally:
        proc.kill()
        proc.communicate()


def test_serve_on_another_address_makes_a_token_and_says_it_once() -> None:
    proc, url = start("--host", "0.0.0.0")
    try:
        assert requests.post(url + "/run_code", json={"code": "print(1)"}, timeout=30).status_code == 401
        assert proc.stderr is not None
        line = proc.stderr.readline()  # (said before the server starts)
        token = line.split("Bearer ", 1)[1].split("'", 1)[0]
        assert len(token) >= 32, line
        ok = requests.post(url + "/run_code", json={"code": "print(1)"}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert ok.status_code == 200 and ok.json()["run_result"]["stdout"] == "1\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert token not in err  # shown once
    finally:
        proc.kill()
        proc.communicate()
    help_text = subprocess.run([sys.executable, "-m", "code_env", "serve", "--help"], capture_output=True, text=True,
                               cwd=REPO, check=True).stdout  # fmt: skip
    for flag in ("--host", "--port", "--token", "--max-batch", "--max-pending", "--max-client-requests", "/run_code", "SIGTERM"):
        assert flag in help_text, flag
