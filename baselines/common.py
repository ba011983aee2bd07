"""What every baseline shares: its configuration on disk, its seeds, and its run directory.

A run is configured by three files (defaults in ``baselines/configs/``):

* ``env.json``: the tasks (set, difficulty, pool sizes and seeds, the held-out pool), turns,
  budgets, number of envs, the env seed and the sandbox (``EnvSettings``);
* ``reward.json``: the reward ladder, ``code_env.RewardConfig`` (judge off by default);
* ``<algo>.toml``: the algorithm's own settings (a pydantic model of the baseline's script).

Any field can be overridden from the command line: ``--set ppo.learning_rate=1e-4``,
``--set env.n_envs=4``, ``--set reward.timeout=-0.25`` (the value is read as JSON, else as a
string). An unknown section or key is an error that names it.

A run writes only into its directory (``runs/<name>-<YYYYmmdd-HHMMSS>/`` unless ``--out``):
``config.json`` (the resolved configs), ``meta.json`` (seed, command, package versions, git
commit), ``curve.csv`` (the learning curve: deterministic columns only, so that the same config
and seed give the same file to the last digit), ``timing.csv`` (wall-clock columns: throughput,
waiting), ``tb/`` (TensorBoard events of both), ``trajectories/`` (the environment's JSONL logs),
``checkpoints/``, ``summary.json`` and ``curve.png``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import math
import platform
import random
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from baselines import determinism
from code_env._errors import first_error
from code_env._visible import visible
from code_env.reward import RewardConfig

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
RUNS_ROOT = Path("runs")
A = TypeVar("A", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file or override that cannot be used: names the file (or ``--set``) and the key."""


class EnvSettings(BaseModel):
    """``env.json``: which tasks a baseline trains and is evaluated on, and how its envs run them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_set: str = Field("synthetic:arith", description="the training task set (a registry name)")
    difficulty: int | None = Field(1, ge=1, le=5, description="difficulty of generated training tasks (None: 1-5 in turn)")
    n_tasks: int = Field(2000, ge=1, le=100_000, description="size of the training pool")
    task_seed: int = Field(0, description="generator seed of the training pool")
    eval_task_seed: int = Field(10_000, description="generator seed of the held-out pool (never used for training)")
    n_eval_tasks: int = Field(200, ge=1, le=100_000, description="size of the held-out pool")
    eval_difficulty: int | None = Field(1, ge=1, le=5, description="difficulty of the held-out tasks")
    max_tokens: int = Field(16, ge=1, le=1024, description="length budget of a token-level program (CodeExecTokens-v0)")
    max_turns: int = Field(1, ge=1, le=1000, description="turns per episode (CodeExec-v0)")
    n_envs: int = Field(8, ge=1, le=1024, description="parallel environments; sub-env i is seeded seed + i")
    seed: int = Field(0, description="seed of the environments' resets (sub-env i: seed + i)")
    sampling: Literal["uniform", "difficulty", "curriculum"] = Field("uniform", description="task sampling (CodeExec-v0)")
    backend: str = Field("auto", description="sandbox backend: auto, process or nsjail")
    executor: Literal["local", "ray"] = Field(
        "local", description="where programs run: the local sandbox, or a Ray cluster (sandbox.RayExecutor)")
    ray_address: str | None = Field(
        None, description="with executor 'ray': the cluster's address (None: $RAY_ADDRESS, else a local Ray instance)")
    log_every: int = Field(100, ge=1, description="write the trajectory of every N-th episode")
    log_max_bytes: int = Field(1 << 30, ge=16 << 10, description="cap of each trajectory directory's logs, bytes (the oldest parts are deleted past it)")
    log_text_bytes: int = Field(4096, ge=64, description="bytes kept of each long text of a run in a trajectory record (head and tail)")

    def train_tasks(self) -> list[Any]:
        import registry

        return registry.load(self.task_set, **_generated(self.task_set, self.n_tasks, self.task_seed, self.difficulty))

    def eval_tasks(self) -> list[Any]:
        import registry

        return registry.load(self.task_set, **_generated(self.task_set, self.n_eval_tasks, self.eval_task_seed,
                                                         self.eval_difficulty))  # fmt: skip

    def runner(self) -> Any:
        """Where this config's programs run: ``executor`` (local or ray, with ``backend`` and
        ``ray_address``) as ``code_env.grading.resolve_executor`` makes it."""
        from code_env.grading import resolve_executor

        return resolve_executor(self.executor, backend=self.backend, ray_address=self.ray_address)


def _generated(task_set: str, n: int, seed: int, difficulty: int | None) -> dict[str, Any]:
    """``registry.load``'s parameters for ``task_set``: a generated set takes the size, seed and
    difficulty; a mix (``mix:...``) the size and seed (each set in it keeps its own difficulties),
    which must come from here, not from the name (else the held-out pool would be drawn with the
    training seed); a fixed set none."""
    if task_set.startswith("synthetic:"):
        return {"n": n, "seed": seed, "difficulty": difficulty}
    if task_set.startswith("mix:"):
        import registry

        spec = registry.parse_mix(task_set)
        named = [k for k in ("n", "seed") if getattr(spec, k) is not None]
        if named:
            raise ConfigError(f"env.task_set {task_set!r}: give the size and seed as n_tasks/task_seed and "
                              f"n_eval_tasks/eval_task_seed, not as {', '.join(named)} in the mix")  # fmt: skip
        return {"n": n, "seed": seed}
    return {}


class RunConfig(BaseModel):
    """The three resolved configs of a run."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    algo_name: str
    env: EnvSettings
    reward: RewardConfig
    algo: BaseModel

    def as_dict(self) -> dict[str, Any]:
        return {"env": self.env.model_dump(mode="json"), "reward": self.reward.model_dump(mode="json"),
                self.algo_name: self.algo.model_dump(mode="json")}  # fmt: skip


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of settings, got {type(data).__name__}")
    return data


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word: a string


def parse_overrides(overrides: Sequence[str], sections: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["ppo.learning_rate=1e-4", ...]`` -> ``{"ppo": {"learning_rate": 1e-4}}``."""
    out: dict[str, dict[str, Any]] = {s: {} for s in sections}
    for item in overrides:
        key, eq, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not eq or not dot or not name:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. {sections[-1]}.seed=1")
        if section not in out:
            raise ConfigError(f"--set {item!r}: unknown section {section!r} (known: {', '.join(sections)})")
        out[section][name] = _value(raw.strip())
    return out


def validate_section(model: type[A], data: dict[str, Any], where: str, section: str) -> A:
    """``data`` as ``model``, else a ``ConfigError`` naming ``where`` and ``section.key``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in (section, *err["loc"]))
        known = ", ".join(model.model_fields)
        hint = f" (known keys: {known})" if err["type"] == "extra_forbidden" else ""
        text = first_error(exc)
        msg = "unknown key" if err["type"] == "extra_forbidden" else (text.split(": ", 1)[-1] if err["loc"] else text)
        raise ConfigError(f"{where}: {key}: {msg}{hint}") from None


def load_config(algo_name: str, algo_model: type[BaseModel], *, config_dir: str | Path | None = None,
                overrides: Sequence[str] = (), files: Mapping[str, str | Path] | None = None) -> RunConfig:  # fmt: skip
    """Read ``env.json``, ``reward.json`` and ``<algo_name>.toml`` from ``config_dir`` (default:
    the shipped ``baselines/configs``; a file missing there falls back to the shipped one), or
    the paths in ``files`` (keys ``env``, ``reward``, ``algo``), then apply ``--set`` overrides."""
    root = Path(config_dir) if config_dir is not None else CONFIG_DIR
    if config_dir is not None and not root.is_dir():
        raise ConfigError(f"--config-dir {root}: not a directory")
    names = {"env": "env.json", "reward": "reward.json", "algo": f"{algo_name}.toml"}
    paths = {k: Path((files or {}).get(k) or (root / n if (root / n).exists() else CONFIG_DIR / n)) for k, n in names.items()}
    over = parse_overrides(overrides, ["env", "reward", algo_name])
    raw = {k: _read(p) for k, p in paths.items()}
    # the algorithm's file may hold [env] and [reward] tables: what this algorithm needs differently
    # from env.json and reward.json (precedence: env.json < [env] of <algo>.toml < --set)
    own = {section: raw["algo"].pop(section, {}) for section in ("env", "reward")}
    for section, table in own.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{paths['algo']}: [{section}] must be a table of {section} settings")
    algo_data = raw["algo"][algo_name] if isinstance(raw["algo"].get(algo_name), dict) else raw["algo"]  # [ppo] or top level
    merged = {"env": {**raw["env"], **own["env"], **over["env"]}, "reward": {**raw["reward"], **own["reward"], **over["reward"]},
              "algo": {**algo_data, **over[algo_name]}}  # fmt: skip

    def where(k: str, section: str) -> str:
        return f"{paths[k]}" + (f" or [{section}] of {paths['algo']}" if own.get(section) else "") + (" (with --set)" if over[section] else "")

    env = validate_section(EnvSettings, merged["env"], where("env", "env"), "env")
    reward = validate_section(RewardConfig, merged["reward"], where("reward", "reward"), "reward")
    algo = validate_section(algo_model, merged["algo"], where("algo", algo_name), algo_name)
    return RunConfig(algo_name=algo_name, env=env, reward=reward, algo=algo)


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """The options every baseline takes."""
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<name>-<timestamp>)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config field, e.g. --set env.n_envs=4 (repeatable)")  # fmt: skip
    parser.add_argument("--config-dir", type=Path, default=None, help="a folder with env.json, reward.json, <algo>.toml")
    parser.add_argument("--name", default=None, help="run name prefix (default: the baseline's name)")


def seed_everything(seed: int, *, threads: int = 1) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch; make torch deterministic and
    single-threaded (``threads``) so that a CPU run repeats to the last digit, on any x86-64 CPU
    (``baselines.determinism``: the pinned code paths are checked here)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ModuleNotFoundError:
        return
    determinism.check_pin()  # the CPU pin (set when ``baselines`` was imported) is in force, or a warning says why not
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("code-env", "torch", "numpy", "gymnasium", "stable-baselines3", "transformers", "trl", "openai"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def git_commit() -> dict[str, Any]:
    """The commit of the checkout the package runs from (and whether it had local changes);
    ``None`` outside a git checkout."""
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)  # fmt: skip
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)  # round-trips exactly
    return "" if v is None else str(v)


class _Csv:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None
        self._fh: TextIO | None = None

    def write(self, row: dict[str, Any]) -> None:
        if self.columns is None:
            self.columns = list(row)
            self._fh = open(self.path, "w", newline="", encoding="utf-8")
            csv.writer(self._fh).writerow(self.columns)
        elif list(row) != self.columns:
            raise ValueError(f"{self.path.name}: columns changed: {list(row)} after {self.columns}")
        assert self._fh is not None
        csv.writer(self._fh).writerow([_cell(row[c]) for c in self.columns])
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class Run:
    """One run's directory and its writers; a context manager (``with Run.create(...) as run``)."""

    def __init__(self, path: Path, config: RunConfig | Mapping[str, Any], seed: int | None) -> None:
        self.path = path
        self.trajectories = path / "trajectories"
        self.checkpoints = path / "checkpoints"
        self.trajectories.mkdir(exist_ok=True)
        self.checkpoints.mkdir(exist_ok=True)
        resolved = config.as_dict() if isinstance(config, RunConfig) else dict(config)
        (path / "config.json").write_text(json.dumps(resolved, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        meta = {"seed": seed, "argv": sys.argv, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "versions": _versions(), "git": git_commit(), "numerics": determinism.describe()}  # fmt: skip
        (path / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        self._curve = _Csv(path / "curve.csv")
        self._timing = _Csv(path / "timing.csv")
        self._tb: Any = None
        self._started = time.monotonic()

    @classmethod
    def create(cls, name: str, config: RunConfig | Mapping[str, Any], *, out: str | Path | None = None,
               seed: int | None = None) -> Run:  # fmt: skip
        """A new run directory: ``out`` (created; it must be empty if it exists), else
        ``runs/<name>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``... when that second is taken).
        ``seed`` defaults to the algorithm config's ``seed``."""
        if out is not None:
            path = Path(out)
            if path.exists() and (not path.is_dir() or any(path.iterdir())):
                raise ConfigError(f"--out {path}: exists and is not an empty directory (a run never overwrites another)")
            path.mkdir(parents=True, exist_ok=True)
        else:
            RUNS_ROOT.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            for n in range(1, 1000):
                path = RUNS_ROOT / (f"{name}-{stamp}" if n == 1 else f"{name}-{stamp}-{n}")
                try:
                    path.mkdir()
                    break
                except FileExistsError:
                    continue
        if seed is None and isinstance(config, RunConfig):
            seed = getattr(config.algo, "seed", None)
        return cls(path, config, seed)

    @property
    def tensorboard(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` on ``tb/`` (made on first use)."""
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.path / "tb"))
        return self._tb

    def log(self, step: int, metrics: Mapping[str, float | int | None], *,
            timing: Mapping[str, float | None] | None = None) -> None:  # fmt: skip
        """One row of the learning curve. ``metrics`` go to ``curve.csv`` (they must not depend
        on the clock), ``timing`` to ``timing.csv``; both to TensorBoard."""
        self._curve.write({"step": step, **metrics})
        tb = self.tensorboard
        for k, v in metrics.items():
            if v is not None and isinstance(v, (int, float)) and math.isfinite(v):
                tb.add_scalar(k, v, step)
        if timing is not None:
            self._timing.write({"step": step, "wall_s": round(time.monotonic() - self._started, 3), **timing})
            for k, v in timing.items():
                if v is not None and math.isfinite(v):
                    tb.add_scalar(f"timing/{k}", v, step)

    def write_summary(self, summary: Mapping[str, Any]) -> Path:
        p = self.path / "summary.json"
        p.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        return p

    def plot(self, columns: Sequence[str], *, reference: str | Path | None = None, title: str | None = None) -> Path:
        """``curve.png``: ``columns`` of ``curve.csv`` against the step (a reference run's, dashed)."""
        self._curve.close()
        return plot_curves(self.path / "curve.csv", self.path / "curve.png", columns, reference=reference,
                           title=title or self.path.name)  # fmt: skip

    def close(self) -> None:
        self._curve.close()
        self._timing.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class RowComparison:
    """How a run's ``curve.csv`` compares with a reference's first rows (``compare_rows``)."""

    rows: int
    identical: bool  # every cell, to the last digit
    outcomes_identical: bool  # every cell outside ``tolerant`` (rewards, pass rates, counts...)
    max_rel_diff: float  # over the ``tolerant`` columns (0.0 when identical)
    message: str  # what was checked, and the first difference


def compare_rows(mine: str | Path, reference: str | Path, *, tolerant: Sequence[str] = (),
                 rtol: float = 1e-6) -> RowComparison:  # fmt: skip
    """Compare the rows of ``mine`` with the first as many rows of ``reference``, cell by cell as
    written (floats are written with ``repr``: equal text is equal bits). Columns in ``tolerant``
    (the learner's floats: losses, KL, entropy) may differ by ``rtol`` relative for the outcome to
    count as ``outcomes_identical``; every other column must be identical. The message says exactly
    which of the two held, or where the first difference is."""
    with open(mine, newline="", encoding="utf-8") as fh:
        a = list(csv.DictReader(fh))
    with open(reference, newline="", encoding="utf-8") as fh:
        b = list(csv.DictReader(fh))[: len(a)]
    n = len(a)
    if len(b) < n or (a and list(a[0]) != list(b[0])):
        why = f"the reference has {len(b)} rows" if len(b) < n else "the columns differ"
        return RowComparison(n, False, False, math.inf, f"{n} rows NOT compared: {why}")
    worst, first_exact, first_outcome = 0.0, None, None
    for i, (ra, rb) in enumerate(zip(a, b, strict=True), start=1):
        for col, va in ra.items():
            vb = rb[col]
            if va == vb:
                continue
            first_exact = first_exact or (i, col, va, vb)
            if col in tolerant and va and vb:
                x, y = float(va), float(vb)
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-300))
                continue
            first_outcome = first_outcome or (i, col, va, vb)
    if first_exact is None:
        return RowComparison(n, True, True, 0.0, f"{n} rows identical to the reference's first {n}")
    where = "row {}, {}: {} vs {}".format(*(first_outcome or first_exact))
    if first_outcome is None and worst <= rtol:
        msg = (f"{n} rows: outcomes identical to the reference's (every column but {', '.join(tolerant)}), "
               f"those within {rtol:g} relative (largest {worst:.1e}); NOT identical (first: {where})")  # fmt: skip
        return RowComparison(n, False, True, worst, msg)
    return RowComparison(n, False, first_outcome is None, worst, f"{n} rows NOT the same as the reference's (first difference: {where})")


def read_curve(path: str | Path) -> dict[str, list[float]]:
    """A curve CSV as columns of floats (empty cells: NaN)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return {}
    return {c: [float(r[c]) if r[c] not in ("", None) else math.nan for r in rows] for c in rows[0]}


def plot_curves(csv_path: str | Path, png_path: str | Path, columns: Sequence[str], *,
                reference: str | Path | None = None, title: str = "", x: str = "step") -> Path:  # fmt: skip
    """Plot ``columns`` of a curve CSV against ``x`` (a reference CSV's, dashed) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = read_curve(csv_path)
    ref = read_curve(reference) if reference is not None and Path(reference).exists() else {}
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.2), squeeze=False)
    for ax, col in zip(axes[0], columns, strict=True):
        for source, style, label in ((ref, "--", "reference"), (data, "-", "this run")):
            if col in source and x in source:
                pts = [(a, b) for a, b in zip(source[x], source[col], strict=True) if not math.isnan(b)]
                if pts:
                    ax.plot(*zip(*pts, strict=True), style, label=label, color="0.55" if style == "--" else "C0")
        ax.set_xlabel(x)
        ax.set_title(col)
        ax.grid(alpha=0.3)
        if ref:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return Path(png_path)


def text_plot(series: Mapping[str, Sequence[float]], *, width: int = 60, height: int = 12,
              lo: float | None = None, hi: float | None = None) -> str:  # fmt: skip
    """A small terminal plot: each series (resampled to ``width`` columns) drawn with its own mark,
    y from ``lo`` to ``hi`` (default: the data's range), a legend below."""
    marks = "*o+x#@"
    values = [v for s in series.values() for v in s if not math.isnan(v)]
    if not values:
        return "(no data)"
    lo = min(values) if lo is None else lo
    hi = max(values) if hi is None else hi
    if hi <= lo:
        hi = lo + 1.0
    grid = [[" "] * width for _ in range(height)]
    for mark, ys in zip(marks, series.values(), strict=False):
        n = len(ys)
        for col in range(width):
            if n == 0:
                break
            y = ys[min(n - 1, round(col * (n - 1) / max(1, width - 1)))]
            if math.isnan(y):
                continue
            r = round((min(max(y, lo), hi) - lo) / (hi - lo) * (height - 1))
            grid[height - 1 - r][col] = mark
    label_w = max(len(f"{hi:.2f}"), len(f"{lo:.2f}"))
    lines: list[str] = []
    for i, row in enumerate(grid):
        label = f"{hi:.2f}" if i == 0 else f"{lo:.2f}" if i == height - 1 else ""
        lines.append(f"{label:>{label_w}} |{''.join(row)}")
    lines.append(" " * label_w + " +" + "-" * width)
    lines.append(" " * label_w + "  " + "   ".join(f"{m} {name}" for m, name in zip(marks, series, strict=False)))
    return "\n".join(lines)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns padded, a rule under the header; each cell on one line with
    every control and invisible character escaped (a cell may hold a program: ``visible``)."""
    cells = [[visible(str(c), keep_newlines=False) for c in header],
             *[[visible(_fmt(c), keep_newlines=False) for c in r] for r in rows]]  # fmt: skip
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:+.3f}" if v < 0 or abs(v) > 1 else f"{v:.3f}"
    return str(v)

