"""Benchmark: rollout throughput of VLLMEngine against HFEngine, and the cost of one weight sync.

    make bench                                   # runs this among the benchmarks
    .venv/bin/python scripts/bench/bench_rollout.py --prompts 32 --group-size 8 --max-tokens 128

On SmolLM2-135M-Instruct (`--dtype`; by default bf16 where bf16 matmuls are native, else fp32, as the demo),
both engines generate the same rollout batch: `--prompts` chat-templated arithmetic questions x `--group-size`
samples at temperature 1, up to `--max-tokens` tokens each.
Reports completion tokens/s of each engine (the completions differ, so tokens/s is the comparable
figure), their ratio, and the time of one `VLLMEngine.load_weights(hf_weights(model))` of the full model,
also as a fraction of the vLLM rollout batch. Both engines are warmed up on a small batch first (engine
start-up is reported, not timed in the throughput). The vLLM batch is timed before and after the HF
batch and averaged, so that a change in load from other jobs during the run hits both engines alike.
Writes bench/rollout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
from grpo_train.config import auto_precision  # noqa: E402
from grpo_train.hf_weights import hf_weights  # noqa: E402
from grpo_train.models import SMOLLM2, resolve_model  # noqa: E402
from grpo_train.rollout import HFEngine, SamplingSpec, VLLMEngine, rollout_seed  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "bench" / "rollout.json"


def chat_prompts(tokenizer, count: int) -> list[list[int]]:
    questions = [f"What is {7 + 3 * i} + {11 + 5 * i}? Explain briefly." for i in range(count)]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"] for q in questions]


def timed_batch(engine, prompts, spec) -> tuple[float, int]:
    """(seconds, completion tokens) of one generate call."""
    start = time.perf_counter()
    rollouts = engine.generate(prompts, spec)
    return time.perf_counter() - start, sum(len(r.completion_token_ids) for r in rollouts)


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--syncs", type=int, default=3, help="weight syncs timed (the median is reported)")
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                   help="both engines' weights and activations; auto: bfloat16 where bf16 matmuls are native, "
                   "else float32, as the demo")
    return p


def main() -> None:
    args = parser().parse_args()
    if args.dtype == "auto":
        args.dtype = auto_precision()[0]

    path = resolve_model(SMOLLM2)
    load_before = os.getloadavg()[0]  # other jobs on the machine slow both engines down; recorded for context
    start = time.perf_counter()
    # 2.5 GiB holds the whole batch (256 x ~170 tokens x 46 KB per token), so nothing is preempted.
    vllm_engine = VLLMEngine(path, dtype=args.dtype, max_model_len=1024, seed=0, cpu_kvcache_gb=2.5)
    vllm_start_s = time.perf_counter() - start
    hf_engine = HFEngine(path, dtype=args.dtype)
    prompts = chat_prompts(hf_engine.tokenizer, args.prompts)
    spec = SamplingSpec(n=args.group_size, temperature=1.0, max_tokens=args.max_tokens, seed=rollout_seed(0, 0))
    warmup = SamplingSpec(n=2, temperature=1.0, max_tokens=8, seed=1)
    vllm_engine.generate(prompts[:4], warmup)
    hf_engine.generate(prompts[:4], warmup)

    vllm_first = timed_batch(vllm_engine, prompts, spec)
    print(f"vllm: {vllm_first[1]} tokens in {vllm_first[0]:.1f} s", flush=True)
    hf_s, hf_tokens = timed_batch(hf_engine, prompts, spec)
    print(f"hf:   {hf_tokens} tokens in {hf_s:.1f} s", flush=True)
    vllm_second = timed_batch(vllm_engine, prompts, spec)
    print(f"vllm: {vllm_second[1]} tokens in {vllm_second[0]:.1f} s", flush=True)
    vllm_s = (vllm_first[0] + vllm_second[0]) / 2
    vllm_tokens = (vllm_first[1] + vllm_second[1]) / 2

    sync_times = []
    for _ in range(args.syncs):
        start = time.perf_counter()
        vllm_engine.load_weights(hf_weights(hf_engine.model))
        sync_times.append(time.perf_counter() - start)
    sync_s = statistics.median(sync_times)

    result = {
        "model": SMOLLM2,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "group_size": args.group_size,
        "max_tokens": args.max_tokens,
        "vllm_engine_start_s": round(vllm_start_s, 1),
        "vllm_tokens_per_s": round(vllm_tokens / vllm_s, 1),
        "hf_tokens_per_s": round(hf_tokens / hf_s, 1),
        "vllm_over_hf": round((vllm_tokens / vllm_s) / (hf_tokens / hf_s), 2),
        "weight_sync_s": round(sync_s, 3),
        "weight_sync_fraction_of_rollout_batch": round(sync_s / vllm_s, 4),
        "cpus": os.cpu_count(),
        "load_average_1min_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }
    vllm_engine.close()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"rollout, {SMOLLM2} ({args.dtype}), {args.prompts} prompts x G={args.group_size}, "
          f"<= {args.max_tokens} tokens:")
    print(f"  vLLM {result['vllm_tokens_per_s']} tokens/s, HF {result['hf_tokens_per_s']} tokens/s: "
          f"{result['vllm_over_hf']}x")
    print(f"  weight sync {sync_s:.3f} s = {100 * result['weight_sync_fraction_of_rollout_batch']:.2f}% "
          f"of a {vllm_s:.1f} s rollout batch")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
