"""The yardstick of `make bench`'s learner: a plain PyTorch training step of the same model on the same tokens.

    from plain_yardstick import best_plain_yardstick, paired_yardstick   # scripts/bench/bench_step.py runs both

A plain step (`plain_step`): the learner's model in its dtype with its attention kernel (model.attn_implementation,
torch.compile'd as the learner compiles it where learner.compile is on), the rows of `yardstick_batch` (the demo's
real rendered prompts, each once per completion as the update's rows are, each followed by random completion
tokens), the loss over every real position (transformers' `labels`), backward and one torch.optim.AdamW(fused=True)
step; no DeepSpeed, no prompt sharing. Its rate is model FLOP/s = 6 * params * real tokens / time, with and without
the optimizer step.

`best_plain_yardstick` times it at half the learner's micro-batch rows and at all of them where they fit in memory,
after the training run.
`paired_yardstick` then times the learner's own update (`grpo_train.learner.Learner.update`, the run's config) and
the plain step in turns in one process, on the same prompts and completion tokens: the timings of a 2-core machine
drift 10-50% between runs minutes apart (the plain step alone measured 267-294 GFLOP/s in two runs of the same code
on one AVX512-BF16 EPYC), so a ratio of two figures taken minutes apart carries that drift, while each round's pair
is taken seconds apart.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

PEAK_THREADS = 2  # the machine's cores; the trainer's torch uses as many


# ----------------------------------------------------------------------------------------------------
# The tokens: the demo's prompts in the trainer's order, random completions


def rendered_prompts(cfg, total_steps: int) -> list[list[list[int]]]:
    """The token ids of each step's prompts, in the trainer's seeded order: its own sampler and renderer (one rank)."""
    from transformers import AutoTokenizer

    from grpo_train.data import PromptSampler, load_problems
    from grpo_train.models import resolve_model
    from grpo_train.prompts import PromptRenderer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model.name_or_path))
    renderer = PromptRenderer(tokenizer, cfg.data)
    sampler = PromptSampler(load_problems(cfg.data, "train"), seed=cfg.run.seed)
    return [[renderer.token_ids(p) for p in sampler.next_batch(cfg.algorithm.prompts_per_step)]
            for _ in range(total_steps)]


def prompt_tokens_computed(lengths: list[int], group_size: int, micro_batch_size: int, share_prompts: bool) -> int:
    """Prompt tokens (without padding) one update computes over prompts of `lengths`, each with `group_size`
    completions in prompt-major rows cut into micro-batches of `micro_batch_size`: each distinct prompt once per
    micro-batch holding any of its completions with learner.share_prompts (no row skipped), else once per completion."""
    if not share_prompts:
        return sum(lengths) * group_size
    rows = len(lengths) * group_size
    return sum(lengths[i] for start in range(0, rows, micro_batch_size)
               for i in sorted({row // group_size for row in range(start, min(start + micro_batch_size, rows))}))


def yardstick_batch(cfg, completion_len: int, seed: int = 0, rows: int | None = None):
    """(input_ids, attention_mask) [rows, L] of the yardstick: the update's first micro-batch as plain rows. Its
    `rows` (default learner.micro_batch_size) rows are the first step's rendered prompts in the trainer's order, each
    repeated for its G completions as the update's rows are (prompt-major), each followed by `completion_len` random
    tokens (the run's mean completion length: the completions themselves are not kept), left-padded to the longest
    row."""
    import torch
    from transformers import AutoConfig

    from grpo_train.models import resolve_model

    prompts = rendered_prompts(cfg, 1)[0]
    g = cfg.algorithm.group_size
    rows = [prompts[row // g] for row in range(min(rows or cfg.learner.micro_batch_size, len(prompts) * g))]
    vocab = AutoConfig.from_pretrained(resolve_model(cfg.model.name_or_path)).vocab_size
    generator = torch.Generator().manual_seed(seed)
    width = max(len(p) for p in rows) + completion_len
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, prompt in enumerate(rows):
        tail = torch.randint(0, vocab, (completion_len,), generator=generator)
        input_ids[i, width - len(prompt) - completion_len:] = torch.cat([torch.tensor(prompt), tail])
        attention_mask[i, width - len(prompt) - completion_len:] = 1
    return input_ids, attention_mask


# ----------------------------------------------------------------------------------------------------
# The plain step, alone and at its best row count


def plain_model(cfg, model_path: str, dtype_name: str):
    """(model, optimizer) of the plain step: the learner's model in `dtype_name`, attention kernel and compilation."""
    import torch
    from transformers import AutoModelForCausalLM

    from grpo_train.forward import compile_model

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype,
                                                 attn_implementation=cfg.model.attn_implementation).train()
    if cfg.learner.compile:
        compile_model(model)
    return model, torch.optim.AdamW(model.parameters(), lr=cfg.learner.lr, fused=True)


def plain_step(model, optimizer, input_ids, attention_mask) -> tuple[float, float]:
    """One plain training step; (forward + backward seconds, whole step seconds)."""
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    started = time.perf_counter()
    model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    forward_backward = time.perf_counter() - started
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return forward_backward, time.perf_counter() - started


def plain_step_yardstick(cfg, model_path: str, dtype_name: str, completion_len: int, rows: int | None = None) -> dict:
    """A plain PyTorch training step of the learner's model, timed: what the same model reaches on this machine
    without a trainer around it, the yardstick for the update's rate.

    The model in `dtype_name` with the learner's attention kernel (model.attn_implementation), torch.compile'd as
    the learner compiles it (`forward.compile_model`) where learner.compile is on; the rows of `yardstick_batch`;
    the loss over every real position (transformers' `labels`); backward; one torch.optim.AdamW(fused=True) step.
    No DeepSpeed, no prompt sharing: every row runs whole. Model FLOP/s = 6 * params * real tokens / time, for the
    forward + backward alone and with the optimizer step: one step to warm up (and compile), the faster of two
    timed ones for each.
    """
    import torch

    torch.set_num_threads(PEAK_THREADS)
    model, optimizer = plain_model(cfg, model_path, dtype_name)
    params = sum(p.numel() for p in model.parameters())
    input_ids, attention_mask = yardstick_batch(cfg, completion_len, rows=rows)
    forward_backward_s, step_s = zip(*[plain_step(model, optimizer, input_ids, attention_mask) for _ in range(3)],
                                       strict=True)
    tokens = int(attention_mask.sum())
    return {"rows": input_ids.shape[0], "columns": input_ids.shape[1], "tokens": tokens,
            "completion_tokens_per_row": completion_len, "dtype": dtype_name,
            "attn_implementation": cfg.model.attn_implementation, "compiled": cfg.learner.compile,
            "forward_backward_s": round(min(forward_backward_s[1:]), 3), "step_s": round(min(step_s[1:]), 3),
            "forward_backward_gflops": round(6 * params * tokens / min(forward_backward_s[1:]) / 1e9, 1),
            "step_gflops": round(6 * params * tokens / min(step_s[1:]) / 1e9, 1)}


def best_plain_yardstick(cfg, model_path: str, dtype_name: str, completion_len: int) -> dict:
    """`plain_step_yardstick` at half the learner's micro-batch rows (down to one group of G rows) and at all of
    them: the faster plain step is the yardstick (a plain loop would split the same tokens the way it runs fastest
    and fits in memory; at 32 rows of ~300 columns in bf16 on a 2-core AMX Xeon the plain step ran at 257-330
    GFLOP/s, at 16 rows 464-519), with every row count's rates in `by_rows`. A larger row count whose projected
    peak host memory (`projected_peak`) does not fit in what this process can reach is not timed, and named in
    `skipped_rows` with its projection: in fp32 on a 2-core EPYC with 24 GiB the 16-row plain step (eager
    attention) peaked at 14.8 GiB, and the 32-row one was killed for memory."""
    micro, g = cfg.learner.micro_batch_size, cfg.algorithm.group_size
    counts = ([micro // 2] if micro // 2 >= g else []) + [micro]
    timed, skipped, footprint = [], {}, None  # footprint: (rows, resident bytes before, peak resident bytes)
    for rows in counts:
        if footprint is not None:
            need, room = projected_peak(*footprint, rows), resident_bytes() + available_bytes()
            if need > HOST_MEMORY_SHARE * room:
                skipped[str(rows)] = (f"needs ~{need / 2**30:.1f} GiB of host memory, "
                                      f"{room / 2**30:.1f} GiB in reach")
                continue
        before = resident_bytes()
        timed.append(plain_step_yardstick(cfg, model_path, dtype_name, completion_len, rows=rows))
        footprint = (rows, before, peak_resident_bytes())
    best = max(timed, key=lambda y: y["step_gflops"])
    return {**best, "by_rows": {str(y["rows"]): {"step_gflops": y["step_gflops"],
                                                 "forward_backward_gflops": y["forward_backward_gflops"]}
                                for y in timed}, **({"skipped_rows": skipped} if skipped else {})}


HOST_MEMORY_SHARE = 0.9  # of what the process can reach, the most a projected plain step may take


def resident_bytes() -> int:
    """This process's resident memory now (psutil, as `grpo_train.memory.host_usage`), freed heap it keeps
    included."""
    import psutil

    return psutil.Process().memory_info().rss


def peak_resident_bytes() -> int:
    """The most this process has held resident so far (getrusage's ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def available_bytes() -> int:
    """Memory the kernel can still hand out without swapping (psutil's `available`: MemAvailable on Linux)."""
    import psutil

    return psutil.virtual_memory().available


def projected_peak(rows_timed: int, before: int, peak: int, rows: int) -> int:
    """The peak resident bytes of a plain step at `rows` rows, from one timed at `rows_timed` that started at
    `before` and peaked at `peak`: everything it added taken as growing with the rows. Weights and optimizer state
    do not, and ru_maxrss is the whole process's high-water mark, so this errs high: a row count it skips might
    have fitted, one it keeps does."""
    return before + (peak - before) * rows // rows_timed


# ----------------------------------------------------------------------------------------------------
# The update and the plain step in turns


def page_faults() -> int:
    """This process's minor page faults so far: memory the kernel handed it afresh (zero-filled)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def yardstick_update_batch(cfg, completion_len: int):
    """(UpdateBatch, prompt lengths) of one step's update on the yardstick's tokens: every prompt of step 1 x G rows,
    prompt-major as the trainer's, each with the `completion_len` random tokens `yardstick_batch` gives its row
    (the plain step's rows are the first of these); advantages +1 / -1 in turn within each group, so no group is
    all-equal and no row is skipped. The sampler's and reference log-probs are filled in by `paired_yardstick`."""
    prompts = rendered_prompts(cfg, 1)[0]
    g = cfg.algorithm.group_size
    input_ids, _ = yardstick_batch(cfg, completion_len, rows=len(prompts) * g)
    completions = [input_ids[row, -completion_len:].tolist() for row in range(len(prompts) * g)]
    return update_batch_of(prompts, g, completions), [len(p) for p in prompts]


def update_batch_of(prompts: list[list[int]], group_size: int, completions: list[list[int]]):
    """The UpdateBatch of `completions` (prompt-major: group_size rows per prompt), advantages +1 / -1 in turn
    within each group, sampler log-probs 0 until `with_logprobs` fills them."""
    import torch

    from grpo_train.learner import make_update_batch

    rows = range(len(completions))
    advantages = torch.tensor([1.0 if row % 2 == 0 else -1.0 for row in rows])
    return make_update_batch([prompts[row // group_size] for row in rows], completions,
                             [[0.0] * len(c) for c in completions], advantages, pad_id=0)


def with_logprobs(learner, batch):
    """`batch` with the learner's own log-probs as the sampler's (on-policy) and the reference's where it has one."""
    import torch

    with torch.no_grad():
        batch.sampler_logp = learner.logprobs(batch)
        batch.ref_logp = learner.logprobs(batch, reference=True) if learner.ref is not None else None
    return batch


def paired_yardstick(cfg, model_path: str, dtype_name: str, completion_len: int, rows: int, rounds: int = 3) -> dict:
    """The learner's update (`Learner.update` with the run's config, on `yardstick_update_batch`) and the plain step
    (at `rows` rows: `best_plain_yardstick`'s faster row count) timed in turns in this process, `rounds` times after
    two warm-up updates and plain steps, which of the two goes first alternating. Per round, the update's
    rate over the plain step's, both as model FLOP/s = 6 * params * the tokens each computes (the update: prompts
    counted as `prompt_tokens_computed`, every completion token); and the update's rate counting the output head on
    completion tokens only (the learner projects no prompt position onto the vocabulary). The medians and ranges
    over the rounds."""
    import torch

    from grpo_train.distributed import init_distributed
    from grpo_train.learner import Learner

    init_distributed()  # a world of one, as the trainer's single process
    torch.set_num_threads(PEAK_THREADS)
    batch, prompt_lengths = yardstick_update_batch(cfg, completion_len)
    learner = Learner(cfg, model_path, total_optimizer_steps=rounds + 2)
    with_logprobs(learner, batch)
    model, optimizer = plain_model(cfg, model_path, dtype_name)
    input_ids, attention_mask = yardstick_batch(cfg, completion_len, rows=rows)
    params = sum(p.numel() for p in model.parameters())
    head = model.get_output_embeddings().weight.numel()
    g = cfg.algorithm.group_size
    completion_tokens = len(prompt_lengths) * g * completion_len
    prompt_tokens = prompt_tokens_computed(prompt_lengths, g, cfg.learner.micro_batch_size, cfg.learner.share_prompts)
    update_flops = 6 * params * (prompt_tokens + completion_tokens)
    update_flops_head_on_completions = 6 * ((params - head) * (prompt_tokens + completion_tokens)
                                            + head * completion_tokens)
    plain_flops = 6 * params * int(attention_mask.sum())

    faults: dict[str, list[int]] = {"update": [], "plain_step": []}  # minor page faults of each timed one

    def timed_update() -> float:
        started, before = time.perf_counter(), page_faults()
        learner.update(batch)
        faults["update"].append(page_faults() - before)
        return time.perf_counter() - started

    def timed_plain_step() -> tuple[float, float]:
        before = page_faults()
        seconds = plain_step(model, optimizer, input_ids, attention_mask)
        faults["plain_step"].append(page_faults() - before)
        return seconds

    for _ in range(2):  # the second of each: its memory already in the process (the first one's page faults)
        timed_update()
        timed_plain_step()
    for counts in faults.values():  # the warm-ups' left out
        counts.clear()
    update_s, forward_backward_s, step_s = [], [], []
    for turn in range(rounds):  # the update first in even rounds, second in odd ones
        if turn % 2 == 0:
            update_s.append(timed_update())
        forward_backward, step = timed_plain_step()
        forward_backward_s.append(forward_backward)
        step_s.append(step)
        if turn % 2 == 1:
            update_s.append(timed_update())

    def ratios(flops: float, plain: list[float]) -> list[float]:
        return [round((flops / u) / (plain_flops / p), 3) for u, p in zip(update_s, plain, strict=True)]

    vs_step, vs_forward_backward = ratios(update_flops, step_s), ratios(update_flops, forward_backward_s)
    vs_step_head = ratios(update_flops_head_on_completions, step_s)
    return {"rounds": rounds, "update_rows": len(prompt_lengths) * g, "plain_rows": rows,
            "update_tokens": prompt_tokens + completion_tokens, "plain_tokens": int(attention_mask.sum()),
            "update_s": [round(s, 3) for s in update_s], "plain_step_s": [round(s, 3) for s in step_s],
            "plain_forward_backward_s": [round(s, 3) for s in forward_backward_s],
            "update_vs_plain_step": vs_step, "update_vs_plain_forward_backward": vs_forward_backward,
            "update_vs_plain_step_head_on_completions": vs_step_head,
            "update_vs_plain_step_median": statistics.median(vs_step),
            "update_vs_plain_forward_backward_median": statistics.median(vs_forward_backward),
            "update_vs_plain_step_head_on_completions_median": statistics.median(vs_step_head),
            "page_faults": faults}


def paired_text(paired: dict) -> str:
    """The sentence for `paired_yardstick`'s result."""
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"

    return (f" Timed in turns in one process ({paired['rounds']} rounds: the update of {paired['update_rows']} rows, "
            f"{paired['update_tokens']} tokens computed, against the plain step of {paired['plain_rows']} rows, "
            f"{paired['plain_tokens']} tokens; medians, range over rounds): update vs plain step "
            f"**{spread(paired['update_vs_plain_step'])}**, vs plain forward+backward "
            f"{spread(paired['update_vs_plain_forward_backward'])}; counting the update's output head on completion "
            f"tokens only, vs plain step {spread(paired['update_vs_plain_step_head_on_completions'])}.")

# ----------------------------------------------------------------------------------------------------
# The report's sentences (bench_step.py's table, bench_report.py's results.md)


def yardstick_text(mfu: dict) -> str:
    """The plain-PyTorch yardstick next to the update's rate (also in bench_report's results.md). Results written
    before the yardstick was a whole training step (`plain_pytorch_gflops`: forward+backward of 8 x 256 random
    tokens, transformers' default attention) keep their own sentence."""
    learner = mfu["learner_gflops_median"]
    if "yardstick" not in mfu:
        return (f"Yardstick: a plain PyTorch forward+backward of the same model (8 x 256 tokens, no trainer) ran at "
                f"{mfu['plain_pytorch_gflops']:.0f} GFLOP/s = {100 * mfu['plain_pytorch_fraction_of_peak']:.1f}% of "
                f"the peak; the update ran at {learner:.0f} GFLOP/s, "
                f"{learner / mfu['plain_pytorch_gflops']:.2f}x the plain pass.")
    y = mfu["yardstick"]
    by_rows = y.get("by_rows", {})
    faster = (f"; the faster of {' and '.join(by_rows)} rows a step: "
              + ", ".join(f"{v['step_gflops']:.0f}" for v in by_rows.values()) + " GFLOP/s") if len(by_rows) > 1 else ""
    faster += "".join(f"; {rows} rows not timed: {why}" for rows, why in y.get("skipped_rows", {}).items())
    compiled = "compiled as the learner's (learner.compile)" if y["compiled"] else "not compiled"
    return (f"Yardstick: a plain PyTorch step of the same model ({y['dtype']}, {y['attn_implementation']} attention, "
            f"{compiled}; {y['rows']} rows of the demo's rendered prompts + {y['completion_tokens_per_row']} random "
            f"completion tokens, {y['tokens']} tokens padded to {y['columns']} columns; no trainer{faster}): "
            f"forward+backward {y['forward_backward_gflops']:.0f} GFLOP/s "
            f"({100 * y['forward_backward_fraction_of_peak']:.1f}% of the peak), with the fused AdamW step "
            f"{y['step_gflops']:.0f} GFLOP/s ({100 * y['step_fraction_of_peak']:.1f}%). The run's update ran at "
            f"{learner:.0f} GFLOP/s: update vs plain step {learner / y['step_gflops']:.2f}x, update vs plain "
            f"forward+backward {learner / y['forward_backward_gflops']:.2f}x.{same_work_text(mfu)}"
            + (paired_text(y["paired"]) if "paired" in y else ""))


def same_work_text(mfu: dict) -> str:
    """The update against the plain step per completion trained: the rates above count the tokens each computes,
    and the update computes each prompt once per micro-batch where the plain step runs it in every row."""
    if "update_s_per_completion_median" not in mfu:  # step.json written before this figure
        return ""
    update, plain = mfu["update_s_per_completion_median"], mfu["yardstick"]["step_s"] / mfu["yardstick"]["rows"]
    return (f" Per completion trained (the same work): the update {update:.3f} s, the plain step {plain:.3f} s "
            f"(the update {plain / update:.2f}x as fast).")


# ----------------------------------------------------------------------------------------------------
# Alone: the paired measurement of make bench's setting, under a chosen host allocator

KEEP = {"none": None, "trainer": False, "all": True}  # --keep: keep_freed_host_memory's never_mmap, or not called


def parser():
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    import argparse

    p = argparse.ArgumentParser(description="make bench's update and plain step timed in turns in one process, with "
                                "each timed step's seconds and minor page faults")
    p.add_argument("--keep", choices=sorted(KEEP), default="all",
                   help="freed host memory kept in the process: all (as bench_step.py), trainer (blocks up to 32 "
                   "MiB, as grpo-train), none (glibc's defaults)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", type=int, default=16, help="the plain step's rows")
    p.add_argument("--completion-len", type=int, default=29, help="random completion tokens per row")
    return p


def main() -> None:
    import json

    from grpo_train.cli import keep_freed_host_memory

    args = parser().parse_args()
    kept = KEEP[args.keep] is not None and keep_freed_host_memory(never_mmap=KEEP[args.keep])  # before torch loads
    from bench_step import concrete_precision, load_bench_config

    from grpo_train.models import resolve_model

    precision = concrete_precision("auto")
    cfg = load_bench_config(ROOT / "bench" / "runs" / "plain-yardstick", 4, precision, 0.04, prompts_per_step=4)
    paired = paired_yardstick(cfg, resolve_model(cfg.model.name_or_path), precision, args.completion_len, args.rows,
                              args.rounds)
    print(json.dumps({"keep": args.keep, "applied": kept, **paired}, indent=1))
    print(paired_text(paired))


if __name__ == "__main__":
    main()
