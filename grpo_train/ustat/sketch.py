"""Per-completion random sketches of one linear layer's weight gradient, the scores s_i = grad log pi(o_i | q)
that the U-statistic tools need (grpo_train/ustat/estimators.py), without a second model pass.

For a linear layer y = W x, the gradient of a scalar f with respect to W is sum_t delta_t x_t^T, with x_t the
layer's input and delta_t = df/dy_t at position t. A fixed seeded sketch reduces it to D numbers without ever
forming the [out, in] matrix:

    s_d = u_d^T (sum_t delta_t x_t^T) v_d / sqrt(D) = sum_t (u_d . delta_t)(v_d . x_t) / sqrt(D),

u_d, v_d standard Gaussian (`sketch_factors`). E[s . s'] = <grad_W, grad_W'>_F, so c1, c2, c3 computed from
sketches are unbiased for those of the full W gradient. The offline advisor (grpo_train/ustat/advisor.py) and the online
monitor (`ScoreSketch`, attached to the learner) share the factors and the product, so with the same layer, D and
seed they measure the same projection.

The online sketch comes from the learner's own forward and backward passes. The backward carries the loss's
gradient, not the score's: per completion token t of sequence i, the loss reaches log pi(o_{i,t}) with weight
g_{i,t} = dloss / dlogp_{i,t} (advantage, loss normaliser, ratio, clipping, importance weight and KL term
together). The hooked layer is one of the LAST decoder layer whose outputs reach the logits position by position
(o_proj, down_proj): nothing after it mixes positions, so delta at the position that predicts token t is
g_{i,t} * d logp_{i,t} / dy there, and dividing by g_{i,t} (read from a hook on the log-prob tensor) gives the
unweighted score exactly, token by token. A token with g = 0 (a sequence with advantage 0 and no KL term, or a
clipped token off-policy) carries nothing to divide: a sequence with such a token is reported unscored. Sequences
that the learner skips (learner.skip_zero_advantage) are never run and are unscored too; the monitor needs no
scores for groups whose rewards are all equal (every U-statistic kernel is 0 there).

Layouts: padded, each row is one sequence and position P - 1 + t predicts token t; packed (learner.packing), the
packed rows' scored positions map to (sequence, token) as the pass's own layout says. With learner.share_prompts,
the learner packs completions on top of their prompt's cache (grpo_train/forward.py); the prompt's last position
would predict token 0 of all G completions at once, so while a sketch is attached the learner runs the shared
layout with `pack_last_prompt_token` (the prompt's last token starts every packed segment; the same function, one
more token per completion): every position that enters the loss then belongs to one completion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from grpo_train.config import Config, ustat_monitor_on
from grpo_train.forward import PackedSequences, shared_pass_costs, shared_prompt_layout


def sketch_factors(out_features: int, in_features: int, dim: int, seed: int) -> tuple[Tensor, Tensor]:
    """(U [out, D], V [in, D]) standard Gaussian, from a generator seeded with `seed` (U drawn first)."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(out_features, dim, generator=generator),
            torch.randn(in_features, dim, generator=generator))


def sketch_products(delta: Tensor, inputs: Tensor, out_factors: Tensor, in_factors: Tensor) -> Tensor:
    """Per-position terms (u_d . delta_t)(v_d . x_t) / sqrt(D): delta [..., out], inputs [..., in] -> [..., D] fp32.
    Summed over the positions of one sequence they give its sketch."""
    dim = out_factors.shape[1]
    return (delta.float() @ out_factors) * (inputs.float() @ in_factors) / math.sqrt(dim)


def last_linear(model: torch.nn.Module, projection: str) -> torch.nn.Linear:
    """The last torch.nn.Linear named `projection` in module order (the last decoder layer's); through a peft
    wrapper, its base layer."""
    found = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
             and (name.endswith("." + projection) or name.endswith(f".{projection}.base_layer"))]
    if not found:
        raise ValueError(f"the model has no linear layer named {projection!r}")
    return found[-1]


@dataclass
class _Call:
    """One forward call of the hooked layer with gradients on: its projected inputs, then the products."""

    projected_input: Tensor | None  # [rows, width, D] v_d . x_t
    products: Tensor | None = None  # [rows, width, D], once the backward has reached the layer


@dataclass
class _Watched:
    """One micro-batch whose backward the sketch reads."""

    rows: Tensor  # [n] the micro-batch's rows in the update batch
    input_ids: Tensor  # [n, P + C]
    attention_mask: Tensor  # [n, P + C]
    completion_mask: Tensor  # [n, C]
    calls: list[_Call]
    packed: PackedSequences | None = None  # the padding-free layout the pass ran (learner.packing), or None
    logp_grad: list[Tensor] = field(default_factory=list)  # [n, C] dloss / dlogp, once the backward ran


class ScoreSketch:
    """Hooks on one linear layer of the policy that turn the learner's backward into per-sequence score sketches.

    Use: `watch(rows, batch, logp)` after each micro-batch's forward and before its backward; after the update,
    `take(n)` returns the [n, D] sketches of the update batch's n sequences and which of them were scored (each
    sequence is scored by the first backward that carries all its tokens; later passes over it are ignored).
    """

    def __init__(self, model: torch.nn.Module, projection: str, dim: int, seed: int, share_prompts: bool):
        self.layer = last_linear(model, projection)
        self.out_factors, self.in_factors = sketch_factors(self.layer.out_features, self.layer.in_features, dim, seed)
        self.dim = dim
        self.share_prompts = share_prompts
        self.costs = shared_pass_costs(model) if share_prompts else None  # to recompute the pass's layout
        self._pending: list[_Call] = []
        self._watched: list[_Watched] = []
        self.layer.register_forward_hook(self._forward_hook)

    @classmethod
    def for_config(cls, model: torch.nn.Module, cfg: Config, share_prompts: bool) -> ScoreSketch | None:
        """The learner's sketch when the run keeps the U-statistic monitor (seeded with run.seed), else None."""
        if not ustat_monitor_on(cfg):
            return None
        return cls(model, cfg.ustat.projection, cfg.ustat.dim, cfg.run.seed, share_prompts)

    # -- hooks ------------------------------------------------------------------------------------------
    def _forward_hook(self, module, args, output):
        if not (torch.is_grad_enabled() and output.requires_grad):
            return None  # log-prob passes without gradients (old / reference log-probs, eval)
        device = output.device
        if self.out_factors.device != device:
            self.out_factors, self.in_factors = self.out_factors.to(device), self.in_factors.to(device)
        call = _Call(args[0].detach().float() @ self.in_factors)
        self._pending.append(call)

        def backward_hook(delta: Tensor | None) -> None:
            if delta is None:  # torch calls it with None where no gradient reached the output (a prompt pass's
                return  # last layer when no prompt position is scored): products stay None, the call is skipped
            call.products = (delta.float() @ self.out_factors) * call.projected_input / math.sqrt(self.dim)
            call.projected_input = None

        output.register_hook(backward_hook)
        return None

    def watch(self, rows: Tensor, input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor,
              logp: Tensor, packed: PackedSequences | None = None) -> None:
        """Claim the layer's forward calls since the last watch for this micro-batch (rows of the update batch)
        and record dloss / dlogp [n, C] when its backward runs; `packed`: the pass's padding-free layout."""
        watched = _Watched(rows.cpu(), input_ids.cpu(), attention_mask.cpu(), completion_mask.cpu(), self._pending,
                           packed)
        self._pending = []
        if logp.requires_grad:
            logp.register_hook(lambda grad: watched.logp_grad.append(grad.detach().float().cpu()))
        self._watched.append(watched)

    # -- results ----------------------------------------------------------------------------------------
    def take(self, num_sequences: int) -> tuple[Tensor, Tensor]:
        """(sketches [n, D] float64, scored [n] bool) of the update batch's sequences since the last take."""
        sketches = torch.zeros(num_sequences, self.dim, dtype=torch.float64)
        scored = torch.zeros(num_sequences, dtype=torch.bool)
        for watched in self._watched:
            if not watched.logp_grad:
                continue  # no backward reached the log-probs
            per_row, complete = self._micro_batch_sketches(watched)
            for local, row in enumerate(watched.rows.tolist()):
                if complete[local] and not scored[row]:
                    sketches[row], scored[row] = per_row[local], True
        self._watched, self._pending = [], []
        return sketches, scored

    def _micro_batch_sketches(self, watched: _Watched) -> tuple[Tensor, Tensor]:
        """[n, D] sketches of one micro-batch's rows and whether each had a nonzero weight at every token."""
        weight = watched.logp_grad[0]  # [n, C]
        mask = watched.completion_mask.bool()
        n, width = weight.shape
        products = torch.zeros(n, width, self.dim, dtype=torch.float64)  # per (row, completion token)
        calls = [c for c in watched.calls if c.products is not None]
        if self.share_prompts:
            layout = shared_prompt_layout(watched.input_ids, watched.attention_mask, width, self.costs,
                                          last_prompt_token=True)
            # The prompt pass's positions predict nothing that enters the loss (no gradient reaches them here);
            # the packed pass is the call whose shape is the packed rows'.
            packed = layout.packed
            for call in calls:
                if packed is not None and call.products.shape[:2] == packed.tokens.shape:
                    flat = call.products.flatten(0, 1)[packed.source.to(call.products.device)].cpu()
                    products[packed.target_row.cpu(), packed.target_col.cpu()] = flat.double()
        elif watched.packed is not None:
            packed = watched.packed
            for call in calls:  # one call: [R, W] packed positions; packed.scored predict the completion tokens
                flat = call.products.flatten(0, 1)[packed.scored.to(call.products.device)].cpu()
                products[packed.target_row.cpu(), packed.target_col.cpu()] = flat.double()
        else:
            for call in calls:  # one call: [n, P + C] positions; position P - 1 + t predicts token t
                prompt_len = call.products.shape[1] - width
                products += call.products[:, prompt_len - 1: prompt_len - 1 + width].cpu().double()
        nonzero = weight != 0
        complete = (nonzero | ~mask).all(dim=1) & mask.any(dim=1)
        safe = torch.where(nonzero, weight, torch.ones_like(weight)).double()
        per_token = torch.where((nonzero & mask)[..., None], products / safe[..., None], torch.zeros_like(products))
        return per_token.sum(dim=1), complete
