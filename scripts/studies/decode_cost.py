"""What one decode step of the rollout engine costs against how many sequences it carries: the ceiling on what
partial rollouts (rollout.max_staleness k >= 1) can save on this machine.

    .venv/bin/python scripts/studies/decode_cost.py                        # the demo's model, batches 1 .. 128
    .venv/bin/python scripts/studies/decode_cost.py --batches 8 64 --max-tokens 32
    .venv/bin/python scripts/studies/decode_cost.py --model tiny-qwen2 --dtype float32 --out bench/decode-cost-tiny.json

The colocated pool (grpo_train/rollout/async_pool.py) does not make tokens cheaper: it makes a step's generation end
when the groups due are complete, and fills the engine's batch with the groups due later while their stragglers finish.
What it saves is engine steps, each costing about a + c * live (live: the sequences decoded in that step). Where a
dominates (a GPU decoding a few hundred sequences of a small model, weight reads and launch overheads), fewer engine
steps is nearly proportionally less time; where c * live dominates (a CPU doing the matmuls of every sequence),
the saving shrinks to a's share.

Starts `VLLMEngine` on the demo's model (SmolLM2-135M-Instruct; `--model`; `--dtype auto`: bf16 where bf16 matmuls
are native), submits `b` sampled requests (temperature 1, up to `--max-tokens`) for each `b` of `--batches` through
the engine's request-level API (the pool's: add_requests / step) from an empty prefix cache, times the steps until
every request has its first token (the prefill: per prompt token, what a paused request's prefix costs again when it
resumes) and every later step with the number of sequences it returned a token for, and fits seconds = a + c * live
over those (least squares). Prints per batch the median step and per-sequence time, a's share of a step, and the
prefill's time per prompt token; writes bench/decode-cost.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
from grpo_train.config import auto_precision  # noqa: E402
from grpo_train.models import SMOLLM2, resolve_model  # noqa: E402
from grpo_train.rollout import SamplingSpec, StreamRequest, VLLMEngine  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "bench" / "decode-cost.json"


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=SMOLLM2, help="model.name_or_path (tiny-qwen2: the tests' random model)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32, 64, 128])
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto")
    p.add_argument("--out", type=Path, default=OUT)
    return p


def timed_steps(engine: VLLMEngine, prompts: list[list[int]], spec: SamplingSpec,
                tag: str) -> tuple[float, list[tuple[int, float]]]:
    """(seconds until every request has its first token: the prefill, from an empty prefix cache; then (sequences
    decoded, seconds) of every later engine step until all requests finish)."""
    engine.llm.reset_prefix_cache()
    engine.add_requests([StreamRequest(f"{tag}-{i}", ids, dataclasses.replace(spec, seed=i))
                         for i, ids in enumerate(prompts)])
    live, started, prefill_s, steps = len(prompts), set(), 0.0, []
    while live:
        start = time.perf_counter()
        deltas = engine.step()
        seconds = time.perf_counter() - start
        if len(started) < len(prompts):
            prefill_s += seconds
            started |= {d.request_id for d in deltas}
        elif deltas:
            steps.append((len(deltas), seconds))
        live -= sum(d.finish_reason is not None for d in deltas)
    return prefill_s, steps


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(a, c): least squares of seconds = a + c * live."""
    c, a = statistics.linear_regression([float(x) for x, _ in points], [y for _, y in points])
    return a, c


def main() -> None:
    args = parser().parse_args()
    dtype = auto_precision()[0] if args.dtype == "auto" else args.dtype
    path = resolve_model(args.model)
    engine = VLLMEngine(path, dtype=dtype, max_model_len=1024, seed=0, cpu_kvcache_gb=2.5)
    tokenizer = engine.llm.get_tokenizer()
    questions = [f"What is {7 + 3 * i} + {11 + 5 * i}? Explain step by step." for i in range(max(args.batches))]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"] for q in questions]
    spec = SamplingSpec(n=1, temperature=1.0, max_tokens=args.max_tokens)
    timed_steps(engine, prompts[:4], SamplingSpec(n=1, temperature=1.0, max_tokens=8), "warmup")
    load = os.getloadavg()[0]
    per_batch, points = {}, []
    for b in args.batches:
        prefill_s, steps = timed_steps(engine, prompts[:b], spec, f"b{b}")
        full = [s for live, s in steps if live == b] or [s for _, s in steps]
        per_batch[b] = {"steps": len(steps), "median_full_step_s": statistics.median(full),
                        "per_sequence_ms": 1000 * statistics.median(full) / b,
                        "prefill_ms_per_token": 1000 * prefill_s / sum(len(ids) for ids in prompts[:b])}
        points += steps
    a, c = fit(points)
    engine.close()
    result = {"model": str(path), "dtype": dtype, "max_tokens": args.max_tokens, "load_average": load,
              "fit": {"a_s": a, "c_s": c}, "batches": per_batch}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{dtype}, load average {load:.2f} at the start; a decode step = {1000 * a:.2f} ms + {1000 * c:.3f} ms "
          f"x sequences (least squares over {len(points)} steps)")
    print(f"{'batch':>6} {'steps':>6} {'median step ms':>15} {'ms/sequence':>12} {'a share':>8} "
          f"{'prefill ms/token':>17}")
    for b, m in per_batch.items():
        print(f"{b:>6} {m['steps']:>6} {1000 * m['median_full_step_s']:>15.2f} {m['per_sequence_ms']:>12.3f} "
              f"{a / (a + c * b):>8.2f} {m['prefill_ms_per_token']:>17.3f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
