"""The learner's optimizer without ZeRO (`learner.zero_stage: 0`): AdamW over one flat buffer, in fp32 master weights.

Why (issue #61): DeepSpeed's optimizers work one parameter tensor at a time. Counted on Qwen2.5-0.5B's shapes
(scripts/bench/bench_dispatch.py), they dispatch 24 operations per decoder layer under ZeRO-0 in fp32 (a norm and a
`mul_` per tensor for clipping), 48 under ZeRO-1 in bf16 (each bf16 gradient cast and added to its fp32 sum, a norm
and a `mul_`) and 204 under ZeRO-2 in bf16 (its per-gradient overflow checks as well): on a GPU each is a kernel
launch, and the plain step's whole layer is 108. Here every parameter tensor is a view into one flat buffer, so
whatever the depth an optimizer step costs a few operations on that buffer:

    after each micro-batch's backward   fold():  cat(grads) -> flat; master_grad (+)= flat; grads dropped
    step()                              [all-reduce + 1/world]; n = ||master_grad|| (read on the host); skip if
                                        n is not finite; master_grad *= clip / (n + 1e-6) where that is < 1;
                                        AdamW(fused) on master; weights <- master (a cast, bf16 only)

Precision: with bf16 weights (`learner.precision: bf16`) the master weights, their gradient sums across
micro-batches and Adam's moments are fp32, as in DeepSpeed's bf16 optimizer; with fp32 weights the master is the
flat buffer of the weights themselves. The AdamW is torch's fused one, elementwise the same update as a per-tensor
AdamW. Clipping follows torch's `clip_grad_norm_` (the coefficient clamped at 1, so an unclipped step multiplies by
exactly 1). A step whose gradient norm is not finite is skipped: `overflow` tells DeepSpeed's engine, which counts it
in `skipped_steps` and does not advance the schedule. Memory per trainable weight, besides the weights and Adam's
state: bf16, autograd's gradient (2 bytes, during backward), the gathered copy (2) and the fp32 sum (4), and the fp32
master weight (4); fp32, autograd's first gradient (4, until the first fold) and the sum (4).

The engine that calls it is DeepSpeed's at stage 0 with its own bf16 and clipping off and its gradient all-reduce off
(grpo_train/learner.py): it runs backward, calls `step()` and counts skipped steps; checkpoints carry this
optimizer's `state_dict`, master weights included.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.distributed as dist


class FlatAdamW(torch.optim.AdamW):
    """torch's fused AdamW on one flat fp32 master tensor that stands for `params` (made views of one flat buffer)."""

    def __init__(self, params, *, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 max_grad_norm: float, world_size: int = 1):
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ValueError("FlatAdamW: no trainable parameters")
        kinds = {(p.dtype, p.device) for p in params}
        if len(kinds) > 1:
            raise ValueError(f"FlatAdamW: the trainable parameters must share one dtype and device, got {kinds}")
        dtype, dev = kinds.pop()
        sizes = [p.numel() for p in params]
        flat = torch.empty(sum(sizes), dtype=dtype, device=dev)
        with torch.no_grad():
            torch.cat([p.detach().reshape(-1) for p in params], out=flat)
        offset = 0
        for p, n in zip(params, sizes, strict=True):
            p.data = flat[offset:offset + n].view_as(p)  # the module's weights are now views of `flat`
            offset += n
        self.shared = dtype == torch.float32  # the master weights are the weights' own buffer
        master = torch.nn.Parameter(flat if self.shared else flat.float())
        master.grad = torch.zeros_like(master)
        super().__init__([master], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        self.params = params
        self.flat = flat  # the weights, in their dtype
        self.master = master  # fp32; for fp32 weights a Parameter over `flat`'s own storage
        self.grads = None if self.shared else torch.empty_like(flat)  # bf16: one micro-batch's gradients, gathered
        # fp32: after the first fold the weights' gradients are views of the sum, which autograd adds into in place
        self.grad_views = [master.grad[o - n:o].view_as(p) for p, n, o in
                           zip(params, sizes, itertools.accumulate(sizes), strict=True)] if self.shared else None
        self.max_grad_norm = max_grad_norm
        self.world_size = world_size
        self.folded = 0  # micro-batches summed into master.grad since the last step
        self.overflow = False  # read by DeepSpeed's engine after step()
        self._global_grad_norm: float | None = None  # read by the engine (get_global_grad_norm)

    @torch.no_grad()
    def fold(self) -> None:
        """Move the gradients of the backward just run into the fp32 sum. bf16 weights: gathered into one buffer and
        added (2 operations), then dropped, so the next backward hands autograd's new tensors over. fp32 weights: the
        first backward's gathered into the sum (1 operation), which the weights' gradients then view, so autograd
        adds the next micro-batches' into it in place (as a plain step's gradient accumulation does)."""
        if self.shared and self.folded:
            self.folded += 1  # autograd has already added this backward's gradients into the views
            return
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in self.params]
        if self.shared:
            torch.cat([g.reshape(-1) for g in grads], out=self.master.grad)
            for p, view in zip(self.params, self.grad_views, strict=True):
                p.grad = view
        else:
            torch.cat([g.reshape(-1) for g in grads], out=self.grads)
            if self.folded == 0:
                self.master.grad.copy_(self.grads)
            else:
                self.master.grad.add_(self.grads)
            for p in self.params:
                p.grad = None
        self.folded += 1

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("FlatAdamW.step takes no closure")
        if (self.folded == 0 or not self.shared) and any(p.grad is not None for p in self.params):
            self.fold()  # a caller that did not fold after its last backward
        grad = self.master.grad
        if self.folded == 0:
            grad.zero_()  # no backward since the last step: a zero gradient, as an unfolded AdamW would see
        if self.world_size > 1:
            dist.all_reduce(grad)  # the engine's gradient all-reduce is off: this is it, on one buffer
            grad.mul_(1.0 / self.world_size)  # DeepSpeed averages over ranks; the learner scales its loss for that
        # The one host sync of the step: whether to skip it, and the clipping coefficient, are decided on the host
        # (DeepSpeed's optimizers sync for their overflow check too); the norm is also the step's logged grad_norm.
        norm = self._global_grad_norm = float(torch.linalg.vector_norm(grad))
        self.overflow = not math.isfinite(norm)
        self.zero_grad()  # the next backward starts new gradient tensors (fp32: no longer views of the sum)
        if self.overflow:
            return None
        if self.max_grad_norm > 0 and norm + 1e-6 > self.max_grad_norm:  # torch's clip_grad_norm_ coefficient
            grad.mul_(self.max_grad_norm / (norm + 1e-6))
        super().step()
        if not self.shared:
            self.flat.copy_(self.master)  # the weights the next forward reads, rounded to their dtype
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the weights' gradients and start a new sum (the fp32 buffer is kept: the next fold overwrites it)."""
        for p in self.params:
            p.grad = None
        self.folded = 0

    def state_dict(self) -> dict:
        state = super().state_dict()
        if not self.shared:  # the weights in the module's state are rounded: keep the fp32 ones
            state["master"] = self.master.detach().clone()
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        master = state_dict.pop("master", None)
        super().load_state_dict(state_dict)
        with torch.no_grad():
            if master is not None:
                self.master.copy_(master)
                self.flat.copy_(self.master)
            elif not self.shared:
                self.master.copy_(self.flat)
