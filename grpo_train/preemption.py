"""Preemption and the time limit: SIGTERM or SIGUSR1 stops the run at a checkpoint within run.preempt_grace_s.

    stop = StopSignals(cfg.run.preempt_grace_s, describe)     # the cli, before training: the signal handlers
    start = StepStart.take(step - 1, sampler, monitor, pool)  # top of each step: the last complete step's state
    if stop.agree(step, "rollout") and not stop.finish_fits(): ...  # collective: every rank gets the same answer
    stop.saved(step)                                           # after each checkpoint
    raise stop.preempted()                                     # the cli prints one line, exits 128 + the signal

A cluster stops a job with SIGTERM (Slurm: preemption, the time limit, scancel) and SIGKILL some seconds later;
Slurm's `--signal` sends another signal (SIGUSR1 in scripts/launch/*.sbatch) ahead of the time limit. The handler
only notes the signal and starts the grace budget's clock; the training loop acts at two points of each step where
the ranks agree (`agree`: the max of their flags through the process group's store, so a signal that reached one
rank stops every rank at the same point; a signalled rank waits for the others only for the time it has left, and
the error names the ranks that did not answer):

1. After the rollout and reward, before the learner touches the weights. The step in flight is finished when the
   time left on every rank is at least the longest this process has taken from this point to the end of a step that
   saved a checkpoint (learner phases, log, eval, save). Otherwise (also before this process has saved a checkpoint:
   it cannot know how long a save takes) the step is abandoned: its rollouts are dropped, and the step before is
   saved, unless it is on disk already, with the data position, RNG, group-size monitor and rollout pool as the
   step found them (`StepStart`): a resumed run draws the same prompts with the same seeds, bit for bit.
2. At the step's checkpoint: a stop agreed there, or at 1, saves this step (unless its own checkpoint is due anyway)
   and ends the run; a stop at the last step ends it as finished.

Saves are atomic (grpo_train/checkpoint.py). If the budget runs out first (a step longer than the budget, a rank
that does not answer), a watchdog prints the same line and ends the process with the same exit code; the published
checkpoints are intact. The exit code is 128 + the signal's number, as a shell reports a process the signal ended:
143 for SIGTERM, 138 for SIGUSR1 (Ctrl-C stays 130, and immediate).
Docs: docs/gpu-and-clusters.md#preemption-and-the-time-limit.
"""

from __future__ import annotations

import copy
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from grpo_train import checkpoint
from grpo_train.distributed import RanksDidNotAnswer, store_max

if TYPE_CHECKING:  # types only: importing this module loads no learner library (DeepSpeed, vLLM)
    from grpo_train.config import Config
    from grpo_train.data import PromptSampler
    from grpo_train.learner import Learner
    from grpo_train.pace import Pace
    from grpo_train.rollout import RolloutPool
    from grpo_train.ustat.monitor import UstatMonitor

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(Exception):
    """The run stopped on a signal; `how` is the start of the cli's line, `exit_code` 128 + the signal."""

    def __init__(self, how: str, exit_code: int, note: str = ""):
        super().__init__(how)
        self.how, self.exit_code, self.note = how, exit_code, note


class StopSignals:
    """SIGTERM and SIGUSR1 as a stop request, the grace budget's clock and watchdog, and the ranks' agreement."""

    def __init__(self, grace_s: float, describe: Callable[[str, str], str] | None = None, install: bool = True):
        """`describe(how, note)`: the line printed when the budget runs out (the cli's, with the resume command).
        `install`: set the handlers (only from the main thread; False: a run that only takes part in agreements)."""
        self.grace_s = grace_s
        self.describe = describe or (lambda how, note: how + note)
        self.signum = 0  # the first stop signal seen (0: none)
        self.deadline = math.inf  # time.monotonic() by which the process must have ended
        self.agreed = False  # every rank knows the run stops
        self.abandoned = 0  # the step abandoned at the stop (0: none)
        self.last_saved = 0  # the newest step on disk
        self.finish_s = math.inf  # the longest rollout-end-to-saved time of a step, in this process
        self._rollout_done = math.nan  # time.monotonic() at this step's first agreement
        self._fits = False  # the agreed answer of finish_fits
        self._key = ""  # this rank's key of the last agreement, dropped from the store at the next
        self._watchdog: threading.Timer | None = None
        self._previous = {}
        if install and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._on_signal) for s in SIGNALS}

    # ------------------------------------------------------------------------------------------------
    # The signal, the clock, the watchdog

    def _on_signal(self, signum: int, frame) -> None:
        if not self.signum:  # a later signal (Slurm's SIGTERM after our SIGUSR1) keeps the first budget
            self._start_clock(signum, self.grace_s)

    def _start_clock(self, signum: int, budget_s: float) -> None:
        self.signum, self.deadline = signum, time.monotonic() + budget_s
        self._watchdog = threading.Timer(max(budget_s, 0.0), self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _expire(self) -> None:
        """The budget ran out before the run could stop at a checkpoint: the same line, the same exit code, now."""
        try:
            if os.environ.get("RANK", "0") == "0":
                how = f"stopped by {self.name} when run.preempt_grace_s = {self.grace_s:g} s ran out"
                print(f"grpo-train: {self.describe(how, '')}", file=sys.stderr, flush=True)
        finally:
            os._exit(128 + self.signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def close(self) -> None:
        """The handlers as they were; the watchdog off (the run has ended, or the cli has printed its line)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous = {}

    # ------------------------------------------------------------------------------------------------
    # The loop's side

    def agree(self, step: int, where: str) -> bool:
        """Collective (every rank, at the same points): whether the run stops, the same answer on every rank. After
        "rollout" the ranks also agree on `finish_fits`; a rank that had no signal takes the earliest deadline."""
        if where == "rollout":
            self._rollout_done = time.monotonic()
        if self.agreed:
            return True
        if dist.is_initialized() and dist.get_world_size() > 1:
            key = f"grpo_train/stop/{step}/{where}"
            try:  # a signalled rank waits for the others only for the time it has left
                signum, least_left, longest = store_max(
                    dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size(), key,
                    [self.signum, -self.time_left(), self.finish_s],
                    timeout_s=max(self.time_left(), 0.1) if self.signum else None)
            except RanksDidNotAnswer as err:
                raise Preempted(f"stopped by {self.name}", 128 + self.signum,
                                f" ({err}; no checkpoint written at step {step})") from None
            self._forget(key)
            least_left = -least_left
        else:
            signum, least_left, longest = self.signum, self.time_left(), self.finish_s
        if not signum:
            return False
        self.agreed = True
        if not self.signum:  # another rank's signal: this rank keeps to its deadline
            self._start_clock(int(signum), least_left)
        self._fits = least_left >= longest  # the same numbers on every rank, the same decision
        return True

    def _forget(self, key: str) -> None:
        """Drop this rank's previous agreement from the store: every rank has read it, as every rank has written this
        one (an agreement's keys are written after the previous one's are read)."""
        store = dist.distributed_c10d._get_default_store()
        if self._key:
            store.delete_key(f"{self._key}/{dist.get_rank()}")
        self._key = key

    def finish_fits(self) -> bool:
        """After agree(step, "rollout") said stop: whether every rank has the time to finish the step and save it."""
        return self._fits

    def saved(self, step: int) -> None:
        """After a checkpoint of `step`: it is on disk; the time since the rollout ended bounds a finished step's."""
        self.last_saved = step
        if not math.isnan(self._rollout_done):
            elapsed = time.monotonic() - self._rollout_done
            self.finish_s = elapsed if math.isinf(self.finish_s) else max(self.finish_s, elapsed)

    def preempted(self) -> Preempted:
        note = f" (step {self.abandoned} abandoned before its update)" if self.abandoned else ""
        return Preempted(f"stopped by {self.name}", 128 + self.signum, note)


# ----------------------------------------------------------------------------------------------------
# The last complete step, as the next one starts


@dataclass(frozen=True)
class StepStart:
    """What a checkpoint of the last complete step holds that the next step changes before its update: the data
    position, the process's RNG, the group-size monitor (its G and window), this rank's rollout pool. Copies, taken
    at the top of each step, so that an abandoned step can be saved as the step before it."""

    step: int  # the last complete step
    sampler: dict
    rng: dict
    ustat: dict | None
    pool: dict | None
    pace: dict | None = None  # rollout.max_staleness auto

    @classmethod
    def take(cls, step: int, sampler: PromptSampler, monitor: UstatMonitor | None,
             pool: RolloutPool | None, pace: Pace | None = None) -> StepStart:
        return cls(step, sampler.state_dict(), checkpoint.rng_state(),
                   copy.deepcopy(monitor.state_dict()) if monitor is not None else None,
                   pool.state_dict() if pool is not None else None,  # a fresh dict; the groups' prompts never change
                   copy.deepcopy(pace.state_dict()) if pace is not None else None)

    def save(self, learner: Learner, run_dir: Path, cfg: Config) -> None:
        """Collective: the checkpoint of `step`, with the RNG as the abandoned step found it (the save records it)."""
        checkpoint.set_rng_state(self.rng)
        learner.save_checkpoint(run_dir, self.step, checkpoint.checkpoint_state(
            self.step, self.sampler, cfg, self.ustat, self.pool, self.pace), cfg.run.keep_last)
