"""Fixtures shared by the learner tests (a module that defines its own `tiny_path` uses that one instead)."""

import os

import pytest
import torch
import torch.distributed as dist

from grpo_train.distributed import init_distributed
from grpo_train.models import resolve_model


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need CUDA: skipped, with the reason, on machines without it (CI, the developers').
    Files with slow tests run first: under `make test`'s two workers (pytest-xdist, a file at a time each) the long
    files then start early, rather than one of them running last on one worker while the other has nothing left."""
    slow_files = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within each group is kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu); run on a GPU node: pytest -m gpu")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def tiny_path():
    """The tiny model's folder, in a process that has a distributed world of one (the learner needs it)."""
    if not dist.is_initialized():
        # An earlier test may have left a torn-down world's RANK / MASTER_PORT behind (a closed in-process vLLM
        # engine destroys the process group): start a fresh world of one on a free port instead.
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(key, None)
    init_distributed()
    return resolve_model("tiny-qwen2")
