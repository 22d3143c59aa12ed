"""How fast the learner's update runs and where its time goes: `grpo-gpu-check`'s profile and throughput items.

    grpo-gpu-check --out gpu-check-profile --items matmul,profile     # the profile alone (matmul: its MFU yardstick)
    grpo-gpu-check --out gpu-check-cpu --cpu-dry-run --items profile  # on the CPU with tiny-qwen2.5 (tests run it)

Both items time the same fixed batch (`workload`): groups of sequences that share their prompt, prompts and
completions of varied lengths (padding-free passes, learner.packing, pay only where lengths vary), advantages +-1
(no row is skipped), no KL term. The yardstick is the plain pass (`plain_step`): the same model, dtype and tokens
through plain PyTorch, forward + backward + torch's fused AdamW, padded micro-batches, the best attention kernel
installed (flash_attention_2 where the flash_attn package imports, else sdpa).

profile: one learner update (ZeRO-0, FlatAdamW: the learner configs/qwen2.5-0.5b-gsm8k.yaml runs) under
torch.profiler: the 15 kernels with the most device time, the kernels launched, the GPU's busy share of the update's
wall time (the union of the kernels' intervals over the wall time, which the profiler's overhead lengthens), the
host syncs (torch.cuda.set_sync_debug_mode("warn")'s warnings), the same counts for a second update (they should not
change), and a Chrome trace (profile_trace.json.gz, for Perfetto). Then tokens/s of the update's variants
(`variants`: packing, fused head, ZeRO, compile, gradient checkpointing, attention kernels), each a learner of its
own, one warm-up update and one timed, against the plain pass; variants not started within VARIANTS_SHARE of the
item's timeout are listed as such.

The CPU dry run is the same code with the CPU's activity only: a "kernel" is an aten op (its self CPU time), a launch
an aten op dispatched (views included), busy the share of the wall time inside aten ops, and a host sync a scalar
read (aten::_local_scalar_dense: .item(), float(tensor)), which is what syncs on a GPU.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

TOP_KERNELS = 15
VARIANTS_SHARE = 0.4  # the profile item starts no variant after this share of its timeout (300 s: 120 s)
# Over the check's config (gpu_check.base_config): the learner of configs/qwen2.5-0.5b-gsm8k.yaml (ZeRO-0: FlatAdamW).
BASE_OVERRIDES = ["algorithm.kl_coef=0", "learner.zero_stage=0"]
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's text in set_sync_debug_mode("warn")
T = TypeVar("T")


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def free_memory() -> None:
    """Return a dropped learner's or model's memory before the next one is built (DeepSpeed's engine holds cycles)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------------
# The batch, the learner, the plain pass and their tokens/s


@dataclass
class Workload:
    batch: object  # learner.UpdateBatch
    tokens: int  # prompt + completion tokens of every sequence (no padding)
    mean_len: float  # tokens per sequence, for the attention FLOPs
    shape: str  # how the report describes it


def workload(dry_run: bool) -> Workload:
    """Groups of sequences sharing a prompt; prompts of 1/2 to 1 x prompt_len, completions of 1/4 to 1 x
    completion_len tokens (random ids, the same on every run), advantages +-1."""
    import torch

    from grpo_train.learner import make_update_batch

    groups, group_size, prompt_len, completion_len = (2, 2, 8, 16) if dry_run else (4, 8, 128, 384)
    g = torch.Generator().manual_seed(0)
    vocab = 151000  # below Qwen2.5's 151,936 ids

    def ids(low: int, high: int) -> list[int]:  # low to high random token ids
        return torch.randint(0, vocab, (int(torch.randint(low, high + 1, (), generator=g)),), generator=g).tolist()

    prompts = [ids(prompt_len // 2, prompt_len) for _ in range(groups)]
    prompt_ids = [p for p in prompts for _ in range(group_size)]
    completions = [ids(completion_len // 4, completion_len) for _ in prompt_ids]
    advantages = torch.tensor([1.0, -1.0] * (len(prompt_ids) // 2))
    batch = make_update_batch(prompt_ids, completions, [[-1.0] * len(c) for c in completions], advantages, pad_id=0)
    tokens = sum(map(len, prompt_ids)) + sum(map(len, completions))
    shape = (f"{groups} groups x {group_size}, prompts {prompt_len // 2}-{prompt_len} + completions "
             f"{completion_len // 4}-{completion_len} tokens ({tokens:,} tokens)")
    return Workload(batch, tokens, tokens / len(prompt_ids), shape)


def with_learner(args, overrides: list[str], use: Callable[[object], T]) -> T:
    """use(learner) for a Learner of the check's config with `overrides`; the learner's memory is returned after.
    DeepSpeed's gradient-accumulation hooks hold its engine in a cycle through C++ that the garbage collector does
    not see: without engine.destroy() a dropped learner keeps its weights, gradients and optimizer state."""
    from grpo_train.config import load_config
    from grpo_train.learner import Learner

    free_memory()  # what a failed use left (its traceback held the learner until now)
    learner = Learner(load_config(args.config, BASE_OVERRIDES + overrides), args.model_path, total_optimizer_steps=10)
    try:
        return use(learner)
    finally:
        learner.engine.destroy()
        del learner
        free_memory()


def tokens_per_s(step: Callable[[], object], tokens: int, reps: int, warmup: bool = True) -> float:
    """Tokens/s of `step` over `reps` calls, after one warm-up call unless `warmup` is False."""
    if warmup:
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    sync()
    return tokens * reps / (time.perf_counter() - t0)


def learner_tokens_per_s(learner, work: Workload, reps: int, warmup: bool = True) -> float:
    return tokens_per_s(functools.partial(learner.update, work.batch), work.tokens, reps, warmup)


def best_attention() -> str:
    """The fastest attention kernel installed for the plain pass: flash_attention_2 where flash_attn imports (a
    GPU), else sdpa (PyTorch's, which picks its own flash or memory-efficient kernel)."""
    import torch

    if not torch.cuda.is_available():
        return "sdpa"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "sdpa"
    return "flash_attention_2"


def plain_step(model_path: str, batch, dtype, micro_batch_size: int) -> Callable[[], None]:
    """One plain PyTorch training step over `batch` (micro-batches of consecutive rows, each padded to its longest
    row): the same log-prob loss of the completion tokens, backward, and torch.optim.AdamW(fused=True)."""
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation=best_attention())
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    n = batch.input_ids.shape[0]
    tokens = float(batch.completion_mask.sum())

    def step():
        for start in range(0, n, micro_batch_size):
            sub = batch.rows(list(range(start, min(start + micro_batch_size, n))))
            ids, mask = sub.input_ids.to(device), sub.attention_mask.to(device)
            width = sub.completion_mask.shape[1]
            logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=width + 1).logits[:, :-1]
            logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, -width:, None]).squeeze(-1)
            weight = sub.completion_mask.to(device) * sub.advantages.to(device)[:, None]
            (-(logp * weight).sum() / tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def flops_per_token(config, seq_len: float) -> float:
    """Training FLOPs per token (forward + backward = 3 x forward): 6 per weight of every matmul, the LM head
    included, plus causal attention's scores and weighted sum (6 * layers * seq_len * q_dim, half of full)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q, kv = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * i
    return 6 * (layers * per_layer + h * config.vocab_size) + 6 * layers * seq_len * q


def against_plain(args, learner_tps: float, plain_tps: float, model_config, work: Workload) -> dict:
    """The learner's tokens/s against the plain pass's, and both MFUs where the matmul item measured the peak."""
    flops = flops_per_token(model_config, work.mean_len)
    out = {"learner_tokens_per_s": learner_tps, "plain_tokens_per_s": plain_tps, "ratio": learner_tps / plain_tps,
           "flops_per_token": flops, "batch": work.shape}
    peak = json.loads(Path(args.matmul_json).read_text()).get("tflops") if args.matmul_json else None
    if peak:
        out.update(learner_mfu=learner_tps * flops / (peak * 1e12), plain_mfu=plain_tps * flops / (peak * 1e12))
    return out


def item_throughput(args) -> dict:
    """The learner's update (forward + backward + optimizer step, ZeRO-0, the check's precision) against the plain
    pass in tokens/s; MFU against the matmul peak when it is known."""
    import torch

    from grpo_train.distributed import init_distributed

    init_distributed()
    work = workload(args.dry_run)
    reps = 1 if args.dry_run else 3
    learner_tps, model_config, micro = with_learner(args, [], lambda learner: (
        learner_tokens_per_s(learner, work, reps), learner.base_config, learner.cfg.learner.micro_batch_size))
    dtype = torch.float32 if args.dry_run else torch.bfloat16
    plain_tps = tokens_per_s(plain_step(args.model_path, work.batch, dtype, micro), work.tokens, reps)
    out = {"status": "PASS", **against_plain(args, learner_tps, plain_tps, model_config, work)}
    mfu = f", MFU {out['learner_mfu']:.1%} vs {out['plain_mfu']:.1%}" if "learner_mfu" in out else ""
    out["summary"] = (f"learner {learner_tps:,.0f} tok/s, plain PyTorch fwd+bwd+AdamW ({best_attention()}) "
                      f"{plain_tps:,.0f} tok/s (x{out['ratio']:.2f}){mfu}; {work.shape}")
    return out


# ----------------------------------------------------------------------------------------------------
# One update under the profiler


def device_ops(events, cuda: bool) -> list[tuple[str, float, float, float]]:
    """(name, start us, end us, device us) of each kernel among the profiler's events: on CUDA every GPU event but
    the annotations (kernels, memcpy, memset); on the CPU every aten op, with its self time (ops nest there)."""
    from torch.autograd import DeviceType

    if cuda:
        return [(e.name, e.time_range.start, e.time_range.end, e.time_range.elapsed_us()) for e in events
                if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    return [(e.name, e.time_range.start, e.time_range.end, e.self_cpu_time_total) for e in events
            if e.device_type == DeviceType.CPU and not e.is_async and e.name.startswith("aten::")]


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def top_kernels(ops: list[tuple[str, float, float, float]], n: int = TOP_KERNELS) -> list[dict]:
    """The n kernel names with the most device time: calls, ms, share of all kernels' time."""
    by_name: dict[str, list[float]] = {}
    for name, _, _, us in ops:
        calls_us = by_name.setdefault(name, [0, 0.0])
        calls_us[0] += 1
        calls_us[1] += us
    total = sum(us for _, us in by_name.values()) or 1.0
    ranked = sorted(by_name.items(), key=lambda item: -item[1][1])[:n]
    return [{"name": name[:200], "calls": int(calls), "ms": us / 1000, "share": us / total}
            for name, (calls, us) in ranked]


def profile_update(update: Callable[[], object], cuda: bool, trace: Path | None = None) -> dict:
    """One call of `update` under torch.profiler (CUDA activity on a GPU, CPU activity on the CPU): wall time,
    kernels launched, busy share, host syncs and the top kernels; its Chrome trace to `trace` if given."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    sync()
    with warnings.catch_warnings(record=True) as caught, profile(activities=activities) as prof:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            t0 = time.perf_counter()
            update()
            sync()
            wall_us = (time.perf_counter() - t0) * 1e6
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    events = prof.events()
    ops = device_ops(events, cuda)
    if cuda:
        syncs = sum(SYNC_WARNING in str(w.message) for w in caught)
    else:
        syncs = sum(e.name == "aten::_local_scalar_dense" for e in events)
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    return {"wall_s": wall_us / 1e6, "launches": len(ops), "busy": union_us([(s, e) for _, s, e, _ in ops]) / wall_us,
            "host_syncs": syncs, "top_kernels": top_kernels(ops)}


# ----------------------------------------------------------------------------------------------------
# The variants of the update, and the item


def variants() -> list[tuple[str, list[str]]]:
    """The learner variants the profile times, the most telling first: (name, overrides of the check's config).
    The default: packing on, fused head on, ZeRO-0 (FlatAdamW), no compile, no gradient checkpointing, sdpa
    attention; ZeRO-2 is DeepSpeed's per-tensor optimizer (on one rank it partitions nothing), either precision."""
    return [("default", []),
            ("packing off", ["learner.packing=false"]),
            ("fused head off", ["learner.fused_head=false"]),
            ("compile", ["learner.compile=true"]),
            ("flex attention", ["model.attn_implementation=flex_attention"]),
            ("flash attention 2", ["model.attn_implementation=flash_attention_2"]),
            ("eager attention", ["model.attn_implementation=eager"]),
            ("ZeRO-2", ["learner.zero_stage=2"]),
            ("gradient checkpointing", ["model.gradient_checkpointing=true"])]


def cannot_run(config: str, overrides: list[str], cuda: bool) -> str | None:
    """Why a variant does not run here (None: it does): a kernel not installed, or the config refuses it."""
    import torch

    from grpo_train.config import ConfigError, load_config

    attention = dict(o.split("=", 1) for o in overrides).get("model.attn_implementation")
    if attention == "flash_attention_2" and best_attention() != "flash_attention_2":
        return "needs a GPU and the flash_attn package" + ("" if cuda else " (CPU dry run)")
    if attention == "flex_attention":
        if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
            return f"torch {torch.__version__} has no flex_attention"
        if not cuda:
            return "flex_attention has no backward pass on the CPU"
    try:
        load_config(config, BASE_OVERRIDES + overrides)
    except ConfigError as err:
        return f"refused by the config: {str(err).split('): ', 1)[-1]}"
    return None


def item_profile(args) -> dict:
    """The profile item (module docstring): the default learner's update timed and profiled twice, the plain pass,
    then the variants while the item has spent less than VARIANTS_SHARE of its timeout. On the CPU dry run a
    variant's one update is its first (no warm-up: its figures there only show that it runs)."""
    import torch

    from grpo_train.distributed import init_distributed

    t_start = time.perf_counter()
    cuda = torch.cuda.is_available()
    init_distributed()
    work = workload(args.dry_run)
    trace = Path(args.result).with_name("profile_trace.json.gz")

    def measure(learner):
        update = functools.partial(learner.update, work.batch)
        tps = tokens_per_s(update, work.tokens, reps=1)
        return tps, profile_update(update, cuda, trace), profile_update(update, cuda), learner.cfg, learner.base_config

    default_tps, first, second, cfg, model_config = with_learner(args, [], measure)
    dtype = torch.bfloat16 if cfg.learner.precision == "bf16" else torch.float32
    plain_tps = tokens_per_s(plain_step(args.model_path, work.batch, dtype, cfg.learner.micro_batch_size),
                             work.tokens, reps=1)
    free_memory()
    budget_s = VARIANTS_SHARE * args.timeout_s
    rows = []
    for name, overrides in variants():
        row = {"variant": name, "overrides": overrides}
        t0 = time.perf_counter()
        if not overrides:
            row.update(status="PASS", tokens_per_s=default_tps)
        elif why_not := cannot_run(args.config, overrides, cuda):
            row.update(status="SKIP", note=why_not)
        elif t0 - t_start > budget_s:
            row.update(status="SKIP", note=f"not started: {budget_s:.0f} s of the item's {args.timeout_s:.0f} s "
                                           "were spent (--timeout-s 600 runs more)")
        else:
            try:
                tps = with_learner(args, overrides,
                                   lambda learner: learner_tokens_per_s(learner, work, 1, warmup=not args.dry_run))
                row.update(status="PASS", tokens_per_s=tps, seconds=time.perf_counter() - t0)
            except Exception as err:  # one variant's failure is a finding; the others still run
                row.update(status="FAIL", note=f"{type(err).__name__}: {str(err)[:300]}")
        if "tokens_per_s" in row:
            row["vs_plain"] = row["tokens_per_s"] / plain_tps
        rows.append(row)
    on = lambda flag: "on" if flag else "off"  # noqa: E731
    lcfg = cfg.learner
    out = {**against_plain(args, default_tps, plain_tps, model_config, work),
           "device": "cuda" if cuda else "cpu",
           "learner": f"ZeRO-{lcfg.zero_stage}, {lcfg.precision}, {cfg.model.attn_implementation}, packing "
                      f"{on(lcfg.packing)}, fused head {on(lcfg.fused_head)}",
           "plain": f"PyTorch fwd+bwd+AdamW(fused), {str(dtype)[6:]}, {best_attention()}, padded micro-batches",
           "update_s": work.tokens / default_tps, **first, "again": {k: second[k] for k in ("launches", "host_syncs")},
           "variants": rows, "trace": str(trace)}
    problems = [f"variant {r['variant']} failed" for r in rows if r["status"] == "FAIL"]
    if not first["launches"]:
        problems.append("the profiler recorded no kernels (CUDA activity needs CUPTI, libcupti, where torch finds it)")
    out["status"] = "FAIL" if problems else "PASS"
    unit = "GPU" if cuda else "CPU aten"
    best = max((r for r in rows if "vs_plain" in r), key=lambda r: r["vs_plain"])
    top = "".join(f"; top: {k['name'][:40]} {k['share']:.0%}" for k in first["top_kernels"][:1])
    out["summary"] = "".join(f"{p}; " for p in problems) + (
        f"update {first['wall_s']:.2f} s profiled: {first['launches']:,} {unit} ops launched, "
        f"{'GPU' if cuda else 'CPU'} busy {first['busy']:.0%}, {first['host_syncs']} host syncs; learner "
        f"x{out['ratio']:.2f} of plain, best variant {best['variant']} x{best['vs_plain']:.2f}{top}")
    return out


def format_profile(result: dict) -> str:
    """The profile item's tables: the update's figures, its top kernels, the variants against the plain pass."""
    unit = "GPU" if result["device"] == "cuda" else "CPU"
    again = result["again"]
    lines = [f"profile: one learner update ({result['learner']}; {result['batch']})",
             f"  {result['wall_s']:.3f} s under the profiler ({result['update_s']:.3f} s without); {unit} busy "
             f"{result['busy']:.1%}; {result['launches']:,} {unit} ops launched; {result['host_syncs']} host syncs "
             f"(a second update: {again['launches']:,} ops, {again['host_syncs']} syncs)",
             f"  top {len(result['top_kernels'])} {unit} ops by {unit} time:",
             f"  {'ms':>9} {'share':>6} {'calls':>6}  name"]
    lines += [f"  {k['ms']:9.2f} {k['share']:6.1%} {k['calls']:6d}  {k['name'][:110]}" for k in result["top_kernels"]]
    mfu = (f", MFU {result['learner_mfu']:.1%} vs {result['plain_mfu']:.1%}" if "learner_mfu" in result else "")
    lines += [f"  variants against the plain pass ({result['plain']}: {result['plain_tokens_per_s']:,.0f} "
              f"tokens/s{mfu}):", f"  {'variant':<24} {'status':<6} {'tokens/s':>10} {'x plain':>8}  note"]
    for r in result["variants"]:
        tps = f"{r['tokens_per_s']:10,.0f} {r['vs_plain']:8.2f}" if "tokens_per_s" in r else f"{'-':>10} {'-':>8}"
        lines.append(f"  {r['variant']:<24} {r['status']:<6} {tps}  {r.get('note', '')}")
    return "\n".join(lines)
