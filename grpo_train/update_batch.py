"""The learner's update batch: a rank's rollouts as padded tensors (prompts left-padded, completions right-padded),
the micro-batches cut from it, and the per-staleness sums of the behaviour weights. Pure tensor code, used by
`grpo_train.learner` (which re-exports these names)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class UpdateBatch:
    """One rank's rollout batch: prompts left-padded to P columns, completions right-padded to C.

    Every row reads [pad .. prompt | completion .. pad], so completions start at column P and the model's
    last C + 1 positions hold every logit the loss needs (`logits_to_keep`): prompt positions are never
    projected onto the vocabulary. Log-prob tensors have one column per completion token.
    """

    input_ids: Tensor  # [N, P + C] long
    attention_mask: Tensor  # [N, P + C] long, 1 on prompt and completion tokens
    completion_mask: Tensor  # [N, C] float, 1 on completion tokens
    advantages: Tensor  # [N] float
    sampler_logp: Tensor  # [N, C] float, vLLM's log-probs of the completion tokens (0 on padding)
    old_logp: Tensor | None = None  # [N, C] learner log-probs before the update (None: on-policy)
    ref_logp: Tensor | None = None  # [N, C] reference-model log-probs (None: no KL term)
    truncated: Tensor | None = None  # [N] bool, completion cut by rollout.max_tokens (None: none was)
    staleness: Tensor | None = None  # [N, C] long, weight versions each token is behind (None: synchronous)

    @property
    def prompt_len(self) -> int:
        return self.input_ids.shape[1] - self.completion_mask.shape[1]

    @functools.cached_property
    def lengths(self) -> tuple[list[int], list[int]]:
        """(prompt tokens, completion tokens) of each row, read once: micro-batches are cut from these lists, not
        from tensors."""
        p = self.prompt_len
        return self.attention_mask[:, :p].sum(1).tolist(), self.attention_mask[:, p:].sum(1).tolist()

    @functools.cached_property
    def sequences(self) -> list[list[int]]:
        """Each row's tokens, prompt then completion, without padding (what a packed pass runs), read once."""
        p, ids = self.prompt_len, self.input_ids.tolist()
        return [row[p - prompt: p + completion] for row, prompt, completion in zip(ids, *self.lengths, strict=True)]

    def rows(self, index: Tensor | list[int]) -> UpdateBatch:
        """The sequences `index` [n], without the columns that are padding in all of them."""
        p = self.prompt_len
        prompt_lens, completion_lens = self.lengths
        chosen = index if isinstance(index, list) else index.tolist()
        index = torch.tensor(chosen, dtype=torch.long)
        longest_prompt = max(prompt_lens[i] for i in chosen)
        longest_completion = max(1, max(completion_lens[i] for i in chosen))
        columns = slice(p - longest_prompt, p + longest_completion)
        attention = self.attention_mask[index]
        completion = lambda t: None if t is None else t[index][:, :longest_completion]  # noqa: E731
        return UpdateBatch(
            input_ids=self.input_ids[index][:, columns],
            attention_mask=attention[:, columns],
            completion_mask=completion(self.completion_mask),
            advantages=self.advantages[index],
            sampler_logp=completion(self.sampler_logp),
            old_logp=completion(self.old_logp),
            ref_logp=completion(self.ref_logp),
            truncated=None if self.truncated is None else self.truncated[index],
            staleness=completion(self.staleness),
        )

    def loss_mask(self, mask_truncated: bool) -> Tensor:
        """[N, C] 1 on the completion tokens the loss counts: all of them, or, with mask_truncated (overlong
        filtering, DAPO section 3.4), none of a truncated completion's."""
        if not mask_truncated or self.truncated is None:
            return self.completion_mask
        return self.completion_mask * (~self.truncated).to(self.completion_mask.dtype)[:, None]


def make_update_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]],
                      sampler_logps: list[list[float]], advantages: Tensor, pad_id: int,
                      truncated: list[bool] | None = None, staleness: list[list[int]] | None = None) -> UpdateBatch:
    """Pack rollouts into an UpdateBatch (prompts left-padded, completions right-padded); `staleness`: per completion
    token, the weight versions it is behind (asynchronous GRPO; only logged, by `behaviour_by_staleness`)."""
    n = len(prompt_ids)
    p = max(len(prompt) for prompt in prompt_ids)
    c = max(1, max(len(completion) for completion in completion_ids))
    input_ids = torch.full((n, p + c), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p + c), dtype=torch.long)
    completion_mask = torch.zeros((n, c))
    sampler_logp = torch.zeros((n, c))
    for i, (prompt, completion, logps) in enumerate(zip(prompt_ids, completion_ids, sampler_logps, strict=True)):
        input_ids[i, p - len(prompt): p] = torch.tensor(prompt, dtype=torch.long)
        input_ids[i, p: p + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention_mask[i, p - len(prompt): p + len(completion)] = 1
        completion_mask[i, : len(completion)] = 1.0
        sampler_logp[i, : len(completion)] = torch.tensor(logps, dtype=torch.float32)
    flags = None if truncated is None else torch.tensor(truncated, dtype=torch.bool)
    ages = None
    if staleness is not None:
        ages = torch.zeros((n, c), dtype=torch.long)
        for i, row in enumerate(staleness):
            ages[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return UpdateBatch(input_ids, attention_mask, completion_mask, advantages.float(), sampler_logp, truncated=flags,
                       staleness=ages)


def behaviour_by_staleness(weight: Tensor | None, staleness: Tensor, mask: Tensor, buckets: int,
                           log_ratio: Tensor | None = None) -> Tensor:
    """[2, buckets] (or [4, buckets] with `log_ratio`) float64 on mask's device, per age 0 .. buckets - 1 (the tokens
    that many versions old): the sum of the behaviour weights (row 0), the token count (row 1), and with `log_ratio`
    the sums of the raw log-ratio log pi_prox - log pi_behav and of its square (rows 2, 3), left on the device (summed
    over micro-batches, read once per optimizer step). weight: [B, T] or [B, 1] from `algorithms.mismatch_weights`
    (None, no correction: 1); staleness [B, T] long; mask [B, T]; log_ratio [B, T] (no gradient)."""
    weight = torch.ones_like(mask) if weight is None else weight.expand_as(mask)
    ages = staleness.to(mask.device).flatten()
    rows = [weight * mask, mask]
    if log_ratio is not None:
        gap = log_ratio * mask
        rows += [gap, gap * gap]
    return torch.stack([torch.bincount(ages, weights=row.flatten().double(), minlength=buckets)[:buckets]
                        for row in rows])
