"""rollout.tensor_parallel_size > 1: which prompts each rank generates and keeps (EngineRanks, pure), a real
tensor-parallel vLLM engine over two torchrun ranks on CPU (tests/drivers/dist_tensor_parallel.py), and a training run
with it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_train.config import ConfigError, load_config
from grpo_train.data import PromptSampler, load_problems
from grpo_train.rollout import EngineRanks, Rollout, rollout_seed

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = [(world, size) for world in (1, 2, 4, 8) for size in (1, 2, 4, 8) if size <= world and world % size == 0]


def fake_generate(prompts: list[str], n: int) -> list[Rollout]:
    """What an engine returns for `prompts`: n completions per prompt, prompt-major, each naming its prompt."""
    return [Rollout(prompt_index=i, prompt_token_ids=[ord(c) for c in p], completion_token_ids=[i, j],
                    logprobs=[0.0, 0.0], finish_reason="stop", truncated=False)
            for i, p in enumerate(prompts) for j in range(n)]


@pytest.mark.parametrize(("world", "size"), LAYOUTS)
def test_every_prompt_is_trained_on_by_exactly_one_rank_with_all_its_completions(world, size):
    batch = [f"p{i}" for i in range(4 * world)]  # prompts_per_step is a multiple of the world size
    kept: list[str] = []
    for rank in range(world):
        group = EngineRanks.of(rank, world, size)
        generated = fake_generate(group.prompts(batch), n=3)
        problems, rollouts = group.share(group.prompts(batch)), group.share_rollouts(generated)
        assert len(problems) == len(batch) // world  # equal shares, as without tensor parallelism
        assert [r.prompt_index for r in rollouts] == [i for i in range(len(problems)) for _ in range(3)]
        for r in rollouts:  # prompt_index points at the problem the completion was generated from
            assert r.prompt_token_ids == [ord(c) for c in problems[r.prompt_index]]
        kept += problems
    assert sorted(kept) == sorted(batch)


@pytest.mark.parametrize(("world", "size"), LAYOUTS)
def test_ranks_of_one_engine_submit_the_same_prompts_and_seed_and_engines_differ(world, size):
    batch = [f"p{i}" for i in range(2 * world)]
    groups = [EngineRanks.of(rank, world, size) for rank in range(world)]
    for rank, group in enumerate(groups):
        assert group.index == rank // size  # vLLM's external launcher: consecutive ranks form an engine
        for other in groups:
            same = other.index == group.index
            assert (other.prompts(batch) == group.prompts(batch)) == same
            assert (rollout_seed(0, 5, other.index) == rollout_seed(0, 5, group.index)) == same


@pytest.mark.parametrize("world", [1, 2, 4])
def test_size_one_is_the_layout_without_tensor_parallelism(world):
    batch = list(range(4 * world))
    for rank in range(world):
        group = EngineRanks.of(rank, world, 1)
        assert group.share(group.prompts(batch)) == batch[rank::world] and group.index == rank
        rollouts = fake_generate([str(x) for x in group.prompts(batch)], n=2)
        assert group.share_rollouts(rollouts) == rollouts


@pytest.mark.parametrize("num_problems", [1, 5, 7, 16])
def test_eval_shares_cover_every_problem_once_for_any_count(num_problems):
    problems = list(range(num_problems))
    world, size = 4, 2
    scored = [p for rank in range(world) for p in EngineRanks.of(rank, world, size).share(
        EngineRanks.of(rank, world, size).prompts(problems))]
    assert sorted(scored) == problems


def test_tensor_parallel_size_must_divide_the_ranks():
    with pytest.raises(ConfigError, match=r"rollout.tensor_parallel_size: 4 must divide the number of ranks \(6\)"):
        EngineRanks.of(0, 6, 4)


# ----------------------------------------------------------------------------------------------------
# The real engine: two torchrun ranks, one vLLM engine with tensor_parallel_size 2 (gloo on CPU)


def _torchrun(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    inherited = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in inherited} | {"PYTHONUNBUFFERED": "1"}
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2", *args]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return out


@pytest.mark.slow
def test_two_ranks_run_one_tensor_parallel_engine(tmp_path):
    _torchrun([str(REPO / "tests" / "drivers" / "dist_tensor_parallel.py"), str(tmp_path)])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["group"] for r in ranks] == [[0, 0, 2, 1], [0, 1, 2, 1]]
    # One engine: both ranks get the same completions of the same 4 prompts x 3, and they are the model's.
    assert ranks[0]["generated"] == ranks[1]["generated"] and len(ranks[0]["generated"]) == 12
    assert all(r["gap_initial"] < 1e-4 for r in ranks)
    # Each rank keeps every other prompt with its 3 completions: together exactly the generated set.
    kept = [(x["prompt"], x["tokens"]) for r in ranks for x in r["share"]]
    assert sorted(kept) == sorted((x["prompt"], x["tokens"]) for x in ranks[0]["generated"])
    assert [x["prompt_index"] for x in ranks[1]["share"]] == [0, 0, 0, 1, 1, 1]
    # Full tensors pushed from both ranks land sharded: vLLM then serves exactly the new weights.
    assert all(r["gap_synced"] < 1e-4 < 0.1 < r["gap_stale"] for r in ranks)
    # sleep(level 2) -> generate refused -> load_weights (wake weights, reload, wake KV cache) -> same output.
    assert all("weights were discarded" in r["refused"] for r in ranks)
    assert all(r["after_sleep"] == r["synced"] and r["gap_after_sleep"] < 1e-4 for r in ranks)


@pytest.mark.slow
def test_training_run_with_a_tensor_parallel_engine(tmp_path):
    run_dir = tmp_path / "run"
    config = REPO / "configs" / "tiny-cpu.yaml"
    _torchrun(["-m", "grpo_train", "--config", str(config), f"run.output_dir={run_dir}",
               "rollout.tensor_parallel_size=2", "run.steps=2", "run.check_sync_every=1", "run.eval_size=5"],
              timeout=900)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) and r["train/sync_logprob_max_diff"] < 1e-3 for r in steps)
    assert [r["step"] for r in rows if "eval/accuracy" in r] == [0, 2]
    # Rank 0 writes the samples: its share of each step's batch (every other prompt), G completions each.
    cfg = load_config(config, ["rollout.tensor_parallel_size=2"])
    sampler = PromptSampler(load_problems(cfg.data, "train"), seed=cfg.run.seed)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for step in (1, 2):
        expected = [p.question for p in sampler.next_batch(cfg.algorithm.prompts_per_step)[0::2]
                    for _ in range(cfg.algorithm.group_size)]
        assert [s["prompt"] for s in samples if s["step"] == step] == expected
