"""Two ranks, each updating on its half of tests/test_learner_losses.py's batch, for the cases named on the command
line. Driven by tests/test_learner_losses.py; by hand:

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/drivers/dist_learner_losses.py /tmp/losses_out gspo_stage1

Each rank writes OUT/{case}-rank{r}.json (the update's logged statistics); rank 0 writes OUT/{case}-grad.pt, the
gradient recovered from the exact first Adam step (test_learner_losses.recovered_gradient). ZeRO-3 cases run the
fused head in chunks of 2 rows, so that the ranks' passes have different numbers of chunks.
"""

import json
import sys
from pathlib import Path

import torch

from grpo_train import forward, logprob_kernels
from grpo_train.distributed import init_distributed
from grpo_train.learner import Learner
from grpo_train.models import resolve_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, as under pytest: the test module it drives
from test_learner_losses import case_cfg, full_batch, recovered_gradient, trainable  # noqa: E402


def main(out_dir: Path, cases: list[str]) -> None:
    rank, world = init_distributed()
    path = resolve_model("tiny-qwen2")
    out_dir.mkdir(parents=True, exist_ok=True)
    default_chunk, default_fuse = logprob_kernels.HEAD_CHUNK_ELEMENTS, forward.FUSE_MIN_ELEMENTS
    row_chunks, chunks = logprob_kernels._row_chunks, []

    def head_chunks(*args, head=False):  # records the fused head's chunks
        out = row_chunks(*args, head=head)
        chunks.extend(out if head else [])
        return out

    logprob_kernels._row_chunks = head_chunks
    for case in cases:
        learner = Learner(case_cfg(case), path, total_optimizer_steps=1)
        vocab = learner.engine.module.get_output_embeddings().out_features
        logprob_kernels.HEAD_CHUNK_ELEMENTS = 2 * vocab if "stage3" in case else default_chunk
        forward.FUSE_MIN_ELEMENTS = 2 * vocab if "stage3" in case else default_fuse
        chunks.clear()
        batch = full_batch(learner)  # the whole batch on every rank (same seeds), then this rank's rows
        rows = torch.arange(len(batch.advantages)).tensor_split(world)[rank]
        before = trainable(learner)
        stats = learner.update(batch.rows(rows))
        gradient = recovered_gradient(before, trainable(learner))
        (out_dir / f"{case}-rank{rank}.json").write_text(json.dumps(stats))
        (out_dir / f"{case}-chunks-rank{rank}.json").write_text(json.dumps(len(chunks)))  # fused head chunks run
        if rank == 0:
            torch.save(gradient, out_dir / f"{case}-grad.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
