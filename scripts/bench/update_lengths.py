"""The learner's update on the same number of completion tokens, uniform against varied completion lengths.

    .venv/bin/python scripts/bench/update_lengths.py --rounds 5

`make bench`'s yardstick (plain_yardstick.py) gives every completion the run's mean length in random tokens; a run's
completions vary (1 to rollout.max_tokens). This times `Learner.update` (the demo config as `make bench` runs it: 4
prompts x G = 8, fp32 or bf16 as learner.precision auto picks, grpo-train's host allocator setting) on two batches of
the same prompts in turns in one process: every completion `--completion-len` tokens, and lengths drawn uniformly
from 2 .. max_tokens and scaled to the same total (within rounding), `--rounds` rounds after two warm-ups, the order
alternating. Prints each batch's completion tokens and update seconds per round, and their ratio of medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_step, plain_yardstick


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="timed rounds of each batch, after two warm-ups")
    p.add_argument("--completion-len", type=int, default=30, help="the uniform batch's tokens per completion")
    p.add_argument("--seed", type=int, default=0, help="the varied lengths' and tokens' draw")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a dotted override of the demo config (repeatable), e.g. --set learner.share_prompts=false")
    return p


def varied_lengths(rng, count: int, mean: int, longest: int) -> list[int]:
    """`count` lengths drawn uniformly from 2 .. longest, scaled to a total of count x mean (within rounding)."""
    drawn = rng.integers(2, longest + 1, size=count)
    return [int(min(longest, max(1, round(n * mean * count / drawn.sum())))) for n in drawn]


def main() -> None:
    from grpo_train.cli import keep_freed_host_memory

    keep_freed_host_memory()  # grpo-train's own setting, before torch allocates
    args = parser().parse_args()
    if args.rounds < 1 or args.completion_len < 1:
        parser().error("--rounds and --completion-len: at least 1")
    import numpy as np
    import torch
    from bench_step import concrete_precision, load_bench_config
    from plain_yardstick import PEAK_THREADS, rendered_prompts, update_batch_of, with_logprobs, yardstick_update_batch

    from grpo_train.distributed import init_distributed
    from grpo_train.learner import Learner
    from grpo_train.models import resolve_model

    precision = concrete_precision("auto")
    cfg = load_bench_config(ROOT / "bench" / "runs" / "update-lengths", 4, precision, 0.04, prompts_per_step=4,
                            extra=tuple(args.overrides))
    init_distributed()
    torch.set_num_threads(PEAK_THREADS)
    uniform, _ = yardstick_update_batch(cfg, args.completion_len)
    prompts, g = rendered_prompts(cfg, 1)[0], cfg.algorithm.group_size
    rows = len(prompts) * g
    rng = np.random.default_rng(args.seed)
    lengths = varied_lengths(rng, rows, args.completion_len, cfg.rollout.max_tokens)
    completions = [rng.integers(100, 10000, size=n).tolist() for n in lengths]
    varied = update_batch_of(prompts, g, completions)
    learner = Learner(cfg, resolve_model(cfg.model.name_or_path), total_optimizer_steps=2 * (args.rounds + 2))
    for batch in (uniform, varied):
        with_logprobs(learner, batch)
    seconds: dict[str, list[float]] = {"uniform": [], "varied": []}
    for turn in range(args.rounds + 2):
        order = (("uniform", uniform), ("varied", varied))
        for name, batch in order if turn % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            learner.update(batch)
            seconds[name].append(round(time.perf_counter() - started, 3))
    timed = {name: values[2:] for name, values in seconds.items()}  # the two warm-ups left out
    print(f"{precision}, share_prompts {cfg.learner.share_prompts}, packing {cfg.learner.packing}, "
          f"{rows} completions: uniform {rows * args.completion_len} tokens ({args.completion_len} each), "
          f"varied {sum(lengths)} tokens ({min(lengths)}-{max(lengths)})")
    for name, values in timed.items():
        print(f"  {name:8s} update s: {values}")
    ratio = statistics.median(timed["varied"]) / statistics.median(timed["uniform"])
    print(f"  varied / uniform, medians: {ratio:.3f}x")


if __name__ == "__main__":
    main()
