"""code-env: a Gymnasium environment for reinforcement learning of coding agents on real,
sandboxed code execution.

This release ships the sandbox (``sandbox``), the task registry (``registry``), the grader
(``code_env.grade`` and its TRL/verl adapters) and the ``code-env`` command; the environments
(``CodeExec-v0``) build on them.
"""

from gymnasium.envs.registration import register

from .adapters import TRLReward, compute_score, extract_code
from .env import CodeExecEnv, EnvConfig
from .grading import Grade, grade, grade_many
from .judge import JudgeConfig, JudgeError, LLMJudge
from .reward import RewardBreakdown, RewardConfig
from .spaces import AnyText

__version__ = "0.1.0"

register(id="CodeExec-v0", entry_point="code_env.env:CodeExecEnv", vector_entry_point="code_env.vector:CodeExecVectorEnv")
register(id="CodeExecTokens-v0", entry_point="code_env.tokens:CodeExecTokensEnv")

__all__ = [
    "AnyText",
    "CodeExecEnv",
    "EnvConfig",
    "Grade",
    "JudgeConfig",
    "JudgeError",
    "LLMJudge",
    "RewardBreakdown",
    "RewardConfig",
    "TRLReward",
    "__version__",
    "compute_score",
    "extract_code",
    "grade",
    "grade_many",
]
