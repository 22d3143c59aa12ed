"""ZeRO-3 weight sync under torchrun: DeepSpeed ZeRO-3 on CPU (gloo) trains tiny-qwen2 for a few steps,
then each rank's colocated vLLM engine receives the gathered weights. Driven by tests/test_rollout_zero3.py;
by hand:

    .venv/bin/torchrun --nproc_per_node 2 tests/drivers/dist_zero3_sync.py /tmp/zero3_out

Each rank writes OUT/rank{r}.json with what it measured; the pytest side asserts on it.
"""

import json
import sys
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

from grpo_train.hf_weights import PolicyWeights, hf_weights
from grpo_train.models import resolve_model
from grpo_train.rollout import SamplingSpec, VLLMEngine

PROMPTS = [[1, 9690, 198, 2683, 28, 216], [1, 4093, 314, 253, 2880]]


@torch.no_grad()
def max_logprob_diff_and_greedy(module, rollouts) -> tuple[float, bool]:
    """Teacher-forced check of vLLM's output against the ZeRO-3 module (its forward gathers on the fly)."""
    diff, greedy = 0.0, True
    for r in rollouts:
        prompt, completion = r.prompt_token_ids, r.completion_token_ids
        logits = module(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        logprobs = logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        diff = max(diff, (logprobs - torch.tensor(r.logprobs)).abs().max().item())
        greedy = greedy and logits.argmax(-1).tolist() == completion
    return diff, greedy


def watch_gathered(weights, params, peaks: list[int]):
    """Pass the weights through, recording how many parameter elements are gathered at each one."""
    for item in weights:
        peaks.append(sum(p.ds_numel for p in params if p.ds_status == ZeroParamStatus.AVAILABLE))
        yield item


def sync_a_lora_model(path, config, engine, rank) -> tuple[float, float, bool, float]:
    """The same under ZeRO-3 for a LoRA model: each LoRA layer's base weight, A and B are gathered together
    and merged on the fly. Returns (diff before the sync, diff after, greedy tokens equal after, diff
    between the model with and without its adapters)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    trainable = [p for p in model.parameters() if p.requires_grad]
    ds, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(trainable, lr=1e-2), config=config)
    for _ in range(4):
        ids = torch.tensor([PROMPTS[rank % 2] + [2000 + rank, 2001, 2]])
        ds.backward(ds(ids, labels=ids).loss)
        ds.step()
    ds.eval()
    greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=8)
    # The engine still holds the plain model's weights from main(): far from this one.
    stale_diff, _ = max_logprob_diff_and_greedy(ds.module, engine.generate(PROMPTS, greedy))
    engine.load_weights(hf_weights(ds.module))
    synced = engine.generate(PROMPTS, greedy)
    synced_diff, synced_greedy = max_logprob_diff_and_greedy(ds.module, synced)
    with ds.module.disable_adapter():  # how far the adapters moved the model: a push without them would show it
        adapter_effect, _ = max_logprob_diff_and_greedy(ds.module, synced)
    return stale_diff, synced_diff, synced_greedy, adapter_effect


def main(out_dir: Path) -> None:
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    rank = dist.get_rank()
    path = resolve_model("tiny-qwen2")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    hf_shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        # threshold 0: partition every parameter, even the small ones ZeRO-3 would otherwise keep whole
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,  # torch AdamW on CPU
    }
    ds, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2),
                                  config=config)
    params = list(ds.module.parameters())
    partitioned = all(p.ds_status == ZeroParamStatus.NOT_AVAILABLE for p in params)

    # Built after DeepSpeed has set up torch.distributed: the engine joins it (external_launcher, SPMD).
    engine = VLLMEngine(path, max_model_len=256, seed=0, cpu_kvcache_gb=0.25)
    for _ in range(4):  # the update: each rank its own data, averaged by ZeRO
        ids = torch.tensor([PROMPTS[rank % 2] + [1000 + rank, 1001, 1002, 2]])
        ds.backward(ds(ids, labels=ids).loss)
        ds.step()
    ds.eval()

    greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=8)
    stale_diff, _ = max_logprob_diff_and_greedy(ds.module, engine.generate(PROMPTS, greedy))

    ds.empty_partition_cache()  # the checks' forward passes leave parameters gathered for reuse; release them
    peaks: list[int] = []
    pushed: dict[str, tuple[int, ...]] = {}
    declared = PolicyWeights(ds.module).metadata()  # what a rollout server's transfer declares first; gathers nothing
    yielded = []

    def recorded(weights):
        for name, tensor in weights:
            pushed[name] = tuple(tensor.shape)
            yielded.append((name, tensor.dtype, tuple(tensor.shape)))
            yield name, tensor

    engine.load_weights(recorded(watch_gathered(hf_weights(ds.module), params, peaks)))
    synced_diff, synced_greedy = max_logprob_diff_and_greedy(ds.module, engine.generate(PROMPTS, greedy))
    sampled = engine.generate(PROMPTS, SamplingSpec(n=2, temperature=1.0, max_tokens=8, seed=rank))
    sampled_diff, _ = max_logprob_diff_and_greedy(ds.module, sampled)

    lora_stale_diff, lora_synced_diff, lora_synced_greedy, lora_effect = sync_a_lora_model(path, config, engine, rank)

    result = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "partitioned": partitioned,
        "stale_diff": stale_diff,
        "synced_diff": synced_diff,
        "synced_greedy": synced_greedy,
        "sampled_diff": sampled_diff,
        "names_match": pushed == hf_shapes,  # HF names, full (not sharded) shapes, tied lm_head included
        "metadata_matches": declared == yielded,  # PolicyWeights.metadata() under ZeRO-3: ds_shape, in order
        "peak_gathered": max(peaks),
        "largest_module": max(sum(p.ds_numel for p in m.parameters(recurse=False)) for m in ds.module.modules()),
        "total": sum(p.ds_numel for p in params),
        "lora_stale_diff": lora_stale_diff,
        "lora_synced_diff": lora_synced_diff,
        "lora_synced_greedy": lora_synced_greedy,
        "lora_adapter_effect": lora_effect,
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
