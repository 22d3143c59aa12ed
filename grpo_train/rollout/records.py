"""Rollout records, the interface every engine implements, and which prompts a rank's engine generates.

- `SamplingSpec`, `Rollout`: what one `generate` call is asked and returns (one record per completion).
- `StreamRequest`, `StreamDelta`: the request-level interface of a streaming engine (grpo_train/rollout/async_pool.py).
- `rollout_seed`: the seed of a request, mixed from (run seed, step, ...) keys.
- `EngineRanks`: under tensor parallelism, which ranks share one engine, the prompts it generates, and which
  completions each rank keeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from grpo_train.config import ConfigError, RolloutConfig

# ----------------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class SamplingSpec:
    """Sampling parameters of one `generate` call (a rollout batch, or a greedy eval with n=1, temperature 0)."""

    n: int  # completions per prompt (G)
    temperature: float  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    max_tokens: int = 256  # completion length cap
    stop: tuple[str, ...] = ()  # extra stop strings; EOS always stops
    seed: int = 0  # batch seed; each prompt's request seed is derived from it

    @classmethod
    def from_config(cls, cfg: RolloutConfig, n: int, seed: int) -> SamplingSpec:
        return cls(n=n, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                   max_tokens=cfg.max_tokens, stop=tuple(cfg.stop), seed=seed)


@dataclass
class Rollout:
    """One completion. Token ids exclude the prompt; logprobs[t] is the sampler's logprob of token t."""

    prompt_index: int  # position of the prompt in the batch passed to `generate`
    prompt_token_ids: list[int]
    completion_token_ids: list[int]  # includes the EOS token that ended it, if any
    logprobs: list[float]  # one per completion token (see the module docstring for the definition)
    finish_reason: str  # "stop" (EOS or a stop string) or "length"
    truncated: bool  # stopped by max_tokens (or max_model_len) rather than by EOS / a stop string
    versions: list[int] = field(default_factory=list)  # rollout pool: each token's weight version (else empty)


@dataclass(frozen=True)
class StreamRequest:
    """One completion to generate, or to go on generating, through an engine's request-level API (the rollout pool:
    grpo_train/rollout/async_pool.py). token_ids: the prompt, then the completion's tokens so far (its prefix)."""

    request_id: str
    token_ids: list[int]
    spec: SamplingSpec  # n = 1; max_tokens: what is left of the completion's budget; seed: this request's own


@dataclass(frozen=True)
class StreamDelta:
    """What one engine step added to one request: new tokens, their sampler log-probs, and the finish reason once
    the request finished (None while it runs)."""

    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None


def rollout_seed(*keys: int) -> int:
    """A 32-bit seed mixed from integer keys, e.g. rollout_seed(run_seed, step, rank).

    Hashing (rather than run_seed + step) keeps nearby keys from producing overlapping request seeds,
    since vLLM seeds the j-th sample of a request with seed + j.
    """
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])


# ----------------------------------------------------------------------------------------------------
# Engine ranks: which prompts a rank generates, and which completions it keeps


@dataclass(frozen=True)
class EngineRanks:
    """The ranks that run one vLLM engine together (rollout.tensor_parallel_size of them), seen from one rank.

    Under torchrun, vLLM's external launcher makes ranks [g * size, (g + 1) * size) one tensor-parallel engine,
    and each of them runs its own scheduler over its shard of the model: they must submit identical requests
    with identical seeds, or the engine hangs or mixes prompts. So every rank of an engine generates the engine's
    prompts, seeded by the engine, and keeps every size-th prompt with all its G completions for its rewards and
    its update; a GRPO group of G completions never straddles two ranks. With size 1 an engine is a rank: prompts
    [rank::world] and seeds by rank, exactly as without tensor parallelism.

        engine_ranks = EngineRanks.of(rank=3, world=4, size=2)   # engine 1 of 2, second rank in it
        engine_ranks.prompts(batch)                               # batch[1::2]: what engine 1 generates
        engine_ranks.share(engine_ranks.prompts(batch))           # batch[3::4]: what this rank trains on
        engine_ranks.share_rollouts(engine.generate(...))         # their completions, prompt_index into the share
    """

    index: int  # which engine this rank belongs to, 0 .. count - 1
    rank_in_engine: int  # 0 .. size - 1
    size: int  # ranks per engine: rollout.tensor_parallel_size
    count: int  # engines: world // size

    @classmethod
    def of(cls, rank: int, world: int, size: int) -> EngineRanks:
        if world % size:
            raise ConfigError(f"rollout.tensor_parallel_size: {size} must divide the number of ranks ({world}): "
                              "each vLLM engine spans that many consecutive ranks")
        return cls(index=rank // size, rank_in_engine=rank % size, size=size, count=world // size)

    def prompts(self, items: list) -> list:
        """The engine's part of a list every rank holds in the same order (a step's prompts, the eval problems)."""
        return items[self.index :: self.count]

    def share(self, engine_items: list) -> list:
        """This rank's part of one-per-prompt items of the engine (its problems, its eval results)."""
        return engine_items[self.rank_in_engine :: self.size]

    def share_rollouts(self, rollouts: list[Rollout]) -> list[Rollout]:
        """The completions of this rank's share of the engine's prompts, prompt_index counted within the share."""
        return [dataclasses.replace(r, prompt_index=r.prompt_index // self.size)
                for r in rollouts if r.prompt_index % self.size == self.rank_in_engine]


# ----------------------------------------------------------------------------------------------------
# The interface every engine implements


class RolloutEngine(Protocol):
    """What the trainer, the evaluation and the GPU check call on an engine; VLLMEngine and HFEngine implement it
    (tests/test_rollout.py checks both against it)."""

    def generate(self, prompt_token_ids: list[list[int]], spec: SamplingSpec) -> list[Rollout]:
        """len(prompts) * spec.n completions, prompt-major (G consecutive per prompt), with the sampler's
        per-token log-probs; depends only on (weights, prompts, spec)."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Take the learner's new weights (HF checkpoint names, full tensors) in place, without a restart; wakes
        an engine that sleeps."""
        ...

    def sleep(self) -> None:
        """Free the engine's accelerator memory for the learner's passes (a no-op where there is nothing to free)."""
        ...

    def take_times(self) -> dict[str, float]:
        """The engine's own timings since the last call, as metrics (rollout servers: perf/server_busy_s, ...); empty
        for an engine in the learner's process, whose time is the step's rollout phase."""
        ...

    def close(self) -> None:
        """Release the engine (its processes, its memory)."""
        ...


class StreamingEngine(RolloutEngine, Protocol):
    """An engine whose requests can be added, stepped and aborted one at a time (VLLMEngine): what the rollout pool
    needs to keep groups in flight across steps (rollout.max_staleness >= 1)."""

    def add_requests(self, requests: list[StreamRequest]) -> None:
        """Queue the requests; they run from the next `step`."""
        ...

    def step(self) -> list[StreamDelta]:
        """One scheduler step of every queued or running request: what each one that progressed added."""
        ...

    def abort(self, request_ids: list[str]) -> None:
        """Drop unfinished requests (their tokens so far are what the deltas gave)."""
        ...
