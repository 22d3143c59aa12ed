"""Benchmark: operations dispatched and host syncs of one learner update, against a plain PyTorch training step.

    .venv/bin/python scripts/bench/bench_dispatch.py     # ~3 CPU-minutes on 2 cores; writes bench/dispatch.json

What a GPU step pays per kernel launch and per host sync can be counted on a CPU: the same Python code dispatches the
same operations (issue #61). One `Learner.update` of an UpdateBatch (one process) is counted against a plain step of
the same model, dtype and tokens: forward, cross-entropy of the completion tokens at the completion positions
(`logits_to_keep`, the positions the update projects), backward, one `torch.optim.AdamW(fused=True)` step. The
headline is the learner as configs/qwen2.5-0.5b-gsm8k.yaml runs it (ZeRO-0, so the flat-buffer FlatAdamW, bf16);
ZeRO-0 in fp32 and DeepSpeed's ZeRO-2 in bf16 and fp32 are counted beside it (`VARIANTS`), each against the plain
step of its dtype (on a machine without native bf16 matmuls the fp32 ones only: `counted_settings`). Each is
counted on its second call (the first, on a 2-row batch, creates the
optimizer state), under a TorchDispatchMode (`DispatchCounter`):
- operations: every aten / c10d operation that reaches the dispatcher below autograd, views excluded (schemas whose
  output aliases an input, `OpOverload.is_view`: view, t, transpose, expand, slice, select, detach, ..., and
  `_unsafe_view`): roughly one kernel launch each on a GPU;
- host syncs: `aten._local_scalar_dense` (`.item()`, `float()`, `int()`, `bool()` of a tensor) and `Tensor.tolist()`
  (which dispatches nothing: patched while counting), each with its call site. On this CPU every tensor is on the
  CPU, so all of them are counted, including those of the batch the learner keeps on the host. Operations whose
  output shape depends on tensor values (nonzero, masked_select, boolean-mask indexing: a sync on CUDA when the
  tensor is there) are counted apart.

The model: Qwen2.5-0.5B's widths (`grpo_train.models.qwen25_config`: hidden 896, MLP 4864, 14 heads, 2 key/value
heads, 151,936-token vocabulary, tied embeddings), randomly initialised, at depth 1 and 2 for CPU time. Per decoder
layer = count(2) - count(1), outside the layers = count(1) - per layer; extrapolated to Qwen2.5-0.5B's 24 layers. The
batch: 2 prompts x G = 8 completions, 64-token prompts and 128-token completions (16 sequences of 192 tokens, random
token ids, random non-zero advantages, no KL term, so no row is skipped), micro-batches of 16 (one pass).

The chunk sizes the code picks on CUDA: grpo_train.logprob_kernels picks the fused head's chunk
(GPU_HEAD_CHUNK_ELEMENTS) and the log-softmax's row chunk within it (GPU_CHUNK_ELEMENTS) when the device is cuda; this
script sets the module's CPU figures, HEAD_CHUNK_ELEMENTS and CHUNK_ELEMENTS, to the GPU ones (a module-level
patch: both are read at each pass), so the head runs in the chunks it runs in on a GPU. The fused head is taken as on
a GPU: by the learner's own rule (`forward.fusing_pays`, a pass's logits above FUSE_MIN_ELEMENTS: 16 x 128 positions
x 151,936 are), else forced (`learner.fused = True`, reported). Host syncs are also counted with micro-batches of 4
(4 passes; 4 x 128 x 151,936 logits are below the threshold, so the fused head is forced there, as every shipped
Qwen2.5 config's longer completions take it) to show whether they grow with the micro-batches.

Targets printed beside the figures: the update's operations <= 1.15x the plain step's at 24 layers; host syncs
constant per optimizer step (the same with 1 and 4 micro-batches).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
OUT = ROOT / "bench" / "dispatch.json"
THREADS = 2  # the machine's cores
FULL_DEPTH = 24  # Qwen2.5-0.5B's decoder layers
GOAL_OPS_RATIO = 1.15  # update ops / plain step ops at FULL_DEPTH
PROMPTS, GROUP, PROMPT_LEN, COMPLETION_LEN = 2, 8, 64, 128
MICRO_BATCHES = (16, 4)  # learner.micro_batch_size: 1 and 4 passes over the 16 sequences
HEADLINE = (0, "bf16")  # (learner.zero_stage, learner.precision) of configs/qwen2.5-0.5b-gsm8k.yaml
VARIANTS = {"ZeRO-0, fp32": (0, "fp32"), "ZeRO-2, bf16": (2, "bf16"), "ZeRO-2, fp32": (2, "fp32")}


def counted_settings(bf16_native: bool) -> tuple[tuple[int, str], dict[str, tuple[int, str]], dict[str, str]]:
    """(the headline, the variants counted beside it, those not counted with why). The counts do not depend on the
    machine, but where bf16 matmuls are emulated (no AVX512-BF16, AMX or GPU: `learner.precision: auto` picks fp32
    there) a bf16 update of this size takes hours (1.3 GFLOP/s on a 2-core EPYC without AVX-512): the bf16 settings
    are left out and ZeRO-0 in fp32 is the headline."""
    if bf16_native:
        return HEADLINE, dict(VARIANTS), {}
    why = "this machine's bf16 matmuls are emulated; learner.precision auto picks fp32 here"
    headline = (HEADLINE[0], "fp32")
    counted = {name: v for name, v in VARIANTS.items() if v[1] == "fp32" and v != headline}
    skipped = {f"ZeRO-{stage}, {precision}": why for stage, precision in [HEADLINE, *VARIANTS.values()]
               if precision == "bf16"}
    return headline, counted, skipped

# ----------------------------------------------------------------------------------------------------
# The counter

# Not views by their schema (no alias annotation), yet a reshape of a contiguous tensor: no kernel runs.
ALSO_VIEWS = {torch.ops.aten._unsafe_view.default}
SYNC_OPS = {torch.ops.aten._local_scalar_dense.default}
DATA_DEPENDENT_OPS = {torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default}


def is_view(func) -> bool:
    """Whether an aten OpOverload only makes a view (its output aliases its input): no kernel on a GPU."""
    return func.is_view or func in ALSO_VIEWS


def shape_from_data(func, args) -> bool:
    """Whether the op's output shape depends on tensor values (a sync on CUDA, none on the CPU): nonzero,
    masked_select, and indexing with a boolean mask (on the CPU `aten.index` takes the mask without a nonzero)."""
    if func is torch.ops.aten.index.Tensor:
        return any(i is not None and i.dtype == torch.bool for i in args[1])
    return func in DATA_DEPENDENT_OPS


def call_site() -> str:
    """'path:line function' of the innermost frame outside torch and this file: who asked for the sync."""
    for frame in reversed(traceback.extract_stack()):
        if "/torch/" not in frame.filename and frame.filename != __file__:
            path = frame.filename.split("site-packages/")[-1].replace(str(ROOT) + "/", "")
            return f"{path}:{frame.lineno} {frame.name}"
    return "?"


def source(frame) -> str:
    """Whose code dispatched the operation running in `frame`, from the innermost frame outside torch and this file:
    "deepspeed" (DeepSpeed's optimizer and ZeRO bookkeeping: gradient buckets, partition copies, norms, clipping),
    "backward" (autograd's backward of the model and the loss, run from DeepSpeed's engine.backward or torch's),
    "transformers" (the model's forward), "grpo_train" (the learner's own code: log-prob kernels, loss,
    statistics), or "other"."""
    while frame is not None:
        path = frame.f_code.co_filename
        if "/torch/" not in path and path != __file__:
            if "/deepspeed/" in path:
                return "backward" if path.endswith("runtime/engine.py") and frame.f_code.co_name == "backward" \
                    else "deepspeed"
            for name in ("transformers", "grpo_train"):
                if f"/{name}/" in path:
                    return name
            return "other"
        frame = frame.f_back
    return "backward"  # autograd's engine threads have no Python caller


class DispatchCounter(TorchDispatchMode):
    """Counts the operations dispatched (views excluded) and the host syncs while active.

    ops: Counter of operation names; by_source: Counter of the operations by whose code dispatched them (`source`);
    syncs: Counter of call sites of `_local_scalar_dense` and `Tensor.tolist`; data_dependent: Counter of the call
    sites of `shape_from_data` ops. Every tensor is counted, whatever its device.
    """

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.by_source: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.data_dependent: Counter[str] = Counter()
        self._tolist = torch.Tensor.tolist

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNC_OPS:
            self.syncs[call_site()] += 1
        if shape_from_data(func, args):
            self.data_dependent[call_site()] += 1
        if not is_view(func):
            self.ops[str(func.overloadpacket)] += 1
            self.by_source[source(sys._getframe(1))] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        tolist, syncs = self._tolist, self.syncs

        def counted_tolist(tensor):
            syncs[call_site()] += 1
            return tolist(tensor)

        torch.Tensor.tolist = counted_tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)

    def totals(self) -> dict:
        return {"ops": sum(self.ops.values()), "syncs": sum(self.syncs.values()),
                "shape_from_data": sum(self.data_dependent.values()), "by_op": dict(self.ops.most_common()),
                "by_source": dict(self.by_source.most_common()),
                "sync_sites": dict(self.syncs.most_common()),
                "shape_from_data_sites": dict(self.data_dependent.most_common())}


def split_layers(depth1: int, depth2: int, depth: int = FULL_DEPTH) -> dict[str, int]:
    """Counts at depth 1 and 2 -> per decoder layer, outside the layers, and the count at `depth` layers."""
    per_layer = depth2 - depth1
    outside = depth1 - per_layer
    return {"per_layer": per_layer, "outside": outside, f"at_{depth}_layers": outside + depth * per_layer}


# ----------------------------------------------------------------------------------------------------
# The model, the batch, and the two steps


def make_model(folder: Path, layers: int) -> str:
    """Qwen2.5-0.5B's widths at `layers` decoder layers, randomly initialised (seed 0), fp32, saved in `folder`."""
    from transformers import Qwen2ForCausalLM

    from grpo_train.models import qwen25_config

    config = qwen25_config("0.5b")
    config.num_hidden_layers = layers
    config.layer_types = ["full_attention"] * layers
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return str(folder)


def random_batch(rows: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 0):
    """An UpdateBatch of `rows` sequences, G = GROUP per prompt, random tokens, random non-zero advantages."""
    from grpo_train.learner import make_update_batch

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (prompt_len,), generator=g).tolist() for _ in range(max(1, rows // GROUP))]
    prompt_ids = [prompts[row // GROUP % len(prompts)] for row in range(rows)]
    completion_ids = [torch.randint(3, vocab, (completion_len,), generator=g).tolist() for _ in range(rows)]
    advantages = torch.randn(rows, generator=g).sign() * (0.5 + torch.rand(rows, generator=g))  # never 0
    return make_update_batch(prompt_ids, completion_ids, [[-2.0] * completion_len] * rows, advantages, pad_id=0)


def learner_config(model_path: str, micro_batch_size: int, zero_stage: int = HEADLINE[0],
                   precision: str = HEADLINE[1]):
    from grpo_train.config import load_config

    return load_config(None, [
        f"model.name_or_path={model_path}", "model.max_model_len=256", f"rollout.max_tokens={COMPLETION_LEN}",
        f"algorithm.group_size={GROUP}", f"algorithm.prompts_per_step={PROMPTS}", "algorithm.kl_coef=0",
        "algorithm.seq_correction=none",  # the sampler log-probs are placeholders
        f"learner.zero_stage={zero_stage}", f"learner.precision={precision}",
        f"learner.micro_batch_size={micro_batch_size}"])


def count_update(model_path: str, micro_batch_size: int, zero_stage: int = HEADLINE[0],
                 precision: str = HEADLINE[1]) -> dict:
    """One Learner.update of the benchmark's batch, counted (after an uncounted update of 2 short rows), with the
    fused head: where the learner's rule takes it for a pass of `micro_batch_size` rows, else forced."""
    from grpo_train.forward import fusing_pays
    from grpo_train.learner import Learner

    learner = Learner(learner_config(model_path, micro_batch_size, zero_stage, precision), model_path,
                      total_optimizer_steps=4)
    taken = fusing_pays(learner.module, micro_batch_size * COMPLETION_LEN, learner.device)
    learner.fused = None if taken else True  # None: the learner's own choice (fusing_pays)
    vocab = learner.base_config.vocab_size
    learner.update(random_batch(2, 4, 4, vocab, seed=1))
    batch = random_batch(PROMPTS * GROUP, PROMPT_LEN, COMPLETION_LEN, vocab)
    started = time.perf_counter()
    with DispatchCounter() as counter:
        learner.update(batch)
    out = {**counter.totals(), "seconds": round(time.perf_counter() - started, 1),
           "fused_head": "taken by fusing_pays" if taken else "forced",
           "attn_implementation": learner.cfg.model.attn_implementation}
    del learner
    gc.collect()
    return out


def plain_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, input_ids: torch.Tensor,
               completion_len: int) -> None:
    """Forward, the cross-entropy of the last `completion_len` tokens at the positions that predict them
    (`logits_to_keep`: the positions the update projects), backward, the optimizer's step, zero_grad."""
    logits = model(input_ids=input_ids, logits_to_keep=completion_len + 1).logits[:, :-1]
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), input_ids[:, -completion_len:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def count_plain(model_path: str, attn_implementation: str, precision: str = HEADLINE[1]) -> dict:
    """One `plain_step` of the same model and tokens in `precision` with torch.optim.AdamW(fused=True), counted
    (after an uncounted step of 2 short rows, which creates the optimizer state)."""
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype,
                                                 attn_implementation=attn_implementation).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    vocab = model.config.vocab_size
    plain_step(model, optimizer, random_batch(2, 4, 4, vocab, seed=1).input_ids, 4)
    input_ids = random_batch(PROMPTS * GROUP, PROMPT_LEN, COMPLETION_LEN, vocab).input_ids
    started = time.perf_counter()
    with DispatchCounter() as counter:
        plain_step(model, optimizer, input_ids, COMPLETION_LEN)
    out = {**counter.totals(), "seconds": round(time.perf_counter() - started, 1)}
    del model, optimizer
    gc.collect()
    return out


def split_by_op(depth1: dict[str, int], depth2: dict[str, int]) -> dict[str, dict[str, int]]:
    """`split_layers` per operation name: {"per_layer": {op: n}, "outside": {op: n}}, zeros left out, largest first."""
    names = set(depth1) | set(depth2)
    split = {n: split_layers(depth1.get(n, 0), depth2.get(n, 0)) for n in names}
    return {part: dict(sorted(((n, s[part]) for n, s in split.items() if s[part]), key=lambda kv: -kv[1]))
            for part in ("per_layer", "outside")}


# ----------------------------------------------------------------------------------------------------
# Report


def summarise(update: dict[int, dict], plain: dict[int, dict], micro4: dict, chunks: dict,
              variants: dict[str, tuple[dict[int, dict], dict[int, dict]]] | None = None,
              headline: str = "ZeRO-0, bf16") -> dict:
    """The counts at depth 1 and 2 -> the figures written to dispatch.json. variants: name -> (the update's counts,
    the plain step's of the same dtype), the same update under other ZeRO stages and dtypes (VARIANTS)."""
    ops = {"update": split_layers(update[1]["ops"], update[2]["ops"]),
           "plain": split_layers(plain[1]["ops"], plain[2]["ops"])}
    at = f"at_{FULL_DEPTH}_layers"
    ratio = {k: round(ops["update"][k] / ops["plain"][k], 3) for k in ("per_layer", "outside", at)}
    variant_ops = {}
    for name, (counts, plain_counts) in (variants or {}).items():
        mine, theirs = split_layers(counts[1]["ops"], counts[2]["ops"]), split_layers(plain_counts[1]["ops"],
                                                                                      plain_counts[2]["ops"])
        variant_ops[name] = {"update": mine, "plain": theirs, "ratio": round(mine[at] / theirs[at], 3)}
    src1, src2 = update[1].get("by_source", {}), update[2].get("by_source", {})
    by_source = {src: split_layers(src1.get(src, 0), src2.get(src, 0)) for src in sorted(set(src1) | set(src2))}
    syncs = {"update_1_micro_batch": update[1]["syncs"], "update_4_micro_batches": micro4["syncs"],
             "update_depth_2": update[2]["syncs"], "plain": plain[1]["syncs"],
             "shape_from_data_1_micro_batch": update[1]["shape_from_data"],
             "shape_from_data_4_micro_batches": micro4["shape_from_data"]}
    return {
        "setting": {
            "model": "Qwen2.5-0.5B widths (hidden 896, MLP 4864, 14 heads, 2 KV heads, vocab 151,936, tied), random",
            "depths_counted": [1, 2], "extrapolated_to_layers": FULL_DEPTH,
            "batch": f"{PROMPTS} prompts x G={GROUP}: {PROMPTS * GROUP} sequences of {PROMPT_LEN} + {COMPLETION_LEN} "
                     "tokens, kl_coef 0, every advantage non-zero",
            "learner": f"{headline}, one process, micro_batch_size 16 (one pass)",
            "headline": headline,
            "plain": "forward, cross-entropy at the completion positions, backward, AdamW(fused=True) step",
            "attn_implementation": update[1]["attn_implementation"],
            "devices": "CPU only: every tensor is on the CPU, so every sync is counted (the host batch's too)",
            **chunks},
        "ops": ops, "ops_ratio": ratio, "goal_ops_ratio": GOAL_OPS_RATIO, "update_ops_by_source": by_source,
        "variants": variant_ops,
        "ops_goal_met": ratio[at] <= GOAL_OPS_RATIO,
        "syncs": syncs, "syncs_constant_per_optimizer_step": micro4["syncs"] == update[1]["syncs"],
        "sync_sites": {"update_1_micro_batch": update[1]["sync_sites"], "update_4_micro_batches": micro4["sync_sites"],
                       "plain": plain[1]["sync_sites"]},
        "shape_from_data_sites": {"update_1_micro_batch": update[1]["shape_from_data_sites"],
                                  "update_4_micro_batches": micro4["shape_from_data_sites"]},
        "ops_by_name": {"update": split_by_op(update[1]["by_op"], update[2]["by_op"]),
                        "plain": split_by_op(plain[1]["by_op"], plain[2]["by_op"])},
        "counts": {"update": {str(d): update[d]["ops"] for d in update},
                   "plain": {str(d): plain[d]["ops"] for d in plain}, "update_4_micro_batches_depth_1": micro4["ops"]},
        "seconds": {"update": {str(d): update[d]["seconds"] for d in update},
                    "plain": {str(d): plain[d]["seconds"] for d in plain}, "update_4_micro_batches": micro4["seconds"]},
    }


def report_text(result: dict) -> list[str]:
    """The figures with their targets (printed here and in bench_report's results.md)."""
    ops, ratio, s = result["ops"], result["ops_ratio"], result["syncs"]
    at = f"at_{FULL_DEPTH}_layers"
    rows = [f"| {k.replace('_', ' ')} | {ops['update'][k]} | {ops['plain'][k]} | {ratio[k]:.2f}x |"
            for k in ("per_layer", "outside", at)]
    for name, v in result.get("variants", {}).items():
        z = v["update"]
        rows.append(f"| {at.replace('_', ' ')}, {name} (per layer {z['per_layer']} against {v['plain']['per_layer']}, "
                    f"outside {z['outside']} against {v['plain']['outside']}) | {z[at]} | {v['plain'][at]} | "
                    f"{v['ratio']:.2f}x |")
    by_source = result.get("update_ops_by_source", {})
    sources = "; ".join(f"{src} {n['per_layer']} per layer, {n['outside']} outside"
                        for src, n in sorted(by_source.items(), key=lambda kv: -kv[1]["per_layer"]))
    return [
        f"Operations dispatched (views excluded) by one learner update against a plain forward + backward + fused "
        f"AdamW step of the same model, dtype and tokens ({result['setting']['batch']}; "
        f"{result['setting']['learner']}; "
        f"{result['setting']['head']}). {result['setting']['devices']}.", "",
        "| operations | update | plain step | update / plain |", "|---|---|---|---|", *rows, "",
        f"Update / plain at {FULL_DEPTH} layers: **{ratio[at]:.2f}x** (goal <= {result['goal_ops_ratio']}x: "
        f"{'met' if result['ops_goal_met'] else 'not met'}).", "",
        *([f"Not counted: {' and '.join(result['not_counted'])} "
           f"({next(iter(result['not_counted'].values()))}).", ""] if result.get("not_counted") else []),
        *([f"The update's operations by whose code dispatched them (`source`): {sources}.", ""] if sources else []),
        f"Host syncs (`.item()`/`float()`/`bool()` of a tensor, `.tolist()`) per optimizer step: "
        f"**{s['update_1_micro_batch']}** with 1 micro-batch, **{s['update_4_micro_batches']}** with 4 "
        f"({s['update_depth_2']} at depth 2; the plain step {s['plain']}); goal constant per optimizer step: "
        f"{'met' if result['syncs_constant_per_optimizer_step'] else 'not met'}. Operations whose output shape depends "
        f"on values (nonzero, masked_select, boolean-mask indexing: a sync on CUDA if the tensor is there): "
        f"{s['shape_from_data_1_micro_batch']} and {s['shape_from_data_4_micro_batches']}.",
    ]


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    return p


def main() -> None:
    args = parser().parse_args()
    from grpo_train import logprob_kernels as kernels
    from grpo_train.distributed import init_distributed
    from grpo_train.models import QWEN25_VOCAB

    torch.set_num_threads(THREADS)
    init_distributed()
    started = time.perf_counter()
    # The chunk sizes the code picks on CUDA (module-level patches: both are read at each pass).
    kernels.HEAD_CHUNK_ELEMENTS = kernels.GPU_HEAD_CHUNK_ELEMENTS
    kernels.CHUNK_ELEMENTS = kernels.GPU_CHUNK_ELEMENTS
    from grpo_train.config.auto import native_bf16

    headline, counted, skipped = counted_settings(native_bf16())
    update, plain, variants = {}, {}, {name: ({}, {}) for name in counted}
    plains = {}  # precision -> depth -> the plain step's counts
    with tempfile.TemporaryDirectory() as tmp:
        for depth in (1, 2):
            path = make_model(Path(tmp) / f"depth{depth}", depth)
            update[depth] = count_update(path, MICRO_BATCHES[0], *headline)
            attn = update[depth]["attn_implementation"]
            for precision in sorted({headline[1], *(v[1] for v in counted.values())}):
                plains.setdefault(precision, {})[depth] = count_plain(path, attn, precision)
            plain[depth] = plains[headline[1]][depth]
            for name, (stage, precision) in counted.items():
                variants[name][0][depth] = count_update(path, MICRO_BATCHES[0], stage, precision)
                variants[name][1][depth] = plains[precision][depth]
                print(f"depth {depth}, {name}: update {variants[name][0][depth]['ops']} ops", flush=True)
            print(f"depth {depth}: update {update[depth]['ops']} ops, {update[depth]['syncs']} syncs "
                  f"({update[depth]['seconds']} s); plain {plain[depth]['ops']} ops, {plain[depth]['syncs']} syncs "
                  f"({plain[depth]['seconds']} s)", flush=True)
            if depth == 1:
                micro4 = count_update(path, MICRO_BATCHES[1], *headline)
                print(f"depth 1, 4 micro-batches: {micro4['ops']} ops, {micro4['syncs']} syncs", flush=True)
    chunks = {"fused_head_16_rows": update[1]["fused_head"], "fused_head_4_rows": micro4["fused_head"],
              "head_chunk_rows": kernels.GPU_HEAD_CHUNK_ELEMENTS // QWEN25_VOCAB,
              "log_softmax_chunk_rows": kernels.GPU_CHUNK_ELEMENTS // QWEN25_VOCAB}
    chunks["head"] = (f"fused head ({chunks['fused_head_16_rows']} at 16 rows, {chunks['fused_head_4_rows']} at 4) "
                      f"in the CUDA chunks: {chunks['head_chunk_rows']} rows per head chunk, "
                      f"{chunks['log_softmax_chunk_rows']} per log-softmax chunk (the CPU sizes patched to the GPU's)")
    result = summarise(update, plain, micro4, chunks, variants, f"ZeRO-{headline[0]}, {headline[1]}")
    result["not_counted"] = skipped
    result["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(report_text(result)))
    for name, by in result["ops_by_name"].items():
        print(f"{name}, per layer: " + ", ".join(f"{op} {n}" for op, n in by["per_layer"].items()))
    for micro in ("update_1_micro_batch", "update_4_micro_batches"):
        print(f"sync sites, {micro}: " + "; ".join(f"{k} x{v}" for k, v in result["sync_sites"][micro].items()))
    print(f"wrote {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
