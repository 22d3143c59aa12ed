"""The reward side: reward functions, the user's code named in the config, the workers that score batches, and the
reward functions' failures.

- functions.py: the signature every reward function shares, the built-ins (boxed_format, think_format,
  overlong_penalty, length_penalty) and the list a run scores with (reward_functions)
- user_code.py: loading and checking a user's `module:function` or `path/to/file.py:function` (config checks)
- workers.py: the verifier's worker processes that score batches (VerifierPool) and the functions' sums
- scoring.py: rollouts decoded and scored through the workers (`verify`: training's rewards, the eval's scores)
- failures.py: each reward function's first failure printed, and the stop when one fails too often

The names of functions.py are importable from here (`from grpo_train.rewards import reward_functions`, and
`grpo_train.rewards:NAME` in a config) but are loaded on first use: grpo_train.config imports user_code,
and importing this package must not pull in the verifier (SymPy) or the workers (subprocesses) with it.
"""

_FUNCTIONS = ("ARGUMENTS", "FORMAT_NAME", "FORMAT_SPEC", "RewardFunction", "as_reward", "boxed_format",
              "function_name", "length_penalty", "overlong_penalty", "reward_functions", "think_format")  # fmt: skip
__all__ = list(_FUNCTIONS)


def __getattr__(name: str) -> object:
    if name in _FUNCTIONS:
        from grpo_train.rewards import functions

        return getattr(functions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FUNCTIONS))
