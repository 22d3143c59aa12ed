"""The process group every rank joins, and the collectives the trainer and the learner use on it.

    rank, world = init_distributed()          # torchrun / accelerate / deepspeed launcher, or a world of one
    metrics = global_means({"reward/mean": (sum_on_this_rank, count_on_this_rank)})   # one all-reduce

CPU and GPU differ here in a few lines (`on_gpu`): gloo on CPU, NCCL on CUDA, tensors on the rank's device.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import Tensor


def on_gpu() -> bool:
    return torch.cuda.is_available()


def device() -> torch.device:
    """This rank's device: its CUDA device (set by init_distributed from LOCAL_RANK), or the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if on_gpu() else torch.device("cpu")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> tuple[int, int]:
    """Join (or create) the process group; returns (rank, world_size).

    torchrun, `accelerate launch --multi_gpu` and the `deepspeed` launcher set RANK / WORLD_SIZE / LOCAL_RANK /
    MASTER_ADDR / MASTER_PORT. A plain `grpo-train` start sets none of them, and DeepSpeed would then look
    for MPI, so we declare a world of one on a free local port.
    """
    import deepspeed

    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    if not dist.is_initialized():
        if on_gpu():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        for line in stale_build_locks():
            print(line, file=sys.stderr, flush=True)
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu() else "gloo", verbose=False)
    return dist.get_rank(), dist.get_world_size()


STALE_LOCK_S = 600  # a JIT build of a DeepSpeed op takes 1-3 minutes


def stale_build_locks(max_age_s: float = STALE_LOCK_S) -> list[str]:
    """One line per lock file in torch's extension build folder older than `max_age_s`.

    DeepSpeed builds some ops the first time they load (on CPU its shared-memory collectives at start-up; on a GPU
    FusedAdam and others where no prebuilt op is installed), holding `<build root>/<op>/lock` meanwhile. A process
    killed during that build (SIGKILL, a preempted job) leaves the lock, and every later run that loads the op then
    waits on it forever without a word (torch's FileBaton): found by scripts/studies/soak.py. The lock is not removed
    here (another job sharing the folder may be building), only named, with the command that removes it."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    lines = []
    for lock in sorted(glob.glob(os.path.join(root, "**", "lock"), recursive=True)):
        with contextlib.suppress(OSError):  # released since the listing
            age = time.time() - os.path.getmtime(lock)
            if age > max_age_s:
                lines.append(f"grpo-train: warning: {lock} is {age / 60:.0f} min old: a build of a DeepSpeed op that "
                             "was killed leaves it, and the run waits on it for ever; if no other job is building "
                             f"this op, remove it: rm {lock}")
    return lines


def _is_live(group: dist.ProcessGroup) -> bool:
    try:
        dist.get_process_group_ranks(group)
    except KeyError:
        return False
    return True


def forget_dead_deepspeed_groups() -> None:
    """Drop process groups DeepSpeed cached from a world that has since ended.

    A world can end inside a live process (closing the in-process vLLM engine destroys it, so a second
    `train()` in a notebook or a test session runs in a new one); DeepSpeed keeps the dead world's groups in
    module globals and would fail with "Group ... is not registered".
    """
    from deepspeed.utils import groups

    for name, value in list(vars(groups).items()):
        if isinstance(value, dist.ProcessGroup) and not _is_live(value):
            setattr(groups, name, None)
        elif isinstance(value, dict) and any(isinstance(v, dist.ProcessGroup) and not _is_live(v)
                                             for v in value.values()):
            value.clear()


def all_reduce_sum(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device())
    dist.all_reduce(t)
    return float(t.item())


def all_reduce_max(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def global_step_stats(loss_share: Tensor, sums: dict[str, Tensor], tokens: Tensor, trained: int,
                      rows: int) -> dict[str, float]:
    """An optimizer step's statistics over all ranks, in one all-reduce and one transfer to the host: the loss (each
    rank holds its share of the global loss: the sum), the per-token statistics (`sums` holds each times this rank's
    token count: weighted by the token counts of all ranks) and the fraction of the rows trained. loss_share, tokens
    and the sums are 0-d tensors on this rank's device. Every rank gets the same values."""
    names = sorted(sums)
    counts = torch.tensor([trained, rows], dtype=torch.float64).to(loss_share.device)
    flat = torch.cat([torch.stack([loss_share.double(), tokens.double(), *(sums[n].double() for n in names)]), counts])
    dist.all_reduce(flat)
    loss, tokens_all, *totals, trained_all, rows_all = flat.cpu().tolist()
    out = {name: total / max(tokens_all, 1.0) for name, total in zip(names, totals, strict=True)}
    out.update(loss=loss, trained_seq_frac=trained_all / rows_all)
    return out


def global_means(sums: dict[str, tuple[float | Tensor, float | Tensor]]) -> dict[str, float]:
    """{name: (sum, count)} on this rank (numbers, or 0-d tensors on this rank's device) -> {name: sum over ranks /
    count over ranks}, in one all-reduce and one transfer to the host."""
    names = sorted(sums)
    values = [v for n in names for v in sums[n]]
    if any(isinstance(v, Tensor) for v in values):
        flat = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device()) for v in values])
    else:
        flat = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device())
    dist.all_reduce(flat)
    totals = flat.cpu().tolist()
    return {n: totals[2 * i] / totals[2 * i + 1] if totals[2 * i + 1] > 0 else float("nan")
            for i, n in enumerate(names)}


# ----------------------------------------------------------------------------------------------------
# An agreement with a deadline that names the ranks that did not answer (grpo_train/preemption.py)


class RanksDidNotAnswer(RuntimeError):
    def __init__(self, ranks: list[int], timeout_s: float):
        names = ", ".join(map(str, ranks))
        super().__init__(f"rank{'s' * (len(ranks) > 1)} {names} did not answer within {timeout_s:.1f} s")
        self.ranks = ranks


def store_max(store: dist.Store, rank: int, world: int, key: str, values: list[float],
              timeout_s: float | None = None) -> list[float]:
    """The element-wise max of every rank's `values`, through a c10d store (the process group's: host memory and a
    socket, whatever the backend, and no collective queued behind a hung one). Each rank writes its values under
    key/<rank> and waits for every rank's; RanksDidNotAnswer names the ranks whose values did not come within
    timeout_s (None: the store's own timeout, the process group's)."""
    from datetime import timedelta

    store.set(f"{key}/{rank}", " ".join(map(repr, map(float, values))))
    keys = [f"{key}/{r}" for r in range(world)]
    try:
        store.wait(keys) if timeout_s is None else store.wait(keys, timedelta(seconds=timeout_s))
    except dist.DistStoreError:
        missing = [r for r in range(world) if not store.check([keys[r]])]
        if not missing:
            raise
        raise RanksDidNotAnswer(missing, store.timeout.total_seconds() if timeout_s is None else timeout_s) from None
    rows = [[float(x) for x in value.decode().split()] for value in store.multi_get(keys)]
    return [max(column) for column in zip(*rows, strict=True)]
