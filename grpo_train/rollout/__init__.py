"""Rollouts: G completions per prompt with the sampler's per-token log-probs, and the new weights after every update.

    from grpo_train.rollout import SamplingSpec, make_engine, rollout_seed

- records.py: what an engine is asked and returns (SamplingSpec, Rollout, StreamRequest, StreamDelta), the
  `RolloutEngine` / `StreamingEngine` interfaces, request seeds, and `EngineRanks` (tensor-parallel engines)
- engines.py: the engines (`VLLMEngine`, in-process vLLM, colocated with the learner; `HFEngine`, transformers'
  generate as a fallback and a reference) and `make_engine`; placement, memory and reproducibility in its docstring
- vllm_args.py: what vLLM is given (`llm_args`, `sampling_fields`), shared by the colocated engine and the servers
- servers.py: `ServerEngine`, the same interface over vLLM servers (`vllm serve`, rollout.placement servers): started
  by the run or at URLs; server_launch.py starts, checks and stops their processes
- weight_sync.py: where the learner's weights go after every update (each engine's `load_weights`), and the check
  that the engine then samples what the learner computes (`sync_logprob_gap`)
- transfer.py: the learner's weights into the servers after every update through vLLM's weight-transfer engines (NCCL
  on GPUs, a gloo backend registered with vLLM's factory on CPU); imported only with placement servers
- async_pool.py: groups in flight across steps for asynchronous GRPO (`rollout.max_staleness` >= 1): bounded staleness
  and partial rollouts on a streaming engine
- server_pool.py: the same pool on rollout servers, whose requests go on through the learner's update (paused with
  vLLM's keep mode around the weight transfer, each token labelled with its weight version by the server)
- step_cost.py: the seconds a step would take at each staleness bound k, predicted from the run's phases and
  completion lengths (the cost side of rollout.max_staleness auto: grpo_train/pace.py)

vLLM is imported only inside the vLLM engine's methods, and by transfer.py (loaded only for rollout servers).
"""

from grpo_train.rollout.async_pool import Phase, RolloutPool, staleness, token_staleness
from grpo_train.rollout.engines import HFEngine, VLLMEngine, make_engine, sampling_params
from grpo_train.rollout.records import (
    EngineRanks,
    Rollout,
    RolloutEngine,
    SamplingSpec,
    StreamDelta,
    StreamingEngine,
    StreamRequest,
    rollout_seed,
)
from grpo_train.rollout.server_pool import ServerPool
from grpo_train.rollout.vllm_args import llm_args, sampling_fields

__all__ = [
    "EngineRanks", "HFEngine", "Phase", "Rollout", "RolloutEngine", "RolloutPool", "SamplingSpec", "ServerPool",
    "StreamDelta", "StreamRequest", "StreamingEngine", "VLLMEngine", "llm_args", "make_engine", "rollout_seed",
    "sampling_fields", "sampling_params", "staleness", "token_staleness",
]
