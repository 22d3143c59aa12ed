"""Rollouts: G completions per prompt with the sampler's per-token log-probs, and the new weights after every update.

    from grpo_train.rollout import SamplingSpec, make_engine, rollout_seed

- records.py: what an engine is asked and returns (SamplingSpec, Rollout, StreamRequest, StreamDelta), the
  `RolloutEngine` / `StreamingEngine` interfaces, request seeds, and `EngineRanks` (tensor-parallel engines)
- engines.py: the engines (`VLLMEngine`, in-process vLLM, colocated with the learner; `HFEngine`, transformers'
  generate as a fallback and a reference) and `make_engine`; placement, memory and reproducibility in its docstring
- pool.py: groups in flight across steps for asynchronous GRPO (`rollout.max_staleness` >= 1): bounded staleness
  and partial rollouts on a streaming engine

vLLM is imported only inside the vLLM engine's methods.
"""

from grpo_train.rollout.engines import HFEngine, VLLMEngine, llm_args, make_engine, sampling_params
from grpo_train.rollout.pool import Phase, RolloutPool, staleness
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

__all__ = [
    "EngineRanks", "HFEngine", "Phase", "Rollout", "RolloutEngine", "RolloutPool", "SamplingSpec", "StreamDelta",
    "StreamRequest", "StreamingEngine", "VLLMEngine", "llm_args", "make_engine", "rollout_seed", "sampling_params",
    "staleness",
]
