"""Baselines that learn on code-env, each a script run as ``python -m baselines.<name>``:

* ``sb3_ppo``: Stable-Baselines3 PPO on ``CodeExecTokens-v0``;
* ``grpo``: GRPO in one readable file, a small policy trained from scratch (or any local
  Hugging Face causal LM with ``--model``);
* ``trl_grpo``: TRL's ``GRPOTrainer`` with ``code_env.TRLReward``;
* ``llm_agent``: a model behind an OpenAI-compatible endpoint, pass@k, recorded and replayable.

Every run is configured by ``baselines/configs/`` (override any field with ``--set``) and writes
one run directory (``baselines.common``). ``baselines/reference/`` holds the reference curves.

Importing this package pins torch's CPU code paths (``baselines.determinism``) before anything
imports torch, so that a curve is the same on every x86-64 machine.
"""

from baselines.determinism import pin_cpu

pin_cpu()

__all__: list[str] = []
