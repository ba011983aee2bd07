"""Tools over trajectory logs (a ``.jsonl`` file or a directory of them), one module per command:

- ``_read``: the log as episodes (``episodes``, ``Step``, ``Episode``, ``outcome``,
  ``turns_exhausted``; ``is_agent`` and ``agent_label`` for ``CodeAgent-v0``'s records);
- ``_replay``: ``code-env replay``, ``replay`` re-judges every logged step (``ReplayReport``);
- ``_audit``: ``code-env audit``, ``audit`` samples the highest-return episodes with their code
  and the program's own output (``format_audit``);
- ``_stats``: ``code-env stats``, ``stats`` sums up pass rates, rewards and timing, ``write_png``
  draws them;
- ``_trace``: ``code-env trace``, ``trace`` finds every line about one sample in every log of a run.

A malformed or unreadable log is a ``code_env.trajectory.LogFileError`` naming the file and line.
"""

from ._audit import AuditEntry, audit, format_audit, program_output
from ._read import Episode, Step, agent_label, episodes, is_agent, outcome, turns_exhausted
from ._replay import TIMING_BUDGETS, TOLERANCE, Difference, ReplayReport, replay
from ._stats import Stats, percentile, stats, write_png
from ._trace import TraceLine, format_trace, trace

__all__ = [
    "TIMING_BUDGETS",
    "TOLERANCE",
    "AuditEntry",
    "Difference",
    "Episode",
    "ReplayReport",
    "Stats",
    "Step",
    "TraceLine",
    "agent_label",
    "audit",
    "episodes",
    "format_audit",
    "format_trace",
    "is_agent",
    "outcome",
    "percentile",
    "program_output",
    "replay",
    "stats",
    "trace",
    "turns_exhausted",
    "write_png",
]
