"""Benchmark: the learner's peak memory and time per token of the log-prob pass + backward, reference against fused.

    .venv/bin/python scripts/bench/bench_logprob_memory.py                      # C = 1024, 2048, 4096; tied, untied
    .venv/bin/python scripts/bench/bench_logprob_memory.py --lengths 2048 --heads untied --repeats 3
    .venv/bin/python scripts/bench/bench_logprob_memory.py --shape qwen2.5-0.5b --heads tied --lengths 2048 --repeats 1

A Qwen2.5-shaped model with the real vocabulary (151,936 tokens), random weights from a transformers Qwen2Config,
small otherwise (hidden 256, MLP 704, 2 layers, 4 heads of 64, 2 key/value heads; `--shape qwen2.5-0.5b`: that
model's 24 layers, hidden 896, MLP 4,864, 14 heads, 2 key/value heads), in fp32 on the CPU (the
learner's dtype on a CPU without native bf16). One micro-batch of --rows sequences of a --prompt-token prompt and C
completion tokens: `forward.token_logprobs` (with the entropy, as the update asks) and the backward of a weighted
sum of the log-probs, the reference path (`fused=False`: the model's [n, C, V] logits) and the fused one (the
learner's default). Each configuration runs in its own process: the model is built, one short pass warms the
kernels up, then the kernel's peak-RSS mark is reset (/proc/self/clear_refs) and the measured passes run. The peak is
VmHWM minus the RSS before the passes: what the pass and its backward added, weight gradients included. glibc is set
up as `grpo-train` sets it (`cli.keep_freed_host_memory`): blocks over 32 MiB (every [n, C, V] tensor, the fused
head's chunks on a GPU) are mapped and unmapped, smaller ones come from a heap that keeps what is freed. Time per
token: the fastest of --repeats passes (forward + backward) over n * C completion tokens, in wall-clock time and in
the process's CPU time (user + system, all threads), which other jobs on the machine disturb less.

The estimate column is grpo_train/memory.py's: the update's activations (activation_bytes, at the CPU's head chunk
size) plus the weight gradients, for the same micro-batch. Writes bench/logprob_memory.json (or --out) and prints a
Markdown table (docs/benchmarks.md#fused-log-probs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
OUT = ROOT / "bench" / "logprob_memory.json"
VOCAB = 151_936
# --shape: "small" (the default: the head is most of the FLOPs, the fused path's worst case for time) or Qwen2.5-0.5B's
# real depth and width (24 layers, hidden 896: the head ~28% of the FLOPs of a forward).
SHAPES = {
    "small": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2),
}
MIB = 2**20


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(tied: bool, length: int, fused: bool, rows: int, prompt: int, repeats: int, shape: str = "small") -> dict:
    """One configuration, in this process: peak bytes added by the pass + backward, and seconds per pass."""
    from grpo_train.cli import keep_freed_host_memory

    keep_freed_host_memory()  # before torch allocates, as grpo-train does
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from grpo_train.forward import token_logprobs

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, tie_word_embeddings=tied, max_position_embeddings=8192, **SHAPES[shape])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    g = torch.Generator().manual_seed(1)

    def one_pass(completion: int) -> tuple[float, float]:
        ids = torch.randint(0, VOCAB, (rows, prompt + completion), generator=g)
        mask = torch.ones_like(ids)
        weights = torch.randn(rows, completion, generator=g)
        model.zero_grad(set_to_none=True)
        start, cpu_start = time.perf_counter(), time.process_time()
        logp, _ = token_logprobs(model, ids, mask, completion, 0.7, with_entropy=True, fused=fused)
        (logp * weights).sum().backward()
        return time.perf_counter() - start, time.process_time() - cpu_start

    one_pass(16)  # warm-up: kernels, lazy initialisation
    model.zero_grad(set_to_none=True)
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = status_kib("VmRSS")
    passes = [one_pass(length) for _ in range(repeats)]
    peak = status_kib("VmHWM") - before
    seconds, cpu_seconds = min(wall for wall, _ in passes), min(cpu for _, cpu in passes)
    return {"shape": shape, "tied": tied, "completion_len": length, "path": "fused" if fused else "reference",
            "rows": rows,
            "prompt_len": prompt, "peak_mib": peak / 1024, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "us_per_token": seconds / (rows * length) * 1e6,
            "cpu_us_per_token": cpu_seconds / (rows * length) * 1e6,
            "estimate_mib": estimate_bytes(tied, length, rows, prompt, fused, shape) / MIB}


def estimate_bytes(tied: bool, length: int, rows: int, prompt: int, fused: bool, shape: str = "small") -> int:
    """memory.py's update activations for this micro-batch (CPU head chunks) plus the fp32 weight gradients."""
    from grpo_train import logprob_kernels, memory

    d = SHAPES[shape]
    dims = memory.ModelDims(d["hidden_size"], d["intermediate_size"], d["num_hidden_layers"],
                            d["num_attention_heads"], d["num_key_value_heads"], VOCAB, tied, True)
    activations = memory.activation_bytes(
        micro_batch_size=rows, seq_len=prompt + length, completion_len=length, hidden_size=dims.hidden_size,
        intermediate_size=dims.intermediate_size, num_layers=dims.num_layers, vocab_size=VOCAB,
        bytes_per_activation=4, gradient_checkpointing=False,
        head_chunk_elements=logprob_kernels.HEAD_CHUNK_ELEMENTS if fused else None)
    return activations + dims.param_count() * 4


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096], help="completion lengths C")
    p.add_argument("--heads", nargs="+", choices=["tied", "untied"], default=["tied", "untied"])
    p.add_argument("--rows", type=int, default=1, help="sequences per micro-batch")
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens per sequence")
    p.add_argument("--repeats", type=int, default=2, help="measured passes per configuration (fastest kept)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="small", help="the model's width and depth")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: one configuration as JSON, in a subprocess
    return p


def main() -> None:
    args = parser().parse_args()
    if args.one:
        print(json.dumps(measure(**json.loads(args.one))))
        return

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results = []
    for head in args.heads:
        for length in args.lengths:
            for fused in (False, True):
                one = dict(tied=head == "tied", length=length, fused=fused, rows=args.rows, prompt=args.prompt,
                           repeats=args.repeats, shape=args.shape)
                out = subprocess.run([sys.executable, __file__, "--one", json.dumps(one)], env=env, check=True,
                                     capture_output=True, text=True).stdout
                results.append(json.loads(out.strip().splitlines()[-1]))
                r = results[-1]
                print(f"{head} C={length} {r['path']}: peak {r['peak_mib']:.0f} MiB (estimate "
                      f"{r['estimate_mib']:.0f}), {r['us_per_token']:.0f} us/token ({r['cpu_us_per_token']:.0f} CPU)",
                      file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print("| head | C | reference peak MiB (estimate) | fused peak MiB (estimate) | fused / reference | "
          "us/token reference, fused (CPU time) |")
    print("|---|---|---|---|---|---|")
    for i in range(0, len(results), 2):
        ref, fus = results[i], results[i + 1]
        print(f"| {'tied' if ref['tied'] else 'untied'} | {ref['completion_len']} | {ref['peak_mib']:.0f} "
              f"({ref['estimate_mib']:.0f}) | {fus['peak_mib']:.0f} ({fus['estimate_mib']:.0f}) | "
              f"{fus['peak_mib'] / ref['peak_mib']:.2f}x | {ref['us_per_token']:.0f}, {fus['us_per_token']:.0f} "
              f"({ref['cpu_us_per_token']:.0f}, {fus['cpu_us_per_token']:.0f}) |")


if __name__ == "__main__":
    main()
