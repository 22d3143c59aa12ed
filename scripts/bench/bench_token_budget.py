"""Benchmark: micro-batches by token budget (learner.max_tokens_per_micro_batch) against a fixed micro-batch size.

    .venv/bin/python scripts/bench/bench_token_budget.py                     # 2 rounds, writes bench/token_budget.json
    .venv/bin/python scripts/bench/bench_token_budget.py --share-prompts --rounds 3

A spread-length batch: `--prompts` prompts of 32-96 tokens x G = `--group-size` completions whose lengths are drawn
log-uniform in [16, 512] (seeded), as a GRPO step lays them out (a prompt's completions next to each other), on a
randomly initialised small Qwen2 (MODEL: 4 layers, hidden 256, MLP 512, 8,192-row vocabulary), the DeepSpeed
learner on CPU (ZeRO-0, fp32, one process), no KL term, every advantage non-zero (no row skipped).

The two settings and how their memory is matched: the fixed split runs `--micro-batch-size` rows per pass, each pass
padded to its longest prompt and completion; its largest pass holds B padded tokens (rows x (longest prompt +
longest completion), `grpo_train.micro_batches.padded_tokens`), which bounds its activations. The token budget is
set to that same B, so no pass of it holds more padded tokens than the fixed split's largest: the same peak
activation memory by construction. The peak resident memory of each setting's process (ru_maxrss) is reported too.

Reported per setting: passes, padded tokens summed over the passes and the padding among them (padded less the real
tokens, which are the same for both), the update time (median over `--rounds`, the two settings alternating, each
in a fresh process: its first update, which also warms up, is an exact Adam step, lr = adam_eps = 1 as in
tests/test_learner_losses.py, that gives the gradient; the weights are put back and the second update is timed),
peak RSS; and the largest difference of the two gradients in any tensor, relative to that tensor's largest
element. Writes bench/token_budget.json (or `--out`) after every round.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
OUT = ROOT / "bench" / "token_budget.json"
EXACT_STEP = ["learner.lr=1", "learner.adam_eps=1", "learner.grad_clip=0", "learner.weight_decay=0"]
MODEL = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 8192}


def spread_batch(prompts: int, group_size: int, seed: int):
    """The benchmark's UpdateBatch: completion lengths log-uniform in [16, 512], prompts of 32-96 tokens."""
    import torch

    from grpo_train.learner import make_update_batch

    g = torch.Generator().manual_seed(seed)
    prompt_ids, completion_ids = [], []
    for _ in range(prompts):
        prompt_len = int(torch.randint(32, 97, (1,), generator=g))
        prompt = torch.randint(3, MODEL["vocab_size"], (prompt_len,), generator=g).tolist()
        for _ in range(group_size):
            length = round(math.exp(math.log(16) + float(torch.rand(1, generator=g)) * math.log(512 / 16)))
            prompt_ids.append(prompt)
            completion_ids.append(torch.randint(3, MODEL["vocab_size"], (length,), generator=g).tolist())
    advantages = torch.randn(len(prompt_ids), generator=g)
    advantages[advantages == 0] = 1.0  # every row trained (skip_zero_advantage would drop a 0)
    return make_update_batch(prompt_ids, completion_ids, [[0.0] * len(c) for c in completion_ids], advantages, 2)


def settings(args) -> dict[str, list[str]]:
    """The overrides of the three settings; the budget is the fixed split's largest pass in padded tokens (and, for
    the packed setting, in the tokens of its packed sequences)."""
    from grpo_train.micro_batches import by_count, padded_tokens

    batch = spread_batch(args.prompts, args.group_size, args.seed)
    prompt_lens, completion_lens = lengths(batch)
    largest = max(padded_tokens(m, prompt_lens, completion_lens)
                  for m in by_count(list(range(len(completion_lens))), args.micro_batch_size))
    base = ["model.max_model_len=1024", "rollout.max_tokens=512",
            "algorithm.seq_correction=none", "learner.zero_stage=0", "learner.precision=fp32",
            f"learner.share_prompts={str(args.share_prompts).lower()}", f"algorithm.group_size={args.group_size}"]
    return {"fixed": [*base, f"learner.micro_batch_size={args.micro_batch_size}", "learner.packing=false"],
            "budget": [*base, f"learner.max_tokens_per_micro_batch={largest}", "learner.packing=false"],
            "packed": [*base, f"learner.max_tokens_per_micro_batch={largest}", "learner.packing=true"]}


def lengths(batch) -> tuple[list[int], list[int]]:
    return (batch.attention_mask[:, : batch.prompt_len].sum(1).tolist(),
            batch.completion_mask.sum(1).long().tolist())


def make_model(folder: Path) -> str:
    """MODEL, randomly initialised (seed 0), saved as a transformers folder; tiny-qwen2's config otherwise."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpo_train.models import resolve_model

    config = AutoConfig.from_pretrained(resolve_model("tiny-qwen2"))
    for key, value in MODEL.items():
        setattr(config, key, value)
    config.layer_types = ["full_attention"] * MODEL["num_hidden_layers"]
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def child(args) -> None:
    """One setting in this process: its passes and padded tokens; the first update, an exact Adam step whose
    gradient goes to --gradient (when given); the weights put back; the second update timed; the peak RSS."""
    import torch

    from grpo_train.config import load_config
    from grpo_train.distributed import init_distributed
    from grpo_train.learner import Learner

    init_distributed()
    overrides = json.loads(args.child)
    batch = spread_batch(args.prompts, args.group_size, args.seed)
    prompt_lens, completion_lens = lengths(batch)
    learner = Learner(load_config(None, [*overrides, *EXACT_STEP]), args.model, total_optimizer_steps=4)
    passes, _ = learner._micro_batches(batch, torch.arange(len(completion_lens)))
    params = dict(learner.module.named_parameters())
    before = {n: p.detach().double().clone() for n, p in params.items()}
    learner.update(batch)
    if args.gradient:
        step = {n: p.detach().double() - before[n] for n, p in params.items()}
        torch.save({n: -s / (1 - s.abs()) for n, s in step.items()}, args.gradient)
    with torch.no_grad():  # the timed update starts from the same weights
        for n, p in params.items():
            p.copy_(before[n])
    started = time.perf_counter()
    learner.update(batch)
    run = [pass_tokens(learner, batch, rows) for rows, _ in passes]  # the tokens each pass's tensors hold
    out = {"update_s": time.perf_counter() - started, "passes": len(passes),
           "rows_per_pass": [len(rows) for rows, _ in passes],
           "padded_tokens": sum(run), "largest_pass_tokens": max(run),
           "real_tokens": sum(prompt_lens) + sum(completion_lens),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print("RESULT " + json.dumps(out), flush=True)


def pass_tokens(learner, batch, rows) -> int:
    """The tokens a pass over `rows` runs, padding included: its packed rows' (learner.packing) or its rectangle."""
    from grpo_train.micro_batches import padded_tokens

    packed = learner._packed(batch, rows)
    return packed.tokens.numel() if packed is not None else padded_tokens(rows, *batch.lengths)


def run_child(args, overrides: list[str], gradient: Path | None) -> dict:
    cmd = [sys.executable, __file__, "--child", json.dumps(overrides), "--model", args.model,
           "--prompts", str(args.prompts),
           "--group-size", str(args.group_size), "--seed", str(args.seed)]
    if gradient is not None:
        cmd += ["--gradient", str(gradient)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"bench_token_budget: a child run failed:\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def gradient_difference(a: dict, b: dict) -> float:
    """The largest |a - b| of any tensor, relative to that tensor's largest |a|."""
    return max(float((a[n] - b[n]).abs().max()) / max(float(a[n].abs().max()), 1e-30) for n in a)


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=4, help="prompts in the batch")
    p.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    p.add_argument("--micro-batch-size", type=int, default=8, help="rows per pass of the fixed split")
    p.add_argument("--share-prompts", action="store_true", help="both settings with learner.share_prompts")
    p.add_argument("--rounds", type=int, default=2, help="timed updates per setting, the settings alternating")
    p.add_argument("--seed", type=int, default=0, help="seed of the batch's lengths and tokens")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one setting (JSON overrides)
    p.add_argument("--gradient", help=argparse.SUPPRESS)  # internal: where the child saves its gradient
    p.add_argument("--model", help=argparse.SUPPRESS)  # internal: the model folder the parent made
    return p


def summarise(args, runs: dict[str, list[dict]], overrides: dict, gradients: dict, started: float,
              load_before: float) -> dict:
    import torch

    fixed, budget, packed = (torch.load(gradients[name]) for name in runs)
    result = {"setting": {"prompts": args.prompts, "group_size": args.group_size, "model": MODEL,
                          "share_prompts": args.share_prompts, "overrides": overrides, "seed": args.seed},
              "gradient_max_rel_diff": gradient_difference(fixed, budget),
              "packed_gradient_max_rel_diff": gradient_difference(budget, packed),
              "wall_s": round(time.perf_counter() - started, 1),
              "load_average_1min_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)]}
    for name, rows in runs.items():
        first = rows[0]
        result[name] = {key: first[key] for key in ("passes", "rows_per_pass", "padded_tokens",
                                                    "largest_pass_tokens", "real_tokens")}
        result[name]["padding_tokens"] = first["padded_tokens"] - first["real_tokens"]
        result[name]["update_s_median"] = statistics.median(r["update_s"] for r in rows)
        result[name]["update_s"] = [round(r["update_s"], 3) for r in rows]
        result[name]["peak_rss_mib_max"] = max(r["peak_rss_mib"] for r in rows)
    result["padded_tokens_cut"] = 1 - result["budget"]["padded_tokens"] / result["fixed"]["padded_tokens"]
    result["padding_tokens_cut"] = 1 - result["budget"]["padding_tokens"] / result["fixed"]["padding_tokens"]
    result["update_time_cut"] = 1 - result["budget"]["update_s_median"] / result["fixed"]["update_s_median"]
    result["packed_update_vs_budget"] = result["packed"]["update_s_median"] / result["budget"]["update_s_median"]
    return result


def main() -> None:
    args = parser().parse_args()
    if args.child:
        child(args)
        return
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"fixed": [], "budget": [], "packed": []}
    gradients = {name: args.out.with_name(f"{args.out.stem}-{name}-grad.pt") for name in runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    overrides = settings(args)
    args.model = make_model(args.out.with_name(f"{args.out.stem}-model"))
    for k in range(args.rounds):
        for name in runs:
            runs[name].append(run_child(args, overrides[name], gradients[name] if k == 0 else None))
        result = summarise(args, runs, overrides, gradients, started, load_before)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name in runs:
        r = result[name]
        print(f"{name:>6}: {r['passes']} passes of {r['rows_per_pass']} rows, {r['padded_tokens']} padded tokens "
              f"({r['padding_tokens']} of them padding; largest pass {r['largest_pass_tokens']}), update "
              f"{r['update_s_median']:.2f} s median {r['update_s']}, peak RSS {r['peak_rss_mib_max']:.0f} MiB")
    print(f"padded tokens -{100 * result['padded_tokens_cut']:.0f}%, "
          f"padding -{100 * result['padding_tokens_cut']:.0f}%, "
          f"update time -{100 * result['update_time_cut']:.0f}%, "
          f"gradient max relative difference {result['gradient_max_rel_diff']:.1e}")
    print(f"packed against the token budget: update {result['packed_update_vs_budget']:.2f}x, "
          f"{result['packed']['padding_tokens']} padding tokens against {result['budget']['padding_tokens']}, "
          f"gradient max relative difference {result['packed_gradient_max_rel_diff']:.1e}; wrote {args.out}")


if __name__ == "__main__":
    main()
