"""Per-GPU memory estimate of a GRPO run, printed by `grpo-train --config F --print-config`.

Each rank holds a DeepSpeed learner and a colocated vLLM engine. In bytes, with P parameters, T of them
trainable (P, or the LoRA adapters' count), N ranks, ZeRO stage z:

- learner weights: P * w, with w = 2 (bf16) or 4 (fp32); divided by N under ZeRO-3.
- gradients: T * w; divided by N from ZeRO-2 on. ZeRO-0 (grpo_train/flat_optimizer.py): T * 8, autograd's
  gradients beside their flat sum (bf16: 2 + a gathered copy 2 + the fp32 sum 4; fp32: 4 + 4).
- optimizer: T * 12 with bf16 (fp32 master copy + Adam m + v, 4 bytes each), T * 8 with fp32 (m + v only;
  the weights are their own master copy); divided by N from ZeRO-1 on. Weights + gradients + optimizer
  are the ZeRO paper's 16 bytes per trainable parameter in both precisions (Rajbhandari et al. 2020, Sec. 3).
- reference model (KL penalty on, no LoRA): P * w more, divided by N under ZeRO-3. With LoRA the reference
  is the policy with its adapters switched off: no extra memory.
- activations of one micro-batch of b sequences of s tokens (the learner's forward + backward):
  * per token and layer, for hidden size h, MLP width i and a = w activation bytes, a * (9h + 4i): the two
    RMSNorm inputs kept in fp32 (4h + 4h bytes at a = 2), the inputs of the q/k/v, o and gate/up
    projections (3 x 2h), the attention's q and output (2 x 2h), and the SwiGLU MLP's gate, up, SiLU(gate)
    and product (4 x 2i); k and v are small under grouped-query attention and are left out.
  * with gradient checkpointing only each layer's input is kept (a * h per token and layer), plus one
    layer's full set while it is recomputed in backward;
  * the output head, over the c completion positions of each sequence only (c = rollout.max_tokens). The
    learner's fused log-probs (grpo_train/forward.py) project r = min(b * c, E // V) rows at a time, E the
    head's chunk size in elements (logprob_kernels.GPU_HEAD_CHUNK_ELEMENTS, 2^27; 2^25 on CPU), and recompute them in
    backward: r * V * 2a for one chunk's logits and their gradient, plus V * h * a for the head weight's gradient
    of one chunk while it is added to the others'. The reference path (`fused=False`) keeps the whole logits and,
    in backward, their gradient: b * c * V * 2a (for Qwen's 152k vocabulary larger than all layers together).
- old / reference log-prob passes (no gradient, same micro-batch): nothing is kept for a backward pass, so
  one layer's set at a time, a * (9h + 4i) per token, plus one head chunk's logits, r * V * a (b * c * V * a on
  the reference path; the fp32 log-softmax runs a chunk of rows at a time).
- vLLM: gpu_memory_utilization * GPU memory (its weights, P * w_vllm / tensor_parallel_size, and the KV
  cache in what is left).

The peak is the largest of three phases. Rollout: learner weights, gradients, optimizer, reference and the vLLM
share. Log-prob passes: the same plus those passes' activations, and plus the vLLM share only when sleep mode is off
(the trainer puts vLLM to sleep before these passes; asleep, vLLM frees its KV cache and discards its weights, which
the weight sync reloads). Update: likewise with the update's activations. Not counted: the fp32 log-softmax's
transients (on a GPU up to ~3 x r x V x 4 bytes while a head chunk's rows are normalised, ~1.5 GiB for Qwen2.5's
vocabulary), the CUDA context, NCCL and DeepSpeed buffers (ZeRO buckets, ZeRO-3 gathered layers) and allocator
fragmentation, so keep 10-15% of the GPU free. A sequence is taken at its longest, model.max_model_len tokens,
rollout.max_tokens of them completion tokens; with learner.max_tokens_per_micro_batch a micro-batch holds at most
that many padded tokens, b * s = the budget, all of them counted as completion positions (the head's term).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

from grpo_train.config import Config

GIB = 2**30
DEFAULT_GPU_GIB = 80.0  # A100 / H100 80GB
REPORT_WORLD_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class ModelDims:
    """The shape of a decoder-only transformer with a SwiGLU MLP (Qwen2, Llama)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    vocab_size: int
    tied_embeddings: bool
    qkv_bias: bool  # Qwen2 has biases on q/k/v, Llama none
    head_dim: int = 0  # 0: hidden_size // num_heads

    @property
    def q_dim(self) -> int:
        return self.num_heads * (self.head_dim or self.hidden_size // self.num_heads)

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * (self.head_dim or self.hidden_size // self.num_heads)

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer in one block, by its Hugging Face name."""
        h, i = self.hidden_size, self.intermediate_size
        return {"q_proj": (h, self.q_dim), "k_proj": (h, self.kv_dim), "v_proj": (h, self.kv_dim),
                "o_proj": (self.q_dim, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def param_count(self) -> int:
        h = self.hidden_size
        linear = sum(n_in * n_out for n_in, n_out in self.module_shapes().values())
        bias = (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        per_layer = linear + bias + 2 * h  # two RMSNorm weights
        embeddings = self.vocab_size * h * (1 if self.tied_embeddings else 2)
        return embeddings + self.num_layers * per_layer + h  # + the final norm


# Published configs (config.json on the hub), so estimates need no network; the embedded models too.
KNOWN_MODELS = {
    "Qwen/Qwen2.5-0.5B-Instruct": ModelDims(896, 4864, 24, 14, 2, 151936, True, True),
    "Qwen/Qwen2.5-1.5B-Instruct": ModelDims(1536, 8960, 28, 12, 2, 151936, True, True),
    "Qwen/Qwen2.5-Math-7B": ModelDims(3584, 18944, 28, 28, 4, 152064, False, True),
    "Qwen/Qwen2.5-7B-Instruct": ModelDims(3584, 18944, 28, 28, 4, 152064, False, True),
    "tiny-qwen2": ModelDims(128, 256, 2, 4, 2, 49152, True, True),
    "smollm2-135m-instruct": ModelDims(576, 1536, 30, 9, 3, 49152, True, False),
}


def dims_from_config(config: dict) -> ModelDims:
    """ModelDims from a Hugging Face config.json (Qwen2 / Llama field names)."""
    return ModelDims(
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        num_kv_heads=config.get("num_key_value_heads") or config["num_attention_heads"],
        vocab_size=config["vocab_size"],
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        head_dim=config.get("head_dim") or 0,
    )


def model_dims(name_or_path: str) -> ModelDims | None:
    """The built-in table, else a local folder's config.json, else the local HF cache; None if unknown."""
    if name_or_path in KNOWN_MODELS:
        return KNOWN_MODELS[name_or_path]
    config_file = Path(name_or_path).expanduser() / "config.json"
    if not config_file.is_file() and name_or_path.count("/") == 1:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name_or_path, "config.json")  # never touches the network
        config_file = Path(cached) if isinstance(cached, str) else config_file
    if not config_file.is_file():
        return None
    return dims_from_config(json.loads(config_file.read_text()))


def lora_param_count(dims: ModelDims, rank: int, target_modules: list[str]) -> int:
    """Trainable LoRA parameters: rank * (in + out) for every targeted linear layer of every block."""
    shapes = dims.module_shapes()
    unknown = sorted(set(target_modules) - set(shapes))
    if unknown:
        raise ValueError(f"model.lora.target_modules: {unknown} are not linear layers of {sorted(shapes)}")
    return dims.num_layers * sum(rank * (shapes[m][0] + shapes[m][1]) for m in set(target_modules))


# ----------------------------------------------------------------------------------------------------
# The estimate


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU GiB of each part, and the peak over the rollout and update phases."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float
    logprob_pass: float  # activations of one no-grad old / reference log-prob micro-batch
    vllm: float  # the share vLLM may take: its weights plus the KV cache
    vllm_kv_cache: float  # what is left of that share for the KV cache after vLLM's weights
    total: float  # the peak: max(rollout phase, log-prob phase, update phase)
    gpu: float

    @property
    def fits(self) -> bool:
        return self.total <= self.gpu and self.vllm_kv_cache > 0


# logprob_kernels.GPU_HEAD_CHUNK_ELEMENTS (memory.py imports no torch module; tests/test_memory.py checks they agree)
HEAD_CHUNK_ELEMENTS = 2**27
FUSE_MIN_ELEMENTS = 2**28  # forward.FUSE_MIN_ELEMENTS: a pass fuses where its logits would hold more elements


def head_rows(tokens: int, vocab_size: int, head_chunk_elements: int | None) -> int:
    """Rows of logits the head holds at once: one chunk of the fused path, or all of them (None: reference)."""
    return tokens if head_chunk_elements is None else min(tokens, max(1, head_chunk_elements // vocab_size))


def activation_bytes(*, micro_batch_size: int, seq_len: int, completion_len: int, hidden_size: int,
                     intermediate_size: int, num_layers: int, vocab_size: int, bytes_per_activation: int,
                     gradient_checkpointing: bool, head_chunk_elements: int | None = HEAD_CHUNK_ELEMENTS) -> int:
    """Bytes kept for the backward pass of one micro-batch (formulas in the module docstring); head_chunk_elements
    None: the reference log-prob path."""
    a = bytes_per_activation
    tokens = micro_batch_size * seq_len
    one_layer = tokens * a * (9 * hidden_size + 4 * intermediate_size)
    layers = (tokens * a * hidden_size * num_layers + one_layer) if gradient_checkpointing else one_layer * num_layers
    rows = head_rows(micro_batch_size * completion_len, vocab_size, head_chunk_elements)
    if head_chunk_elements is None:  # the logits and their gradient
        return layers + rows * vocab_size * 2 * a
    return layers + rows * vocab_size * 2 * a + vocab_size * hidden_size * a


def logprob_pass_bytes(*, micro_batch_size: int, seq_len: int, completion_len: int, hidden_size: int,
                       intermediate_size: int, vocab_size: int, bytes_per_activation: int,
                       head_chunk_elements: int | None = HEAD_CHUNK_ELEMENTS) -> int:
    """Peak bytes of one no-grad log-prob micro-batch (formulas in the module docstring)."""
    a = bytes_per_activation
    rows = head_rows(micro_batch_size * completion_len, vocab_size, head_chunk_elements)
    return micro_batch_size * seq_len * a * (9 * hidden_size + 4 * intermediate_size) + rows * vocab_size * a


def estimate_memory(*, params: int, trainable: int, zero_stage: int, world_size: int, precision: str,
                    micro_batch_size: int, seq_len: int, completion_len: int, hidden_size: int,
                    intermediate_size: int, num_layers: int, vocab_size: int, gradient_checkpointing: bool,
                    reference: bool,
                    gpu_memory_utilization: float, gpu_memory_gib: float, vllm_bytes_per_param: int = 2,
                    tensor_parallel_size: int = 1, vllm_sleeps: bool = True, lora: bool = False,
                    fused_head: bool = True, colocated: bool = True) -> MemoryEstimate:
    """Per-GPU memory in GiB. `params` counts every weight (LoRA adapters included), `trainable` those
    that get gradients and optimizer state; `precision` is the learner's "bf16" or "fp32". With `lora`
    vLLM holds the merged model, without the adapters' own parameters. `fused_head` (learner.fused_head): the
    log-probs through the head a chunk of rows at a time; False, the whole [n, C, V] logits. Not `colocated`
    (rollout.placement servers): no vLLM on the learner's GPUs."""
    fused = fused_head and micro_batch_size * completion_len * vocab_size > FUSE_MIN_ELEMENTS  # forward.fusing_pays
    head_chunk_elements = HEAD_CHUNK_ELEMENTS if fused else None
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"precision must be bf16 or fp32, got {precision!r}")
    w = 2 if precision == "bf16" else 4
    optimizer_bytes = 12 if precision == "bf16" else 8
    n = world_size
    weights = params * w / (n if zero_stage >= 3 else 1)
    gradients = trainable * 8 if zero_stage == 0 else trainable * w / (n if zero_stage >= 2 else 1)
    optimizer = trainable * optimizer_bytes / (n if zero_stage >= 1 else 1)
    ref = params * w / (n if zero_stage >= 3 else 1) if reference else 0.0
    activations = activation_bytes(
        micro_batch_size=micro_batch_size, seq_len=seq_len, completion_len=completion_len,
        hidden_size=hidden_size, intermediate_size=intermediate_size, num_layers=num_layers,
        vocab_size=vocab_size, bytes_per_activation=w, gradient_checkpointing=gradient_checkpointing,
        head_chunk_elements=head_chunk_elements)
    logprob_pass = logprob_pass_bytes(
        micro_batch_size=micro_batch_size, seq_len=seq_len, completion_len=completion_len,
        hidden_size=hidden_size, intermediate_size=intermediate_size, vocab_size=vocab_size,
        bytes_per_activation=w, head_chunk_elements=head_chunk_elements)
    vllm = gpu_memory_utilization * gpu_memory_gib * GIB if colocated else 0.0
    vllm_weights = (params - trainable if lora else params) * vllm_bytes_per_param / tensor_parallel_size
    vllm_weights = vllm_weights if colocated else 0.0
    static = weights + gradients + optimizer + ref
    rollout_phase = static + vllm
    logprob_phase = static + logprob_pass + (0.0 if vllm_sleeps else vllm)
    update_phase = static + activations + (0.0 if vllm_sleeps else vllm)
    return MemoryEstimate(
        weights=weights / GIB, gradients=gradients / GIB, optimizer=optimizer / GIB, reference=ref / GIB,
        activations=activations / GIB, logprob_pass=logprob_pass / GIB, vllm=vllm / GIB,
        vllm_kv_cache=(vllm - vllm_weights) / GIB, total=max(rollout_phase, logprob_phase, update_phase) / GIB,
        gpu=gpu_memory_gib)


def micro_batch_tokens(cfg: Config) -> tuple[int, int]:
    """(rows, tokens per row) of the largest pass the learner may run: micro_batch_size rows of max_model_len, or,
    with learner.max_tokens_per_micro_batch, its budget of padded tokens counted as one row (the activations
    scale with the tokens, however they are split into rows)."""
    budget = cfg.learner.max_tokens_per_micro_batch
    return (1, budget) if budget else (cfg.learner.micro_batch_size, cfg.model.max_model_len)


def estimate_for_config(cfg: Config, world_size: int, gpu_memory_gib: float = DEFAULT_GPU_GIB
                        ) -> MemoryEstimate | None:
    """The estimate for a resolved config on `world_size` GPUs; None when the model's shape is unknown."""
    dims = model_dims(cfg.model.name_or_path)
    if dims is None:
        return None
    params = dims.param_count()
    lora = cfg.model.lora
    trainable = lora_param_count(dims, lora.rank, lora.target_modules) if lora.rank > 0 else params
    micro_batch_size, seq_len = micro_batch_tokens(cfg)
    return estimate_memory(
        params=params + (trainable if lora.rank > 0 else 0), trainable=trainable,
        zero_stage=cfg.learner.zero_stage, world_size=world_size, precision=cfg.learner.precision,
        micro_batch_size=micro_batch_size, seq_len=seq_len,
        completion_len=seq_len if cfg.learner.max_tokens_per_micro_batch else min(cfg.rollout.max_tokens, seq_len),
        hidden_size=dims.hidden_size, intermediate_size=dims.intermediate_size, num_layers=dims.num_layers,
        vocab_size=dims.vocab_size, gradient_checkpointing=cfg.model.gradient_checkpointing,
        reference=cfg.algorithm.kl_coef > 0 and lora.rank == 0,
        gpu_memory_utilization=cfg.rollout.gpu_memory_utilization, gpu_memory_gib=gpu_memory_gib,
        vllm_bytes_per_param=2 if cfg.model.dtype == "bfloat16" else 4,
        tensor_parallel_size=cfg.rollout.tensor_parallel_size, vllm_sleeps=cfg.rollout.enable_sleep_mode,
        lora=lora.rank > 0, fused_head=cfg.learner.fused_head, colocated=cfg.rollout.placement == "colocated")


def micro_batch_description(cfg: Config) -> str:
    if cfg.learner.max_tokens_per_micro_batch:
        return f"micro-batches of at most {cfg.learner.max_tokens_per_micro_batch} padded tokens"
    return f"micro-batch {cfg.learner.micro_batch_size} x {cfg.model.max_model_len} tokens"


def memory_report(cfg: Config, world_size: int | None = None, gpu_memory_gib: float = DEFAULT_GPU_GIB) -> str:
    """YAML comment lines (so --print-config output stays valid YAML): one row per world size.

    `world_size` None (no launcher) gives rows for 1, 2, 4 and 8 GPUs.
    """
    dims = model_dims(cfg.model.name_or_path)
    if dims is None:
        return (f"# per-GPU memory estimate: shape of {cfg.model.name_or_path!r} unknown "
                "(not in grpo_train.memory.KNOWN_MODELS, no local config.json)")
    lora, learner = cfg.model.lora, cfg.learner
    params = dims.param_count()
    trainable = lora_param_count(dims, lora.rank, lora.target_modules) if lora.rank > 0 else params
    on_off = lambda flag: "on" if flag else "off"  # noqa: E731
    lines = [
        f"# per-GPU memory estimate, GiB of a {gpu_memory_gib:g} GiB GPU (formulas: grpo_train/memory.py)",
        f"# {cfg.model.name_or_path}: {params / 1e6:.0f}M params, {trainable / 1e6:.0f}M trainable, "
        f"ZeRO-{learner.zero_stage}, {learner.precision}",
        f"# {micro_batch_description(cfg)}, gradient "
        f"checkpointing {on_off(cfg.model.gradient_checkpointing)}, "
        f"vLLM sleep mode {on_off(cfg.rollout.enable_sleep_mode)}" if cfg.rollout.placement == "colocated" else
        "rollout on servers: no vLLM on the learner's GPUs (a server's: rollout.servers in docs/gpu-and-clusters.md)",
        f"# old/reference log-prob passes: {estimate_for_config(cfg, 1, gpu_memory_gib).logprob_pass:.2f} of "
        f"activations, {'with vLLM asleep' if cfg.rollout.enable_sleep_mode else 'next to the vLLM share'} "
        "(counted in the peak)",
        "# gpus  weights  grads  optimizer    ref  activations  vllm (kv cache)   peak  fits",
    ]
    for n in (world_size,) if world_size else REPORT_WORLD_SIZES:
        e = estimate_for_config(cfg, n, gpu_memory_gib)
        lines.append(f"# {n:>4}  {e.weights:7.2f}  {e.gradients:5.2f}  {e.optimizer:9.2f}  "
                     f"{e.reference:5.2f}  {e.activations:11.2f}  {e.vllm:4.1f} ({e.vllm_kv_cache:5.1f})     "
                     f"{e.total:6.1f}  {'yes' if e.fits else 'NO'}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------
# The measurement


class PhasePeaks:
    """The measured side of the estimate: PyTorch's peak GPU allocation in each phase of a step, in GiB.

        peaks = PhasePeaks()
        peaks.start()            # at the top of a step
        ...; peaks.mark("rollout")
        ...; peaks.mark("update")
        peaks.metrics()          # {"memory/rollout_gib": ..., "memory/update_gib": ..., "memory/host_rss_gib": ...}

    Each mark reads the allocator's high-water mark since the previous mark and resets it, so a phase's figure is
    the most that was allocated at any moment inside it (the learner's state included). Memory vLLM's sleep mode
    allocates in its own pool is not seen by the allocator's statistics. No GPU figure without CUDA; the host's
    (`host_usage`) on every device.
    """

    def __init__(self) -> None:
        import torch

        self.cuda = torch.cuda if torch.cuda.is_available() else None
        self.peaks: dict[str, float] = {}

    def start(self) -> None:
        if self.cuda is not None:
            self.cuda.reset_peak_memory_stats()

    def mark(self, phase: str) -> None:
        if self.cuda is not None:
            self.peaks[phase] = self.cuda.max_memory_allocated() / GIB
            self.cuda.reset_peak_memory_stats()

    def metrics(self) -> dict[str, float]:
        out = {f"memory/{phase}_gib": gib for phase, gib in self.peaks.items()}
        self.peaks = {}
        return out | host_usage()


def host_usage() -> dict[str, float]:
    """This process's host memory and open files now, and its child processes' memory (a colocated vLLM engine
    core, the verifier's workers, rollout servers the run started): the figures a long run watches for leaks
    (memory/host_* in docs/metrics.md). Empty where the platform does not tell (psutil's AccessDenied)."""
    import psutil

    try:
        me = psutil.Process()
        children = me.children(recursive=True)
        out = {"memory/host_rss_gib": me.memory_info().rss / GIB, "memory/host_open_files": float(me.num_fds())}
    except (psutil.Error, AttributeError):  # AttributeError: num_fds is POSIX only
        return {}
    rss = 0
    for child in children:
        with contextlib.suppress(psutil.Error):  # exited since the listing
            rss += child.memory_info().rss
    return out | {"memory/host_children_rss_gib": rss / GIB}
