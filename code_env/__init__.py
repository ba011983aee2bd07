"""code-env: a Gymnasium environment for reinforcement learning of coding agents on real,
sandboxed code execution.

This release ships the sandbox (``sandbox``), the task registry (``registry``), the grader
(``code_env.grade`` and its TRL/verl adapters), the environments ``CodeExec-v0`` (programs as
actions) and ``CodeExecTokens-v0`` (one token per action, for fixed-action-space libraries such as
SB3), and the ``code-env`` command.
"""

from gymnasium.envs.registration import register as _register

from .adapters import extract_code
from .env import CodeExecEnv, EnvConfig, Evaluation, evaluate
from .grading import Grade, agrade, agrade_many, grade, grade_many
from .judge import JudgeConfig, JudgeError, LLMJudge
from .reward import RewardBreakdown, RewardConfig
from .spaces import AnyText
from .trl import TRLReward, trl_dataset
from .verl import acompute_score, compute_score, compute_score_batch

__version__ = "0.1.0"

_register(id="CodeExec-v0", entry_point="code_env.env:CodeExecEnv", vector_entry_point="code_env.vector:CodeExecVectorEnv")
_register(id="CodeExecTokens-v0", entry_point="code_env.tokens:CodeExecTokensEnv")
_register(id="CodeAgent-v0", entry_point="code_env.agent:CodeAgentEnv")

__all__ = [
    "AnyText",
    "CodeExecEnv",
    "EnvConfig",
    "Evaluation",
    "Grade",
    "JudgeConfig",
    "JudgeError",
    "LLMJudge",
    "RewardBreakdown",
    "RewardConfig",
    "TRLReward",
    "__version__",
    "acompute_score",
    "agrade",
    "agrade_many",
    "compute_score",
    "compute_score_batch",
    "evaluate",
    "extract_code",
    "grade",
    "grade_many",
    "trl_dataset",
]
