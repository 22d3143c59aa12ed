"""The weight sync: after every update the learner's weights go into the rollout engine, and a check that the engine
then samples what the learner computes.

    engine.load_weights(learner.policy_weights())        # every step, after the update (trainer.py, weight sync)
    gap = sync_logprob_gap(engine, learner, prompt_ids, pad_id)    # every run.check_sync_every steps

Where the weights go, by engine:
- the learner's side: `Learner.policy_weights()` is grpo_train/hf_weights.py's `PolicyWeights`, the model as
  (Hugging Face checkpoint name, full tensor) pairs, ZeRO-3 shards gathered one module at a time;
- colocated vLLM (engines.py, `VLLMEngine.load_weights`): in process, vLLM's `reload_weights` on its workers;
- rollout servers (servers.py, `ServerEngine.load_weights`): each server paused with vLLM's keep mode, the tensors
  sent through vLLM's weight-transfer engines (transfer.py: NCCL on GPUs, gloo on CPU), the server resumed;
- the transformers engine (engines.py, `HFEngine.load_weights`): each tensor copied into its parameter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from grpo_train.rollout.records import RolloutEngine, SamplingSpec
from grpo_train.update_batch import make_update_batch

if TYPE_CHECKING:
    from grpo_train.learner import Learner


def sync_logprob_gap(engine: RolloutEngine, learner: Learner, prompt_ids: list[int], pad_id: int) -> float:
    """Max |engine logprob - learner logprob| over a short greedy completion, right after a weight sync
    (train/sync_logprob_max_diff). The engine's times of the check's request are dropped (engine.take_times): it is
    not a step's rollout."""
    greedy = engine.generate([prompt_ids], SamplingSpec(n=1, temperature=0.0, max_tokens=8, seed=0))[0]
    batch = make_update_batch([greedy.prompt_token_ids], [greedy.completion_token_ids], [greedy.logprobs],
                              torch.zeros(1), pad_id=pad_id)
    learner_logp = learner.logprobs(batch, temperature=1.0)  # greedy logprobs are the raw log-softmax
    engine.take_times()
    return float(((learner_logp - batch.sampler_logp) * batch.completion_mask).abs().max())
