"""Fixtures shared by the learner tests (a module that defines its own `tiny_path` uses that one instead)."""

import os

import pytest
import torch.distributed as dist

from grpo_train.learner import init_distributed
from grpo_train.models import resolve_model


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
