"""What vLLM is given, shared by the colocated engine (engines.py) and the rollout servers (servers.py), so that both
sample alike: the engine's settings (`llm_args`) and one request's sampling fields (`sampling_fields`).
"""

from __future__ import annotations

from grpo_train.rollout.records import SamplingSpec


def llm_args(model_path: str, *, dtype: str, max_model_len: int, seed: int, cpu_kvcache_gb: float,
             gpu_memory_utilization: float, tensor_parallel_size: int, enable_sleep_mode: bool, on_gpu: bool,
             world_size: int) -> dict:
    """The keyword arguments of `vllm.LLM` for a colocated engine, and a rollout server's `vllm serve` flags
    (server_launch.server_command); tests/test_gpu_api.py checks the GPU set against the installed vLLM's EngineArgs."""
    args = dict(model=model_path, dtype=dtype, max_model_len=max_model_len, seed=seed,
                tensor_parallel_size=tensor_parallel_size, logprobs_mode="processed_logprobs",
                use_tqdm_on_load=False)  # a progress bar per engine start; the run's log has no use for it
    if world_size > 1:
        args["distributed_executor_backend"] = "external_launcher"  # one engine per torchrun rank (SPMD)
    if on_gpu:
        args.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode)
    else:
        # The same bytes VLLM_CPU_KVCACHE_SPACE would set, but fractional GiB are allowed.
        # Eager: on CPU torch.compile added ~2 min of start-up and was slower for these small models.
        # No chunked prefill: per-request seeds crash it on CPU (engines.py's docstring).
        # Blocks of 32 tokens instead of the CPU default 128: the prefix cache reuses whole blocks only,
        # and a few-shot prompt's shared part (~240 tokens in the demo) then is 7/8 cached, not 1/2;
        # the demo's 200-problem eval prefill takes half as long (6 s against 12 s, bf16) at equal decode speed.
        args.update(kv_cache_memory_bytes=int(cpu_kvcache_gb * 2**30), enforce_eager=True, block_size=32,
                    enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 4096))
    return args


def sampling_fields(spec: SamplingSpec, seed: int) -> dict:
    """The SamplingParams fields of one request for `spec`, with the sampled tokens' log-probs; `seed` is the
    request's (none when greedy). The colocated engine builds SamplingParams from them, a rollout server receives
    them as JSON (rollout/servers.py): both sample alike."""
    return dict(n=spec.n, temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k,
                max_tokens=spec.max_tokens, stop=list(spec.stop), logprobs=0,
                seed=seed if spec.temperature > 0 else None)
