"""The learner's model as (Hugging Face checkpoint name, full tensor) pairs: what the rollout engine loads after
every update and what a checkpoint's hf/ folder holds.

    engine.load_weights(learner.policy_weights())     # Learner.policy_weights is PolicyWeights(its module)

`PolicyWeights` is that stream, re-iterable, with its declaration (`metadata`: every name, dtype and full shape,
in order, without gathering anything), which a rollout server's weight transfer needs before the tensors
(grpo_train/rollout/transfer.py). Walks a plain HF causal LM, a DeepSpeed engine's `.module` at any ZeRO stage
(gathering ZeRO-3 shards one module at a time), or a peft LoRA model (adapters merged on the fly); never changes the
learner's weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def hf_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight of the learner's model under its HF checkpoint name, tied aliases included.

    `model` is a plain HF causal LM, a DeepSpeed engine's `.module` (any ZeRO stage), or a peft LoRA
    model, whose adapters are merged on the fly (W + scale * B @ A) without touching the learner's
    weights. ZeRO-3 parameters are gathered one module at a time and copied out (vLLM buffers a fused
    layer's inputs, e.g. q/k/v, until all have arrived), so the full model never exists at once.
    Every rank must consume the iterator: under ZeRO-3 each gather is a collective.
    """
    from peft import PeftModel

    if isinstance(model, PeftModel):
        model = model.base_model.model  # PeftModel -> LoraModel -> the HF model with LoRA layers inside
    yield from _module_weights(model, prefix="")


class PolicyWeights:
    """The learner's weights as `hf_weights` yields them, iterable any number of times (each pass walks the model as
    it is then), with `metadata()`: what a pass will yield, declared up front. `version`: the GRPO updates the
    weights have had (a rollout server labels the tokens it samples with it: rollout/server_pool.py)."""

    def __init__(self, model: torch.nn.Module, version: int = 0) -> None:
        self.model = model
        self.version = version

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return hf_weights(self.model)

    def metadata(self) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
        """(name, dtype, full shape) of every tensor a pass yields, in its order; reads no data, so gathers nothing
        under ZeRO-3 (a partitioned parameter keeps its full shape in `ds_shape`)."""
        from peft import PeftModel

        model = self.model.base_model.model if isinstance(self.model, PeftModel) else self.model
        return list(_module_metadata(model, prefix=""))


def _module_metadata(module: torch.nn.Module, prefix: str) -> Iterator[tuple[str, torch.dtype, tuple[int, ...]]]:
    from peft.tuners.lora import LoraLayer

    if isinstance(module, LoraLayer):  # the base layer's tensors, the merged weight in the base weight's dtype
        for name, param in module.get_base_layer().named_parameters(recurse=False):
            yield prefix + name, param.dtype, _full_shape(param)
        return
    for name, param in module.named_parameters(recurse=False, remove_duplicate=False):
        yield prefix + name, param.dtype, _full_shape(param)
    for name, child in module.named_children():
        yield from _module_metadata(child, f"{prefix}{name}.")


def _full_shape(param: torch.nn.Parameter) -> tuple[int, ...]:
    return tuple(param.ds_shape) if hasattr(param, "ds_shape") else tuple(param.shape)


def _module_weights(module: torch.nn.Module, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    from peft.tuners.lora import LoraLayer

    if isinstance(module, LoraLayer):
        yield from _merged_lora_weights(module, prefix)
        return
    # remove_duplicate=False: a tied lm_head yields `lm_head.weight`, which vLLM needs (see load_weights).
    params = list(module.named_parameters(recurse=False, remove_duplicate=False))
    if params:
        with _gathered([p for _, p in params]) as copy_out:
            for name, param in params:
                yield prefix + name, _full_tensor(param.detach(), copy_out)
    for name, child in module.named_children():
        yield from _module_weights(child, f"{prefix}{name}.")


def _merged_lora_weights(layer, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    base = layer.get_base_layer()
    adapters = [] if layer.disable_adapters or layer.merged else [
        a for a in layer.active_adapters if a in layer.lora_A or a in layer.lora_embedding_A
    ]
    for adapter in adapters:
        if adapter in layer.lora_variant or layer.lora_bias[adapter]:
            raise NotImplementedError(f"{prefix}: only plain LoRA adapters can be merged on the fly (not DoRA etc.)")
    with _gathered(list(layer.parameters())) as copy_out:  # base weight and A, B: all of them are needed
        for name, param in base.named_parameters(recurse=False):
            if name == "weight" and adapters:
                delta = sum(layer.get_delta_weight(a) for a in adapters)
                yield prefix + name, param.detach() + delta.to(param.dtype)  # a new tensor: nothing to copy out
            else:
                yield prefix + name, _full_tensor(param.detach(), copy_out)


@contextlib.contextmanager
def _gathered(params: list[torch.nn.Parameter]) -> Iterator[bool]:
    """Gather ZeRO-3 partitioned parameters for the duration; yields whether tensors must be copied out."""
    if not any(hasattr(p, "ds_id") for p in params):
        yield False
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield True


def _full_tensor(tensor: torch.Tensor, copy_out: bool) -> torch.Tensor:
    # A gathered ZeRO-3 tensor is released when its module's gather ends.
    return tensor.clone() if copy_out else tensor
