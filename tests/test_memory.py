"""The per-GPU memory estimate (grpo_train/memory.py) against hand-worked numbers."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import pytest

from grpo_train.config import load_config
from grpo_train.memory import (
    FUSE_MIN_ELEMENTS,
    GIB,
    HEAD_CHUNK_ELEMENTS,
    KNOWN_MODELS,
    ModelDims,
    PhasePeaks,
    activation_bytes,
    dims_from_config,
    estimate_for_config,
    estimate_memory,
    host_usage,
    logprob_pass_bytes,
    lora_param_count,
    memory_report,
    model_dims,
)

# A model small enough to count by hand: hidden 8, MLP 16, 2 layers, 2 heads of 4 (q 8), 1 kv head (kv 4).
SMALL = ModelDims(hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2, num_kv_heads=1,
                  vocab_size=10, tied_embeddings=True, qkv_bias=True)


def _estimate(**overrides):
    """estimate_memory with round numbers: 1e9 params, 4 GPUs, bf16, no activations to speak of."""
    args = dict(params=10**9, trainable=10**9, zero_stage=0, world_size=4, precision="bf16",
                micro_batch_size=1, seq_len=1, completion_len=1, hidden_size=1, intermediate_size=1, num_layers=1,
                vocab_size=1,
                gradient_checkpointing=False, reference=False, gpu_memory_utilization=0.5,
                gpu_memory_gib=80.0)
    return estimate_memory(**{**args, **overrides})


def test_param_count_by_hand_and_published_sizes():
    # SMALL per layer: q 8*8 + k 8*4 + v 8*4 + o 8*8 = 192; MLP 3 * 8*16 = 384; biases 8 + 4 + 4 = 16;
    # norms 2 * 8 = 16 -> 608. Two layers 1216 + tied embedding 10*8 = 80 + final norm 8 = 1304.
    assert SMALL.param_count() == 1304
    # Published totals (model cards: 0.49B, 1.54B, 7.62B; exact counts of the released safetensors).
    assert KNOWN_MODELS["Qwen/Qwen2.5-0.5B-Instruct"].param_count() == 494_032_768
    assert KNOWN_MODELS["Qwen/Qwen2.5-1.5B-Instruct"].param_count() == 1_543_714_304
    assert KNOWN_MODELS["Qwen/Qwen2.5-Math-7B"].param_count() == 7_615_616_512
    assert KNOWN_MODELS["smollm2-135m-instruct"].param_count() == 134_515_008


def test_zero3_7b_over_8_gpus_is_16_bytes_per_param_over_8():
    # 7.6e9 params, bf16 + fp32 Adam, ZeRO-3 over 8: weights 2 * 7.6e9 / 8 = 1.9e9 B = 1.7695 GiB,
    # gradients the same, optimizer 12 * 7.6e9 / 8 = 11.4e9 B = 10.6171 GiB;
    # together 16 * 7.6e9 / 8 = 15.2e9 B = 14.1561 GiB.
    e = _estimate(params=7_600_000_000, trainable=7_600_000_000, zero_stage=3, world_size=8)
    assert e.weights == pytest.approx(1.7695, abs=1e-4)
    assert e.gradients == pytest.approx(1.7695, abs=1e-4)
    assert e.optimizer == pytest.approx(10.6171, abs=1e-4)
    assert e.weights + e.gradients + e.optimizer == pytest.approx(14.1561, abs=1e-4)


@pytest.mark.parametrize(("stage", "weights", "gradients", "optimizer"), [
    # 1e9 params, 4 GPUs, bf16: 2e9 B of weights, 2e9 of gradients, 12e9 of optimizer state, each / 4 once
    # its stage partitions it (ZeRO-1: optimizer, ZeRO-2: + gradients, ZeRO-3: + weights). ZeRO-0's FlatAdamW
    # keeps autograd's bf16 gradients (2), their gathered copy (2) and the fp32 sum (4): 8e9.
    (0, 2e9, 8e9, 12e9),
    (1, 2e9, 2e9, 3e9),
    (2, 2e9, 0.5e9, 3e9),
    (3, 0.5e9, 0.5e9, 3e9),
])
def test_each_zero_stage_partitions_one_more_part(stage, weights, gradients, optimizer):
    e = _estimate(zero_stage=stage)
    expected = (weights / GIB, gradients / GIB, optimizer / GIB)
    assert (e.weights, e.gradients, e.optimizer) == pytest.approx(expected)


def test_fp32_keeps_no_master_copy():
    # fp32: weights 4 + gradients 4 + Adam m and v 8 = 16 bytes, as bf16's 2 + 2 + 12. ZeRO-1, 1e9 params, one GPU
    # (ZeRO-0's FlatAdamW keeps autograd's first gradients beside the flat sum: 8 bytes).
    e = _estimate(precision="fp32", zero_stage=1, world_size=1)
    assert (e.weights, e.gradients, e.optimizer) == pytest.approx((4e9 / GIB, 4e9 / GIB, 8e9 / GIB))
    assert _estimate(precision="fp32").gradients == pytest.approx(8e9 / GIB)
    with pytest.raises(ValueError, match="bf16 or fp32"):
        _estimate(precision="fp16")


def test_lora_and_reference_model():
    # LoRA: 1e9 frozen + 1e7 trainable, ZeRO-2 over 4: weights 2 * 1.01e9 (whole), gradients 2e7 / 4 = 5e6,
    # optimizer 12e7 / 4 = 3e7 bytes.
    e = _estimate(params=1_010_000_000, trainable=10**7, zero_stage=2)
    assert (e.weights, e.gradients, e.optimizer) == pytest.approx((2.02e9 / GIB, 5e6 / GIB, 3e7 / GIB))
    # vLLM holds the merged model, 1e9 params = 2e9 B, without the adapters: 40 - 1.8626 GiB of KV cache.
    merged = _estimate(params=1_010_000_000, trainable=10**7, lora=True)
    assert merged.vllm_kv_cache == pytest.approx(40 - 2e9 / GIB)
    # A reference copy: bf16 weights, 2e9 B whole below ZeRO-3, / 4 under it.
    assert _estimate(reference=True, zero_stage=2).reference == pytest.approx(2e9 / GIB)
    assert _estimate(reference=True, zero_stage=3).reference == pytest.approx(0.5e9 / GIB)
    assert _estimate().reference == 0.0


def test_lora_param_count_by_hand():
    # rank 2 on q (8 -> 8) and v (8 -> 4): 2 * (8 + 8) + 2 * (8 + 4) = 32 + 24 = 56 per layer,
    # 112 for 2 layers.
    assert lora_param_count(SMALL, 2, ["q_proj", "v_proj"]) == 112
    # The 7B config's adapters: rank 64 on all 7 projections. Per layer (in + out): q 7168, k 4096, v 4096,
    # o 7168, gate 22528, up 22528, down 22528 = 90112; * 64 * 28 layers = 161,480,704.
    dims = KNOWN_MODELS["Qwen/Qwen2.5-Math-7B"]
    assert lora_param_count(dims, 64, list(dims.module_shapes())) == 161_480_704
    with pytest.raises(ValueError, match="lm_head"):
        lora_param_count(SMALL, 2, ["q_proj", "lm_head"])


def test_activation_bytes_by_hand():
    # b = 2 sequences of s = 3 tokens (c = 2 of them completion) -> 6 tokens; h = 4, i = 8, 5 layers, V = 10,
    # 2-byte activations. One layer: 6 * 2 * (9*4 + 4*8) = 6 * 2 * 68 = 816; 5 layers 4080; with checkpointing the
    # layer inputs 6 * 2 * 4 * 5 = 240 + one layer 816 = 1056.
    # Head, fused, chunks of 30 elements = 3 rows of the 4 completion rows: 3 * 10 * 2 * 2 = 120 for the chunk's logits
    # and their gradient + 10 * 4 * 2 = 80 for one chunk's head-weight gradient = 200. With chunks of 1000 elements
    # (and by default) all 4 rows fit one chunk: 160 + 80 = 240. Reference path: all 4 rows, logits and gradient: 160.
    args = dict(micro_batch_size=2, seq_len=3, completion_len=2, hidden_size=4, intermediate_size=8, num_layers=5,
                vocab_size=10, bytes_per_activation=2)
    assert activation_bytes(**args, gradient_checkpointing=False, head_chunk_elements=30) == 4080 + 200
    assert activation_bytes(**args, gradient_checkpointing=True, head_chunk_elements=30) == 1056 + 200
    assert activation_bytes(**args, gradient_checkpointing=False, head_chunk_elements=1000) == 4080 + 240
    assert activation_bytes(**args, gradient_checkpointing=False) == 4080 + 240
    assert activation_bytes(**args, gradient_checkpointing=False, head_chunk_elements=None) == 4080 + 160


def test_the_estimates_head_chunk_is_the_learners():
    from grpo_train import forward, logprob_kernels

    assert HEAD_CHUNK_ELEMENTS == logprob_kernels.GPU_HEAD_CHUNK_ELEMENTS
    assert FUSE_MIN_ELEMENTS == forward.FUSE_MIN_ELEMENTS


def test_peak_is_the_larger_phase_and_sleep_mode_overlaps_vllm_with_activations():
    # 1e9 params ZeRO-1 bf16 on one GPU: static 16e9 B = 14.9012 GiB. Activations of 1 x 4096 tokens, all
    # completion, V = 10^5, h = i = L = 1: layers 4096 * 2 * 13 = 106,496; the head in chunks of 2^27 // 10^5 = 1342
    # rows: 1342 * 10^5 * 2 * 2 = 536,800,000 + its weight's gradient 10^5 * 2 = 200,000 -> 537,106,496 B = 0.500219 GiB
    # (the reference path's 4096 * 10^5 * 4 = 1.526 GiB). vLLM 0.5 x 80 = 40 GiB.
    kwargs = dict(seq_len=4096, completion_len=4096, vocab_size=10**5)
    awake = _estimate(**kwargs, vllm_sleeps=False, zero_stage=1, world_size=1)
    asleep = _estimate(**kwargs, vllm_sleeps=True, zero_stage=1, world_size=1)
    assert awake.activations == pytest.approx(0.500219, abs=1e-6)
    assert awake.total == pytest.approx(14.9012 + 0.500219 + 40.0, abs=1e-4)  # everything at once
    assert asleep.total == pytest.approx(14.9012 + 40.0, abs=1e-4)  # rollout phase > update phase
    # vLLM's bf16 weights 2e9 B = 1.8626 GiB leave 40 - 1.8626 = 38.1374 for the KV cache; tp = 2 halves them.
    assert awake.vllm_kv_cache == pytest.approx(38.1374, abs=1e-4)
    assert _estimate(tensor_parallel_size=2).vllm_kv_cache == pytest.approx(40 - 0.9313, abs=1e-4)
    assert awake.fits and not _estimate(gpu_memory_gib=16.0).fits  # 14.9 + 8 > 16


def test_logprob_pass_bytes_by_hand():
    # b = 2 sequences of s = 3 tokens (c = 2 completion) -> 6 tokens; h = 4, i = 8, V = 10, 2-byte activations: one
    # layer's set 6 * 2 * (9*4 + 4*8) = 816, and the logits of one head chunk: all 4 completion rows by default,
    # 4 * 10 * 2 = 80 (896); 3 rows in chunks of 30 elements, 60 (876); the reference path's 4 rows, 80.
    args = dict(micro_batch_size=2, seq_len=3, completion_len=2, hidden_size=4, intermediate_size=8, vocab_size=10,
                bytes_per_activation=2)
    assert logprob_pass_bytes(**args) == 896
    assert logprob_pass_bytes(**args, head_chunk_elements=30) == 876
    assert logprob_pass_bytes(**args, head_chunk_elements=None) == 896


@pytest.mark.parametrize("sleeps", [True, False])
def test_peak_covers_the_logprob_passes(sleeps):
    # Activations as above, with gradient checkpointing; static 14.9012 GiB, vLLM 40 GiB.
    e = _estimate(seq_len=1024, completion_len=512, vocab_size=10**5, hidden_size=64, intermediate_size=256,
                  num_layers=4, gradient_checkpointing=True, vllm_sleeps=sleeps)
    static = e.weights + e.gradients + e.optimizer + e.reference
    # one layer's set over 1024 tokens, the logits of the 512 completion rows (one chunk: 2^27 // 10^5 = 1342 rows)
    assert e.logprob_pass == pytest.approx((1024 * 2 * (9 * 64 + 4 * 256) + 512 * 10**5 * 2) / GIB)
    assert e.total >= static + e.logprob_pass + (0 if sleeps else e.vllm) - 1e-9
    assert e.total >= static + e.activations + (0 if sleeps else e.vllm) - 1e-9


def test_trainer_puts_vllm_to_sleep_before_the_logprob_passes():
    # The estimate counts the old/reference log-prob passes without vLLM's share when sleep mode is on: the
    # trainer must free vLLM before them, and must not use the engine again before the weight sync wakes it.
    from grpo_train import trainer

    source = inspect.getsource(trainer.train)
    asleep = source[source.index("engine.sleep()"):source.index("engine.load_weights(learner.policy_weights())\n"
                                                                 "        seconds[\"sync\"]")]
    assert "batch.old_logp = learner.logprobs(" in asleep and "batch.ref_logp = learner.logprobs(" in asleep
    assert "learner.update(" in asleep and "engine." not in asleep.removeprefix("engine.sleep()")


def test_7b_peak_with_vllm_awake_during_the_logprob_passes_would_exceed_the_estimate():
    # What moving engine.sleep() before the passes bought: with vLLM's 40 GiB still held during the reference
    # pass, the ZeRO-3 7B config would peak 3.55 GiB above its estimate. That pass on 4 x 4096 tokens, 3072 of each
    # completion: one layer's set 4 * 4096 * 2 * (9 * 3584 + 4 * 18944) = 3,539,992,576 B, and one head chunk of
    # 2^27 // 152,064 = 882 rows, 882 * 152,064 * 2 = 268,240,896 B: 3,808,233,472 B = 3.54669 GiB.
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs/qwen2.5-math-7b-math.yaml")
    e = estimate_for_config(cfg, 8, 80.0)
    static = e.weights + e.gradients + e.optimizer + e.reference
    assert e.logprob_pass == pytest.approx(3.54669, abs=1e-5)
    assert e.total == pytest.approx(static + e.vllm)  # asleep during the passes, the rollout phase is the peak
    assert static + e.vllm + e.logprob_pass == pytest.approx(e.total + 3.54669, abs=1e-5)


def test_without_the_fused_head_the_estimate_holds_the_whole_logits():
    # learner.fused_head=false: the 7B config's log-prob pass of 4 x 4096 tokens holds the logits of all 4 x 3072
    # completion positions, 12,288 * 152,064 * 2 = 3,737,124,864 B, beside the layers' 3,539,992,576 B (above).
    path = Path(__file__).resolve().parents[1] / "configs/qwen2.5-math-7b-math.yaml"
    whole = estimate_for_config(load_config(path, ["learner.fused_head=false"]), 8, 80.0)
    fused = estimate_for_config(load_config(path), 8, 80.0)
    assert whole.logprob_pass == pytest.approx((3_539_992_576 + 3_737_124_864) / 2**30, abs=1e-9)
    # The update: the whole logits and their gradient instead of one chunk's and the head weight's gradient.
    head_whole, head_fused = 2 * 3_737_124_864, 882 * 152064 * 2 * 2 + 152064 * 3584 * 2
    assert whole.activations - fused.activations == pytest.approx((head_whole - head_fused) / 2**30, abs=1e-9)


def test_with_rollout_servers_the_learners_gpus_hold_no_vllm():
    path = Path(__file__).resolve().parents[1] / "configs/qwen2.5-math-7b-math.yaml"
    colocated = estimate_for_config(load_config(path), 8, 80.0)
    split = estimate_for_config(load_config(path, ["rollout.placement=servers"]), 8, 80.0)
    assert split.vllm == 0 and split.vllm_kv_cache == 0 and colocated.vllm == 40.0
    static = split.weights + split.gradients + split.optimizer + split.reference
    assert split.total == pytest.approx(static + max(split.activations, split.logprob_pass))
    assert "rollout on servers" in memory_report(load_config(path, ["rollout.placement=servers"]), 8)


def test_a_token_budget_sizes_the_activations_by_its_tokens():
    # A budget of 8192 padded tokens counts as one row of 8192 tokens, all completion positions. The log-prob pass:
    # layers 8192 * 2 * (9 * 3584 + 4 * 18944) = 1,769,996,288 B, plus one fused head chunk of 2^27 // 152064 = 882
    # rows, 882 * 152064 * 2 = 268,240,896 B: 2,038,237,184 B. The update's activations: the layers' part twice
    # that of micro-batches of 1 x 4096, the head's part (a chunk's logits and gradient, 882 * 152064 * 2 * 2 B, and
    # the head weight's gradient, 152064 * 3584 * 2 B) the same. A budget of 4096 is micro-batches of 1 x 4096.
    path = Path(__file__).resolve().parents[1] / "configs/qwen2.5-math-7b-math.yaml"
    fixed = estimate_for_config(load_config(path, ["learner.micro_batch_size=1"]), 8, 80.0)
    cfg = load_config(path, ["learner.max_tokens_per_micro_batch=8192"])
    budget = estimate_for_config(cfg, 8, 80.0)
    assert budget.logprob_pass == pytest.approx(2_038_237_184 / 2**30, abs=1e-9)
    head = (882 * 152064 * 2 * 2 + 152064 * 3584 * 2) / 2**30
    assert budget.activations - head == pytest.approx(2 * (fixed.activations - head))
    cfg.learner.max_tokens_per_micro_batch = 4096
    assert estimate_for_config(cfg, 8, 80.0) == fixed
    assert "micro-batches of at most 4096 padded tokens" in memory_report(cfg)


def test_model_dims_from_a_local_config_json(tmp_path):
    config = {"model_type": "qwen2", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 10,
              "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert model_dims(str(tmp_path)) == SMALL
    # Llama: no q/k/v bias unless attention_bias says so; untied embeddings by default.
    untied = {k: v for k, v in config.items() if k != "tie_word_embeddings"}
    llama = dims_from_config(untied | {"model_type": "llama"})
    assert not llama.qkv_bias and not llama.tied_embeddings
    assert model_dims(str(tmp_path / "absent")) is None


def test_table_entry_of_the_embedded_tiny_model_matches_its_real_weights():
    from safetensors import safe_open

    from grpo_train.models import resolve_model

    folder = Path(resolve_model("tiny-qwen2"))
    assert dims_from_config(json.loads((folder / "config.json").read_text())) == KNOWN_MODELS["tiny-qwen2"]
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        names = list(f.keys())  # the safe_open handle is not iterable
        n_params = sum(math.prod(f.get_slice(name).get_shape()) for name in names)
    assert KNOWN_MODELS["tiny-qwen2"].param_count() == n_params


def test_report_rows_and_unknown_models():
    cfg = load_config("configs/qwen2.5-math-7b-math.yaml")
    rows = [line for line in memory_report(cfg).splitlines() if line[2:6].strip().isdigit()]
    assert [int(r[2:6]) for r in rows] == [1, 2, 4, 8]  # no launcher: a row per common world size
    (only,) = [line for line in memory_report(cfg, world_size=8).splitlines() if line[2:6].strip().isdigit()]
    e = estimate_for_config(cfg, 8)
    assert f"{e.total:6.1f}" in only and only.endswith("yes")
    assert all(line.startswith("#") for line in memory_report(cfg).splitlines())  # stays valid YAML
    cfg.model.name_or_path = "nobody/unknown-model"
    assert "unknown" in memory_report(cfg)
    assert estimate_for_config(cfg, 1) is None


def test_host_usage_sees_this_process_memory_its_open_files_and_its_children():
    """The per-step host figures (memory/host_*) that a long run watches for leaks: 256 MiB written here shows in
    this process's resident memory, files opened here in its open files, and a child process's memory in the
    children's figure."""
    import mmap
    import subprocess
    import sys
    import tempfile
    import time

    import numpy as np

    # 256 MiB mapped straight from the kernel, not through malloc: an allocator (glibc, or a tcmalloc that a library
    # preloads) may hand back memory a test before freed and that is still resident, hiding the growth
    region = mmap.mmap(-1, 2**28)
    before = host_usage()
    np.frombuffer(region, dtype=np.uint8)[:] = 1  # every page written: resident now
    files = [tempfile.TemporaryFile() for _ in range(7)]  # noqa: SIM115 (closed below)
    child = subprocess.Popen([sys.executable, "-c", "import sys, numpy; a = numpy.ones(2**24); sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while (during := host_usage())["memory/host_children_rss_gib"] < 0.12 and time.monotonic() < deadline:
            time.sleep(0.1)  # until the child's 128 MiB are written
    finally:
        child.communicate(b"")
        for f in files:
            f.close()
    assert during["memory/host_rss_gib"] - before["memory/host_rss_gib"] >= 0.24
    assert during["memory/host_open_files"] - before["memory/host_open_files"] >= 7
    assert during["memory/host_children_rss_gib"] >= 0.12 > before["memory/host_children_rss_gib"]
    assert PhasePeaks().metrics().keys() >= before.keys()  # the step's memory metrics carry them on every device
    region.close()
