"""grpo_train: reinforcement learning with verifiable rewards (GRPO) for LLMs.

vLLM rollouts, a math verifier, a DeepSpeed learner, typed YAML configs, and tools that measure the
U-statistic view of GRPO's policy gradient on your own model and data.
"""

__version__ = "0.1.0"
