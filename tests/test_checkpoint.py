"""Checkpoints in-process on tiny-qwen2 with the real DeepSpeed engine (gloo, a world of one): the atomic layout
and pruning, corrupt checkpoints skipped with a warning, a save that fails (disk full, out of memory) leaving
the previous checkpoint usable, pickled code refused, RNG and trainer state round trips, and `grpo-train
export` of a LoRA run: merged weights that transformers and vLLM load and that decode like the learner.

Kill tests and bad command-line input are in test_faults.py (they need whole runs as subprocesses).
"""

import errno
import json
import os
import random
import re
import resource
import signal

import numpy as np
import pytest
import torch

from grpo_train import checkpoint
from grpo_train.cli import train_main
from grpo_train.config import load_config
from grpo_train.data import PromptSampler, load_problems
from grpo_train.distributed import init_distributed
from grpo_train.hf_weights import hf_weights
from grpo_train.learner import Learner, make_update_batch
from grpo_train.models import resolve_model
from grpo_train.rollout import SamplingSpec

CKPT = checkpoint.CHECKPOINTS


DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module")
def tiny_path():
    # init_distributed declares a world of one through these variables; put them back afterwards, or a
    # subprocess started by a later test would try to join this process's world (its port is taken).
    saved = {k: os.environ.get(k) for k in DIST_ENV}
    init_distributed()
    yield resolve_model("tiny-qwen2")
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def make_cfg(*overrides):
    return load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                              "learner.lr=1e-3", "learner.zero_stage=2", *overrides])


@pytest.fixture(scope="module")
def learner(tiny_path):
    return Learner(make_cfg(), tiny_path, total_optimizer_steps=16)


def random_batch(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 1000, (4 + i % 3,), generator=g).tolist() for i in range(n)]
    completions = [torch.randint(3, 1000, (2 + i,), generator=g).tolist() for i in range(n)]
    return make_update_batch(prompts, completions, [[-2.0] * len(c) for c in completions], torch.randn(n, generator=g),
                             pad_id=2)


def weights(learner):
    return {k: v.detach().clone() for k, v in learner.module.state_dict().items()}


def save(run_dir, step, learner, tiny_path, keep_last=3, state=None):
    writer = checkpoint.hf_folder_writer(learner.base_config, tiny_path)
    return checkpoint.save_checkpoint(run_dir, step, learner.engine, state or {"step": step},
                                      hf_weights(learner.module), writer, keep_last)


def names(run_dir):
    return sorted(p.name for p in (run_dir / CKPT).iterdir())


# ----------------------------------------------------------------------------------------------------
# State that is not DeepSpeed's


def rng_draws() -> list[float]:
    return [random.random(), random.gauss(0, 1), *np.random.standard_normal(2), *torch.rand(2).tolist()]


def test_rng_state_round_trips_through_json():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # python and numpy both cache a second normal: part of the state
    np.random.standard_normal()
    state = json.loads(json.dumps(checkpoint.rng_state()))

    first = rng_draws()
    rng_draws()  # move on, then come back
    checkpoint.set_rng_state(state)
    assert rng_draws() == first


def test_trainer_state_keeps_sampler_position_and_skip_counter(tmp_path, learner, tiny_path):
    # Through the learner's own face (save_checkpoint / load_checkpoint), as the trainer calls it.
    cfg = make_cfg()
    sampler = PromptSampler(load_problems(cfg.data, "train"), seed=0)
    sampler.next_batch(3)
    bad = random_batch()
    bad.advantages[1] = float("nan")
    skipped_before = learner.skipped_nonfinite
    assert learner.update(bad)["skipped_step"] == 1.0  # counted, not applied
    assert all(torch.isfinite(v).all() for v in weights(learner).values())  # no NaN reached the weights
    ckpt = learner.save_checkpoint(tmp_path, 5, checkpoint.trainer_state(5, sampler, cfg), keep_last=3)
    assert (ckpt / "hf_model" / "model.safetensors").is_file()
    draws = rng_draws()  # what the RNGs give after the save; loading the checkpoint brings them back there

    learner.skipped_nonfinite = 0
    state = learner.load_checkpoint(ckpt)
    assert rng_draws() == draws
    assert state["step"] == 5 and state["skipped_nonfinite"] == skipped_before + 1
    assert learner.skipped_nonfinite == skipped_before + 1
    assert state["config"]["learner"]["lr"] == 1e-3  # the resolved config travels with the checkpoint
    resumed = PromptSampler(load_problems(cfg.data, "train"), seed=0)
    resumed.load_state_dict(state["sampler"])
    assert [p.uid for p in resumed.next_batch(2)] == [p.uid for p in sampler.next_batch(2)]


# ----------------------------------------------------------------------------------------------------
# Layout, pruning, corrupt checkpoints


def test_save_publishes_atomically_and_keeps_the_last_n(tmp_path, learner, tiny_path):
    (tmp_path / CKPT / ".tmp-step-000009").mkdir(parents=True)  # leftovers of a killed save and deletion
    (tmp_path / CKPT / ".trash-step-000008").mkdir()
    for step in (1, 2, 3):
        save(tmp_path, step, learner, tiny_path, keep_last=2)
    assert names(tmp_path) == ["latest", "step-000002", "step-000003"]
    assert (tmp_path / CKPT / "latest").read_text() == "step-000003"
    manifest = json.loads((tmp_path / CKPT / "step-000003" / checkpoint.MANIFEST).read_text())
    assert {"trainer_state.json", "rng_rank0.json", "hf_model/model.safetensors", "hf_model/config.json",
            "engine/mp_rank_00_model_states.pt", "engine/zero_pp_rank_0_mp_rank_00_optim_states.pt"} <= set(
        manifest["files"])

    # Resumed from step 1 (say) and saved step 2 again: step 3 belongs to the abandoned branch and goes, so a
    # later `run.resume=auto` cannot jump back onto it.
    save(tmp_path, 2, learner, tiny_path, keep_last=2)
    assert names(tmp_path) == ["latest", "step-000002"]
    assert (tmp_path / CKPT / "latest").read_text() == "step-000002"


def test_corrupt_checkpoints_are_skipped_with_a_warning_naming_them(tmp_path, learner, tiny_path):
    for step in (1, 2, 3):
        save(tmp_path, step, learner, tiny_path)
    ckpts = {s: tmp_path / CKPT / f"step-00000{s}" for s in (1, 2, 3)}
    assert checkpoint.find_resumable(tmp_path) == ckpts[3]

    optim = ckpts[3] / "engine" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    with open(optim, "r+b") as f:  # half-written: the tail is missing
        f.truncate(optim.stat().st_size // 2)
    (ckpts[2] / checkpoint.MANIFEST).unlink()  # killed before the manifest was written
    with pytest.warns(UserWarning) as caught:
        assert checkpoint.find_resumable(tmp_path) == ckpts[1]
    messages = [str(w.message) for w in caught]
    assert any(str(ckpts[3]) in m and "bytes, the manifest says" in m for m in messages)
    assert any(str(ckpts[2]) in m and "no MANIFEST.json" in m for m in messages)

    (ckpts[1] / checkpoint.MANIFEST).write_text('{"step": 1, "fi')  # a torn manifest
    with pytest.warns(UserWarning, match="step-000001: MANIFEST.json is not valid JSON"):
        assert checkpoint.find_resumable(tmp_path) is None
    with pytest.raises(checkpoint.CheckpointError, match="step-000003 is not a usable checkpoint"):
        checkpoint.resolve_resume(tmp_path, str(ckpts[3]))
    assert train_main(["export", "--run", str(tmp_path), "--step", "3", "--out", str(tmp_path / "out")]) == 2


class _RunsCode:
    """Unpickling this calls os.mkdir: a stand-in for a checkpoint that runs code when loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_loading_refuses_pickled_code(tmp_path, learner, tiny_path):
    ckpt = save(tmp_path, 1, learner, tiny_path)
    marker = tmp_path / "code-ran"
    target = ckpt / "engine" / "mp_rank_00_model_states.pt"
    torch.save({"module": _RunsCode(marker)}, target)
    manifest = json.loads((ckpt / checkpoint.MANIFEST).read_text())
    manifest["files"]["engine/mp_rank_00_model_states.pt"] = target.stat().st_size  # looks complete
    (ckpt / checkpoint.MANIFEST).write_text(json.dumps(manifest))
    assert checkpoint.is_complete(ckpt) == (True, "")

    with pytest.raises(checkpoint.CheckpointError, match=r"refused to unpickle.*GLOBAL posix.mkdir"):
        checkpoint.load_checkpoint(ckpt, learner.engine)
    # DeepSpeed's own loader (weights_only=False) would have created the marker.
    assert not marker.exists()


def test_allowlist_covers_what_zero3_bf16_pickles(tmp_path, tiny_path):
    """ZeRO-0/2 fp32 round trips are in test_learner.py; stage 3 with bf16 pickles the most DeepSpeed classes."""
    zero3 = Learner(make_cfg("learner.zero_stage=3", "learner.precision=bf16"), tiny_path, total_optimizer_steps=4)
    zero3.update(random_batch())
    ckpt = save(tmp_path, 1, zero3, tiny_path)
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in checkpoint._deepspeed_safe_globals()}
    for path in (ckpt / "engine").glob("*.pt"):
        assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path))) <= allowed, path.name
    assert checkpoint.load_checkpoint(ckpt, zero3.engine) == {"step": 1}


# ----------------------------------------------------------------------------------------------------
# A save that fails leaves the previous checkpoint usable


def _fail_in_torch_save(monkeypatch, learner):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)  # DeepSpeed's TorchCheckpointEngine writes with torch.save


def _fail_in_hf_folder(monkeypatch, learner):
    def out_of_memory(self, *args, **kwargs):
        raise MemoryError("cannot allocate the gathered weights")

    monkeypatch.setattr(type(learner.base_config), "save_pretrained", out_of_memory)


def _fail_at_manifest(monkeypatch, learner):
    write = checkpoint._write_json_atomic

    def full_disk_at_manifest(path, data):
        if path.name == checkpoint.MANIFEST:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(path, data)

    monkeypatch.setattr(checkpoint, "_write_json_atomic", full_disk_at_manifest)


@pytest.mark.parametrize("fail", [_fail_in_torch_save, _fail_in_hf_folder, _fail_at_manifest])
def test_failed_save_leaves_previous_checkpoint_usable(tmp_path, learner, tiny_path, monkeypatch, fail):
    first = save(tmp_path, 1, learner, tiny_path)
    at_step_1 = weights(learner)
    learner.update(random_batch(seed=1))
    assert not all(torch.equal(at_step_1[k], v) for k, v in weights(learner).items())

    with monkeypatch.context() as patch:
        fail(patch, learner)
        expected = f"saving step-000002 failed .*use {re.escape(str(first))}$"
        with pytest.raises(checkpoint.CheckpointError, match=expected):
            save(tmp_path, 2, learner, tiny_path)
    assert names(tmp_path) == ["latest", "step-000001"]  # the temporary folder is gone, nothing else touched
    assert (tmp_path / CKPT / "latest").read_text() == "step-000001"
    assert checkpoint.find_resumable(tmp_path) == first
    assert checkpoint.load_checkpoint(first, learner.engine) == {"step": 1}
    for name, value in weights(learner).items():
        assert torch.equal(value, at_step_1[name]), name


def test_a_real_write_failure_is_reported_and_cleaned_up(tmp_path, learner, tiny_path):
    """Not a patched failure: past RLIMIT_FSIZE the kernel refuses the write (EFBIG), as a full disk does
    (ENOSPC). torch's zip writer, under DeepSpeed's engine save, reports that as a RuntimeError ("unexpected
    pos"), not an OSError: a run that filled its disk once stopped with that traceback and left its temporary
    folder behind."""
    first = save(tmp_path, 1, learner, tiny_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process at the limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    expected = f"saving step-000002 failed .*GB free on .*use {re.escape(str(first))}$"
    try:
        with pytest.raises(checkpoint.CheckpointError, match=expected):
            save(tmp_path, 2, learner, tiny_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert names(tmp_path) == ["latest", "step-000001"]
    assert checkpoint.load_checkpoint(first, learner.engine) == {"step": 1}


# ----------------------------------------------------------------------------------------------------
# Export: a plain HF folder with LoRA merged, loaded by transformers and vLLM


@torch.no_grad()
def test_export_of_a_lora_run_is_merged_and_decodes_like_the_learner(tmp_path, tiny_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from grpo_train.rollout import VLLMEngine

    lora = Learner(make_cfg("model.lora.rank=4", "model.lora.alpha=8"), tiny_path, total_optimizer_steps=4)
    with torch.enable_grad():
        for seed in (0, 1):  # B starts at zero: two steps make the adapters non-zero
            lora.update(random_batch(seed=seed))
    save(tmp_path / "run", 2, lora, tiny_path)
    out = tmp_path / "export"
    assert train_main(["export", "--run", str(tmp_path / "run"), "--out", str(out)]) == 0
    assert train_main(["export", "--run", str(tmp_path / "run"), "--out", str(out)]) == 2  # not empty now
    assert train_main(["export", "--run", str(tmp_path / "run"), "--step", "7", "--out", str(tmp_path / "x")]) == 2

    tensors = load_file(str(out / "model.safetensors"))
    assert not any("lora" in k for k in tensors) and "model.embed_tokens.weight" in tensors
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()

    ids = torch.tensor([[1, 9690, 198, 2683, 28, 216, 30, 31], [1, 4093, 314, 253, 2880, 30, 31, 32]])
    lora.engine.eval()
    learner_logits = lora.module(input_ids=ids).logits
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32).eval()
    torch.testing.assert_close(exported(input_ids=ids).logits, learner_logits, rtol=0, atol=1e-4)
    assert (base(input_ids=ids).logits - learner_logits).abs().max() > 1e-3  # the merge is what matches

    engine = VLLMEngine(str(out), max_model_len=256, seed=0, cpu_kvcache_gb=0.125)
    try:
        prompts = [ids[0, :6].tolist(), ids[1, :5].tolist()]
        rollouts = engine.generate(prompts, SamplingSpec(n=1, temperature=0.0, max_tokens=8, seed=0))
    finally:
        engine.close()
    for r in rollouts:  # vLLM's greedy tokens are the learner's argmax at every position
        seq = torch.tensor([r.prompt_token_ids + r.completion_token_ids])
        logits = lora.module(input_ids=seq).logits[0, len(r.prompt_token_ids) - 1 : -1]
        assert logits.argmax(-1).tolist() == r.completion_token_ids
        learner_logp = logits.log_softmax(-1).gather(-1, torch.tensor(r.completion_token_ids)[:, None])[:, 0]
        assert (learner_logp - torch.tensor(r.logprobs)).abs().max() < 1e-3
    lora.engine.train()
