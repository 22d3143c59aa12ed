"""Reward functions that fail in training or eval: the first error or timeout of each printed once, and a stop
(RewardFunctionError) when one fails on more than reward.max_failure_fraction of its calls in a step.

    failures = FailureReports(logger)                                          # once, at set-up
    failures.check_step(first.scores, verifier.functions, limit, step)         # every step, before the update
    failures.report(function_errors(..., functions), "eval/fn/")               # after an eval
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_train.config import ConfigError
from grpo_train.distributed import global_means
from grpo_train.metrics import MetricsLogger
from grpo_train.rewards.workers import function_errors, function_failures


class RewardFunctionError(ConfigError):
    """A reward function failed on more than reward.max_failure_fraction of its calls in a step (a ConfigError: the
    cli prints it as one line, like the other mistakes in what the config names)."""

    kind = "reward function error"  # the cli's prefix of the line


def check_failures(fractions: dict[str, float], failures: dict[str, str], limit: float, step: int) -> None:
    """RewardFunctionError when a reward function failed on more than `limit` of its calls in the step:
    `fractions` {name: failed fraction, over all ranks}, `failures` {name: this rank's first failure}."""
    over = {name: fraction for name, fraction in fractions.items() if fraction > limit}
    if not over:
        return
    name, *others = over
    also = f"; also over it: {', '.join(f'{n} ({over[n]:.1%})' for n in others)}" if others else ""
    first = failures.get(name, "none on this rank (see the other ranks' lines)")
    raise RewardFunctionError(
        f"reward function {name} failed on {over[name]:.1%} of its calls at step {step}, over "
        f"reward.max_failure_fraction {limit:g}{also}; its first failure: {first}. Fix the function, or raise "
        "reward.max_failure_fraction (1 = never stop)")


@dataclass
class FailureReports:
    """Prints the first error or timeout of each reward function in training (prefix reward/fn/) and in eval
    (eval/fn/); later ones are counted in the metrics only."""

    logger: MetricsLogger
    reported: set[str] = field(default_factory=set)

    def report(self, failures: dict[str, str], prefix: str) -> None:
        for name, failure in failures.items():
            if f"{prefix}{name}" not in self.reported:
                self.reported.add(f"{prefix}{name}")
                status = failure.partition(":")[0]  # error or timeout
                self.logger.print(f"warning: reward function {name}: {failure} (scored 0; counted in "
                                  f"{prefix}{name}/{status}; the first failure of each function is printed)")

    def check_step(self, scores: list, functions: list, limit: float, step: int) -> None:
        """Stop before training on broken rewards (RewardFunctionError, over all ranks), then print first failures."""
        failures = function_errors([s.functions for s in scores], functions)
        if functions and limit < 1.0:
            check_failures(global_means(function_failures([s.functions for s in scores], functions)), failures,
                           limit, step)
        self.report(failures, "reward/fn/")
