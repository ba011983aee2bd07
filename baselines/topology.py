"""GRPO as a real harness runs it: the learner, rollout actors and executors as separate processes,
joined by Redis (``grpo.topology = "redis"``, or ``python -m baselines.grpo --topology redis``).

* **The learner** (the process of ``baselines.grpo.train``) publishes the weights after each
  update (``weights:{v}``, v updates done), takes step s's batch when an actor has published it,
  updates, and watches its children: an actor or an executor that died is started again.
* **Rollout actors** (``python -m baselines.topology actor``, ``grpo.actors`` of them) claim the
  next step to make (``claim:{s}``, a lease they renew while they work; one whose lease ran out,
  its actor dead or stopped, is free for another to take), sample it from the weights after
  update ``max(s - k, 0)`` (k = ``max_staleness``, the async buffer's bound: the actors run up to
  k steps ahead of the learner, and the staleness of every sample, ``s - max(s - k, 0)``, is in
  the curve), judge it through the executors and publish it (``batch:{s}``). A step's batch
  depends only on the seed, its step and those weights, never on which actor made it or when.
* **Executors** (``code-env executor``, ``grpo.executors`` of them, each a sandbox of
  ``executor_workers`` workers) take the programs from the pool's request stream
  (``sandbox.RedisExecutor``: exactly one answer per request, a dead or stalled executor's work
  taken over by its watchdog).

**The same curve as the in-process run.** The thread topology follows the same rule (step s from
the weights after update ``max(s - k, 0)``), and the one thing a batch reads besides its weights —
the (task, program) cache of pairs judged in earlier steps — is made the same: an actor judges
step s only once every earlier step is judged, with those steps' pairs merged into its cache
(``judged:{s}``), exactly the pairs the single rollout thread would have cached by then. Its
sampling, the costly half, does not wait. With the default config and a fixed seed ``curve.csv``
is the in-process run's to the last digit (the timing columns aside, in ``timing.csv``).
With ``grpo.curriculum`` the learner also publishes each step's outcomes (``outcomes:{s}``, kept
for the run) and an actor feeds them, in step order, to its own copy of the curriculum before it
draws: step s from the set after the outcomes of steps <= s - 1 - k, as in the thread topology
(the learner has published those before the weights that let an actor take step s).

The trajectory records of a step are written by the actor that made it, once (``logged:{s}``),
with the advantages the learner's update uses (they depend on the rewards alone). A private
``redis-server`` is started for the run (in its directory, persistence off) unless
``grpo.redis_url`` names one; the run's keys are under ``grpo:{run id}:`` and deleted at its end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from baselines.common import ConfigError, Run, RunConfig, seed_everything
from baselines.grpo import (
    NAME,
    Batch,
    CurriculumDraws,
    GRPOSettings,
    Judge,
    Policy,
    Samples,
    Texts,
    advantages,
    judge_step,
    make_policy,
    outcomes_of,
    sample_step,
)
from code_env.reward import RewardConfig
from code_env.samples import SampleStates, StateMover, Watchdog, sample_of
from code_env.tracing import trace_id
from registry import Task
from sandbox._redis import connect

LEASE_S = float(os.environ.get("CODE_ENV_ACTOR_LEASE_S", "10"))  # an actor's claim on a step, renewed every third of it
WAIT_S = 0.05  # the longest a waiting actor sleeps before it looks again; a wake-up (new weights, a step judged) ends it at once


def _redis(url: str) -> Any:
    """A client that rides out a restart of Redis: each command is tried again (backing off, about
    half a minute in all) while the server cannot be reached."""
    return connect(url, retries=20, backoff_base_s=0.05, backoff_cap_s=2.0, socket_timeout_s=30, health_check_interval=10)


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True)  # tensors and plain containers only


def batch_payload(batch: Batch) -> bytes:
    """A batch as the learner needs it (the tasks by id; no trajectory records: the actor writes them)."""
    s = batch.samples
    texts = s.texts
    return _dumps({
        "tasks": [t.problem_id for t in s.tasks], "programs": list(s.programs), "tokens": s.tokens, "mask": s.mask,
        "old_logp": s.old_logp, "context": tuple(s.context), "temperature": float(s.temperature),
        "texts": None if texts is None else {"prompts": texts.prompts, "replies": texts.replies, "cut": texts.cut,
                                             "lengths": texts.lengths, "timed_out": texts.timed_out},
        "rewards": list(batch.rewards), "passed": list(batch.passed), "public": list(batch.public),
        "unique": int(batch.unique), "judge_s": float(batch.judge_s), "staleness": int(batch.staleness),
    })  # fmt: skip


def batch_from(payload: bytes, by_id: dict[str, Task]) -> Batch:
    d = _loads(payload)
    t = d["texts"]
    texts = None if t is None else Texts(t["prompts"], t["replies"], t["cut"], t["lengths"], t["timed_out"])
    samples = Samples([by_id[p] for p in d["tasks"]], d["programs"], d["tokens"], d["mask"], d["old_logp"],
                      tuple(d["context"]), d["temperature"], texts)  # fmt: skip
    return Batch(samples, d["rewards"], d["passed"], d["public"], d["unique"], d["judge_s"], d["staleness"], verdicts=None)


class Keys:
    """The run's keys in Redis."""

    def __init__(self, run_id: str) -> None:
        self.prefix = f"grpo:{run_id}:"

    def __getattr__(self, name: str) -> str:
        return self.prefix + name

    def of(self, name: str, n: int) -> str:
        return f"{self.prefix}{name}:{n}"


def sample_key(problem_id: str, n: int) -> str:
    """A sample's id among the run's sample states: its trace key (``problem_id/n/0``)."""
    return sample_of(trace_id(problem_id, n))


def wake(pipe: Any, keys: Keys, actors: int) -> None:
    """Wake the waiting actors (one token each; the list kept short: a token nobody took only
    makes an actor look once more)."""
    pipe.rpush(keys.wake, *["1"] * actors)
    pipe.ltrim(keys.wake, 0, 2 * actors - 1)


# ------------------------------------------------------------------------------------ learner


class RedisSource:
    """The learner's side of the topology (``baselines.grpo.BatchSource``): starts Redis if
    needed, the executors and the actors; publishes weights; takes batches; restarts a child
    that died; stops and cleans everything at ``close``."""

    def __init__(self, cfg: RunConfig, run: Run, policy: Policy, pool: Sequence[Task], *, steps: int, staleness: int) -> None:
        algo: Any = cfg.algo  # (GRPOSettings; of baselines.grpo run as __main__ too: not this module's class)
        if algo.model is not None:
            raise ConfigError("grpo.topology = 'redis' runs the GRU policy (its samples travel between processes as "
                             "tensors); the LM policy (--model) runs in the thread topology")  # fmt: skip
        self.algo, self.steps, self.k = algo, steps, staleness
        self.by_id = {t.problem_id: t for t in pool}
        self.run_id = uuid.uuid4().hex[:12]
        self.keys = Keys(self.run_id)
        self.pool_name = f"grpo-{self.run_id}"
        self.dir = run.path / "topology"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.server: subprocess.Popen[bytes] | None = None
        self.url = algo.redis_url or self._start_redis()
        self.r = _redis(self.url)
        self.restarts = {"actor": 0, "executor": 0}
        self.children: dict[str, tuple[list[str], subprocess.Popen[bytes]]] = {}
        # where to look while it runs: code-env samples --redis URL --run RUN_ID
        (self.dir / "redis.json").write_text(json.dumps({"url": self.url, "run": self.run_id, "pool": self.pool_name}) + "\n")
        self.config = json.dumps({
            "cfg": cfg.as_dict(), "run_dir": str(run.path), "steps": steps, "staleness": staleness, "pool": self.pool_name,
            "url": self.url})  # fmt: skip
        self.r.set(self.keys.config, self.config)
        # what a Redis that lost its data (a restart without persistence) needs again: the weights
        # the steps to come sample from, and every judged step's pairs (the actors' caches)
        self.weights: dict[int, bytes] = {}
        self.judged: dict[int, bytes] = {}
        self.outcomes: dict[int, bytes] = {}  # grpo.curriculum: each step's outcomes, for the actors' draws
        self.version = 0
        self.republished = 0
        self.published(0, policy)
        # each sample's state (code_env.samples): the actors start and queue them, the executors run
        # them, this learner judges them; the watchdog ends any that stays past its state's deadline
        self.states = SampleStates(self.url, run=self.run_id)
        self.watchdog = Watchdog(self.states, interval_s=1.0)
        self.watchdog.start()
        self.mover = StateMover(self.states)
        for i in range(algo.executors):
            self._spawn(f"executor-{i}", [sys.executable, "-m", "code_env", "executor", "--redis", self.url,
                                          "--pool", self.pool_name, "--backend", cfg.env.backend,
                                          "--workers", str(algo.executor_workers), "--samples-run", self.run_id])  # fmt: skip
        for i in range(algo.actors):
            self._spawn(f"actor-{i}", [sys.executable, "-m", "baselines.topology", "actor", "--redis", self.url,
                                       "--run", self.run_id, "--name", f"actor-{i}"])  # fmt: skip

    def _start_redis(self) -> str:
        import shutil
        import socket

        exe = shutil.which("redis-server")
        if exe is None:
            raise ConfigError("grpo.topology = 'redis' needs a redis-server: install Debian's (scripts/bootstrap.sh does, "
                             "as root) or give grpo.redis_url")  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.server = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.dir),
             "--logfile", str(self.dir / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 20
        while True:
            try:
                if _redis(url).ping():
                    return url
            except Exception:
                if self.server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start (see {self.dir / 'redis.log'})") from None
                time.sleep(0.05)

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.children[name] = (argv, proc)

    def check_children(self) -> None:
        """Start again every child that died (counted in ``restarts``)."""
        for name, (argv, proc) in list(self.children.items()):
            if proc.poll() is not None:
                self.restarts[name.split("-")[0]] += 1
                self._spawn(name, argv)

    def get(self, step: int) -> Batch:
        key = self.keys.of("batch", step)
        while True:
            data = self.r.get(key)
            if data is None and not self.r.exists(self.keys.config):
                self.republish()
                continue
            if data is not None:
                judged = self.r.get(self.keys.of("judged", step))
                if judged is not None:
                    self.judged[step] = judged
                batch = batch_from(data, self.by_id)
                if self.algo.curriculum:
                    self.outcomes[step] = json.dumps(outcomes_of(batch)).encode()
                    self.r.set(self.keys.of("outcomes", step), self.outcomes[step])
                n0 = step * len(batch.rewards)
                self.mover.put([(sample_key(t.problem_id, n0 + i), "judged", "learner")
                                for i, t in enumerate(batch.samples.tasks)])  # fmt: skip
                return batch
            self.check_children()
            self.r.blpop([self.keys.of("ready", step)], timeout=0.2)

    def republish(self) -> None:
        """Redis lost the run's keys (restarted without persistence): put back what the actors need
        to go on (the config, the weights of the steps to come, every judged step's pairs); the
        batches in flight and their claims are gone, so those steps are made again (the same
        batches: they depend only on the seed, the step and the weights)."""
        pipe = self.r.pipeline()
        pipe.set(self.keys.config, self.config)
        for v, data in self.weights.items():
            pipe.set(self.keys.of("weights", v), data)
        for s, data in self.judged.items():
            pipe.set(self.keys.of("judged", s), data)
        for s, data in self.outcomes.items():
            pipe.set(self.keys.of("outcomes", s), data)
        pipe.set(self.keys.version, self.version)
        pipe.set(self.keys.consumed, self.version)
        wake(pipe, self.keys, self.algo.actors)
        pipe.execute()
        self.republished += 1
        print(f"redis lost the run's keys: republished the weights of versions {sorted(self.weights)} and "
              f"{len(self.judged)} judged steps", file=sys.stderr, flush=True)

    def published(self, version: int, policy: Policy) -> None:
        data = _dumps(policy.module.state_dict())
        self.weights[version] = data
        for v in [v for v in self.weights if v < version - self.k - 1]:
            del self.weights[v]
        self.version = version
        pipe = self.r.pipeline()
        pipe.set(self.keys.of("weights", version), data)
        pipe.set(self.keys.version, version)
        pipe.set(self.keys.consumed, version)  # the steps before `version` are the learner's
        if version >= 1:
            pipe.delete(self.keys.of("batch", version - 1), self.keys.of("ready", version - 1))
        old = version - self.k - 2
        if old >= 0:
            pipe.delete(self.keys.of("weights", old))
        wake(pipe, self.keys, self.algo.actors)
        pipe.execute()

    def close(self) -> None:
        self.mover.close()
        self.watchdog.stop()
        try:
            self.r.set(self.keys.stop, 1)
        except Exception:
            pass
        deadline = time.monotonic() + 10
        for name, (_, proc) in self.children.items():
            if name.startswith("actor"):
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for _, proc in self.children.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.children.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        try:
            keys = list(self.r.scan_iter(match=self.keys.prefix + "*", count=1000))
            if keys:
                self.r.delete(*keys)
            self.r.close()
        except Exception:
            pass
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=15)


# ------------------------------------------------------------------------------------- actor


class Actor:
    """One rollout actor (see the module)."""

    def __init__(self, url: str, run_id: str, name: str) -> None:
        from sandbox import RedisExecutor

        self.r = _redis(url)
        self.keys = Keys(run_id)
        raw = self.r.get(self.keys.config)
        if raw is None:
            raise SystemExit(f"no run {run_id!r} on {url}")
        conf = json.loads(raw)
        from baselines.common import EnvSettings

        d = conf["cfg"]
        self.cfg = RunConfig(algo_name=NAME, env=EnvSettings(**d["env"]), reward=RewardConfig(**d["reward"]),
                             algo=GRPOSettings(**d[NAME]))  # fmt: skip
        self.algo: GRPOSettings = self.cfg.algo  # type: ignore[assignment]
        self.steps, self.k, self.name = int(conf["steps"]), int(conf["staleness"]), name
        seed_everything(self.algo.seed, threads=self.algo.threads)
        self.pool = self.cfg.env.train_tasks()
        self.batch_size = min(self.algo.prompts_per_step, len(self.pool)) * self.algo.group_size
        self.policy = make_policy(self.cfg)
        self.version = -1
        self.executor = RedisExecutor(conf["url"], pool=conf["pool"])
        env = self.cfg.env
        self.judge = Judge(self.executor, self.cfg.reward, self.algo.cache, Path(conf["run_dir"]) / "trajectories" / "train",
                           env.log_every, log_max_bytes=env.log_max_bytes, log_text_bytes=env.log_text_bytes)  # fmt: skip
        self.merged = 0  # the steps whose judged pairs are in this actor's cache
        self.draws = CurriculumDraws(self.pool, self.algo, self.k) if self.algo.curriculum else None
        self.mover = StateMover(SampleStates(conf["url"], run=run_id))

    def stopped(self) -> bool:
        return bool(self.r.exists(self.keys.stop))

    def loop(self) -> None:
        while not self.stopped():
            step = self.pick()
            if step is None:
                self.sleep()
                continue
            self.make(step)
        self.mover.close()
        self.executor.close()
        self.judge.close()

    def pick(self) -> int | None:
        """The first step not made, not claimed and whose weights exist; claimed."""
        consumed, version_raw = self.r.mget([self.keys.consumed, self.keys.version])
        if version_raw is None:  # nothing published yet, or Redis lost it: the learner puts it back
            return None
        consumed, version = int(consumed or 0), int(version_raw)
        for s in range(consumed, min(self.steps, version + self.k + 1)):
            if self.r.exists(self.keys.of("batch", s)):
                continue
            if self.r.set(self.keys.of("claim", s), self.name, nx=True, px=int(LEASE_S * 1000)):
                return s
        return None

    def make(self, step: int) -> None:
        """Make step ``step``'s batch under a renewed claim, publish it and write its records."""
        claim = self.keys.of("claim", step)
        done = threading.Event()

        def renew() -> None:
            while not done.wait(LEASE_S / 3):
                self.r.pexpire(claim, int(LEASE_S * 1000))

        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        try:
            self.load(max(step - self.k, 0))
            n0 = step * self.batch_size
            drawn = sample_step(self.policy, self.tasks_for(step), self.algo, step, self.algo.threads,
                                drawing=lambda tasks: self.mover.start([trace_id(t.problem_id, n0 + i) for i, t in enumerate(tasks)]))  # fmt: skip
            self.catch_up(step)  # every earlier step judged, its pairs in the cache
            self.queue(drawn.samples.tasks, drawn.samples.programs, n0)
            self.judge.samples = n0
            before = len(self.judge.cache or {})
            batch = judge_step(self.judge, drawn)
            batch.staleness = step - max(step - self.k, 0)
            pipe = self.r.pipeline()
            pipe.set(self.keys.of("judged", step), self.new_pairs(before))
            pipe.set(self.keys.of("batch", step), batch_payload(batch))
            pipe.rpush(self.keys.of("ready", step), 1)
            wake(pipe, self.keys, self.algo.actors)
            pipe.execute()
            self.merged = max(self.merged, step + 1)
            if batch.verdicts is not None and self.r.set(self.keys.of("logged", step), self.name, nx=True):
                self.judge.write(batch.verdicts, step + 1, *advantages(batch.rewards, self.algo.group_size, self.algo.adv_eps))
        finally:
            done.set()
            renewer.join()
            self.r.delete(claim)

    def tasks_for(self, step: int) -> Sequence[Task]:
        """The tasks step ``step`` draws from: the pool, or (``grpo.curriculum``) the curriculum's
        set after the learner's published outcomes of steps <= step - 1 - k, fed in step order."""
        if self.draws is None:
            return self.pool
        while self.draws.observed < step - self.k:
            j = self.draws.observed
            data = self.r.get(self.keys.of("outcomes", j))
            if data is None:
                self.sleep()
                continue
            self.draws.record(j, [(pid, bool(ok)) for pid, ok in json.loads(data)])
        return self.draws.tasks_for(step)

    def sleep(self) -> None:
        """Wait for a wake-up (new weights, a step judged), at most ``WAIT_S``."""
        self.r.blpop([self.keys.wake], timeout=WAIT_S)

    def queue(self, tasks: Sequence[Task], programs: Sequence[str], n0: int) -> None:
        """Move the step's samples on from ``generating``: those the executors will run (the first
        of each pair not judged before) to ``queued_for_execution``, the rest (a pair of an earlier
        step, a duplicate in the batch) straight to ``executed_with_result``; before the judge
        sends anything, so that the executors find them queued."""
        seen: set[tuple[str, str]] = set(self.judge.cache or {})
        moves = []
        for i, (t, p) in enumerate(zip(tasks, programs, strict=True)):
            runs = (t.problem_id, p) not in seen
            seen.add((t.problem_id, p))
            moves.append((sample_key(t.problem_id, n0 + i), "queued_for_execution" if runs else "executed_with_result", "actor"))
        self.mover.put(moves)
        self.mover.flush()

    def load(self, version: int) -> None:
        if version == self.version:
            return
        while (data := self.r.get(self.keys.of("weights", version))) is None:
            self.sleep()
        self.policy.module.load_state_dict(_loads(data))
        self.version = version

    def catch_up(self, step: int) -> None:
        """Merge the judged pairs of every step before ``step`` into the cache, in step order;
        a step nobody makes (its actor died: no claim, no batch) is made here first."""
        if self.judge.cache is None:
            return
        while self.merged < step:
            j = self.merged
            data = self.r.get(self.keys.of("judged", j))
            if data is not None:
                self.merge(data)
                self.merged = j + 1
                continue
            if not self.r.exists(self.keys.of("claim", j)) and self.r.set(self.keys.of("claim", j), self.name, nx=True,
                                                                          px=int(LEASE_S * 1000)):  # fmt: skip
                self.make(j)
                continue
            self.sleep()

    def new_pairs(self, before: int) -> bytes:
        cache = self.judge.cache or {}
        rows = []
        for (pid, prog), (reward, tier) in list(cache.items())[before:]:
            graded = self.judge._graded.get((pid, prog))
            rows.append([pid, prog, reward, tier, None if graded is None else [graded[0].model_dump_json(), graded[1]]])
        return zlib.compress(json.dumps(rows).encode())

    def merge(self, data: bytes) -> None:
        from code_env.grading import Grade

        assert self.judge.cache is not None
        for pid, prog, reward, tier, graded in json.loads(zlib.decompress(data)):
            key = (pid, prog)
            if key in self.judge.cache:
                continue
            self.judge.cache[key] = (reward, tier)
            if graded is not None and self.judge.logger is not None:
                self.judge._graded[key] = (Grade.model_validate_json(graded[0]), graded[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.topology", description="a GRPO rollout actor")
    sub = parser.add_subparsers(dest="role", required=True)
    a = sub.add_parser("actor", help="make the run's batches (see baselines/topology.py)")
    a.add_argument("--redis", required=True, metavar="URL")
    a.add_argument("--run", required=True, metavar="ID")
    a.add_argument("--name", default=f"actor-{os.getpid()}")
    args = parser.parse_args(argv)
    Actor(args.redis, args.run, args.name).loop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
