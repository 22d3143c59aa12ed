"""The learner's update on the same number of completion tokens, uniform against varied completion lengths.

    .venv/bin/python scripts/bench/update_lengths.py --rounds 5

`make bench`'s yardstick (plain_yardstick.py) gives every completion the run's mean length in random tokens; a run's
completions vary (1 to rollout.max_tokens). This times `Learner.update` (the demo config as `make bench` runs it: 4
prompts x G = 8, fp32 or bf16 as learner.precision auto picks, grpo-train's host allocator setting) on two batches of
the same prompts in turns in one process: every completion `--completion-len` tokens, and lengths drawn uniformly
from 2 .. max_tokens and scaled to the same total (within rounding), `--rounds` rounds after two warm-ups, the order
alternating. Prints each batch's completion tokens and update seconds per round, and their ratio of medians.

`--seed 0 1 3` draws a varied batch per seed. `--compare-layouts` (with learner.share_prompts) also runs every batch
with the shared-prompt pass's layout before 539700e, one prompt per packed row at the longest prompt's width, in the
same turns, and prints each batch's packed rows x width under both and the chosen layout's time over the old one's.
"""

from __future__ import annotations

import argparse
import contextlib
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
    p.add_argument("--seed", type=int, nargs="+", default=[0], help="the varied lengths' and tokens' draw(s)")
    p.add_argument("--compare-layouts", action="store_true",
                   help="also time each batch with the shared-prompt layout before 539700e (one prompt per row)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a dotted override of the demo config (repeatable), e.g. --set learner.share_prompts=false")
    return p


def varied_lengths(rng, count: int, mean: int, longest: int) -> list[int]:
    """`count` lengths drawn uniformly from 2 .. longest, scaled to a total of count x mean (within rounding)."""
    drawn = rng.integers(2, longest + 1, size=count)
    return [int(min(longest, max(1, round(n * mean * count / drawn.sum())))) for n in drawn]


def one_prompt_rows(fed: list[int], row_prompt: list[int], prompt_lengths: list[int], costs) -> list[list[int]]:
    """The shared-prompt pass's packed rows before 539700e: one prompt per row, first-fit-decreasing at the width of
    the longest segment or prompt (forward._completion_bins's signature; the costs are not weighed)."""
    from grpo_train import forward

    rows = sorted((r for r in range(len(fed)) if fed[r]), key=lambda r: (-fed[r], r))
    return forward._first_fit(rows, fed, row_prompt, max(fed[rows[0]], max(prompt_lengths)), mixed=False)


@contextlib.contextmanager
def layout(name: str):
    """The shared-prompt pass packs its rows as `name` says within the block: "chosen" (the code's) or "old"."""
    from grpo_train import forward

    chosen = forward._completion_bins
    forward._completion_bins = chosen if name == "chosen" else one_prompt_rows
    try:
        yield
    finally:
        forward._completion_bins = chosen


def packed_shape(learner, batch) -> str:
    """The shared-prompt pass's packed rows x width (and prompt keys per row) for `batch`, as the pass lays it out."""
    from grpo_train.forward import shared_pass_costs, shared_prompt_layout

    width = batch.completion_mask.shape[1]
    packed = shared_prompt_layout(batch.input_ids, batch.attention_mask, width, shared_pass_costs(learner.module),
                                  learner.score_sketch is not None).packed
    return f"{packed.tokens.shape[0]} x {packed.tokens.shape[1]} over {packed.cache_prompt.shape[1]} keys"


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
    batches = {"uniform": uniform}
    for seed in args.seed:
        rng = np.random.default_rng(seed)
        lengths = varied_lengths(rng, rows, args.completion_len, cfg.rollout.max_tokens)
        completions = [rng.integers(100, 10000, size=n).tolist() for n in lengths]
        batches[f"varied {seed}" if len(args.seed) > 1 else "varied"] = update_batch_of(prompts, g, completions)
        print(f"varied {seed}: {sum(lengths)} tokens ({min(lengths)}-{max(lengths)})")
    layouts = ("chosen", "old") if args.compare_layouts and cfg.learner.share_prompts else ("chosen",)
    learner = Learner(cfg, resolve_model(cfg.model.name_or_path),
                      total_optimizer_steps=len(batches) * len(layouts) * (args.rounds + 2))
    for batch in batches.values():
        with_logprobs(learner, batch)
    runs = [(name, how) for name in batches for how in layouts]
    seconds: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    for turn in range(args.rounds + 2):
        for name, how in runs if turn % 2 == 0 else runs[::-1]:
            with layout(how):
                started = time.perf_counter()
                learner.update(batches[name])
                seconds[name, how].append(round(time.perf_counter() - started, 3))
    median = {run: statistics.median(values[2:]) for run, values in seconds.items()}  # the two warm-ups left out
    print(f"{precision}, share_prompts {cfg.learner.share_prompts}, packing {cfg.learner.packing}, "
          f"{rows} completions: uniform {rows * args.completion_len} tokens ({args.completion_len} each)")
    for (name, how), values in seconds.items():
        with layout(how):
            shape = f" [{packed_shape(learner, batches[name])}]" if cfg.learner.share_prompts else ""
        print(f"  {name:9s} {how:6s} update s: {values[2:]}{shape}")
    for name in batches:
        if name != "uniform":
            print(f"  {name} / uniform, medians: {median[name, 'chosen'] / median['uniform', 'chosen']:.3f}x")
    if len(layouts) > 1:
        for name in batches:
            print(f"  {name}: chosen / old layout, medians: {median[name, 'chosen'] / median[name, 'old']:.3f}x")


if __name__ == "__main__":
    main()
