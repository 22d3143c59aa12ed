"""`grpo-train`, plus a stop signal sent at a chosen phase of a chosen step: what Slurm or torchrun do to a run, at a
moment a test can name. Driven by tests/test_faults.py and tests/test_preemption.py; by hand:

    PREEMPT_AT="SIGTERM rollout 3" .venv/bin/python tests/drivers/preempt_run.py --config configs/tiny-cpu.yaml
    PREEMPT_AT="SIGUSR1 update 2 1" .venv/bin/torchrun --standalone --nproc_per_node 2 tests/drivers/preempt_run.py \
        --config configs/tiny-cpu.yaml          # rank 1 only: the other rank must stop at the same step

PREEMPT_AT = "SIGNAL PHASE STEP [RANK]": as step STEP's rollout begins (PHASE rollout) or its update (PHASE update),
this rank sends SIGNAL to its own process group (the rank and its verifier workers: what torchrun's forwarding and
Slurm reach), once. Nothing of the trainer changes; the hooks wrap the methods it calls (a step's first round, the
update).
"""

import os
import signal
import sys

from grpo_train import trainer
from grpo_train.cli import train_main
from grpo_train.learner import Learner


def main() -> int:
    name, phase, at_step, *rank = os.environ["PREEMPT_AT"].split()
    if rank and rank[0] != os.environ.get("RANK", "0"):
        return train_main(sys.argv[1:])
    current = {"step": 0}

    def fire(this_phase: str) -> None:
        if this_phase == phase and current["step"] == int(at_step):
            os.killpg(os.getpgrp(), signal.Signals[name])

    take = trainer.StepStart.take

    def take_and_count(step, *args):
        current["step"] = step + 1  # StepStart.take is given the step before the one starting
        return take(step, *args)

    def firing(this_phase: str, function):
        def fire_and_call(*args, **kwargs):
            fire(this_phase)
            return function(*args, **kwargs)
        return fire_and_call

    trainer.StepStart.take = take_and_count
    trainer.EngineRounds.first = firing("rollout", trainer.EngineRounds.first)  # synchronous
    trainer.PoolRounds.first = firing("rollout", trainer.PoolRounds.first)  # rollout.max_staleness >= 1
    Learner.update = firing("update", Learner.update)
    return train_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
