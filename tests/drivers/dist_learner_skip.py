"""Skipping zero-advantage rows under data parallelism: rank 0's rows all have advantage 0 (it runs only a
zero-scaled padding pass), rank 1's do not; the step must not hang and must equal the step without
skipping. Driven by tests/test_learner.py; by hand:

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/drivers/dist_learner_skip.py /tmp/skip_out

Each rank writes OUT/rank{r}.json; the pytest side asserts on it.
"""

import json
import sys
from pathlib import Path

import torch

from grpo_train.config import load_config
from grpo_train.distributed import init_distributed
from grpo_train.learner import Learner, make_update_batch
from grpo_train.models import resolve_model


def rank_batch(rank: int):
    g = torch.Generator().manual_seed(10 + rank)
    prompts = [torch.randint(3, 1000, (5,), generator=g).tolist() for _ in range(4)]
    completions = [torch.randint(3, 1000, (3 + i,), generator=g).tolist() for i in range(4)]
    advantages = torch.zeros(4) if rank == 0 else torch.randn(4, generator=g)
    return make_update_batch(prompts, completions, [[-2.0] * len(c) for c in completions], advantages, pad_id=2)


def main(out_dir: Path) -> None:
    rank, world = init_distributed()
    path = resolve_model("tiny-qwen2")
    result = {"world": world}
    for skip in ("true", "false"):
        cfg = load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                                 "learner.lr=1e-3", "learner.micro_batch_size=2", "learner.zero_stage=2",
                                 "learner.grad_clip=0", "learner.adam_eps=1e-6",
                                 f"learner.skip_zero_advantage={skip}"])
        learner = Learner(cfg, path, total_optimizer_steps=2)
        stats = learner.update(rank_batch(rank))
        result[skip] = {"grad_norm": stats["grad_norm"], "trained_seq_frac": stats["trained_seq_frac"],
                        "checksum": sum(float(p.double().abs().sum()) for p in learner.module.parameters())}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
