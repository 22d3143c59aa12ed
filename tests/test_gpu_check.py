"""grpo-gpu-check: how it judges a run, its report, its profile of the update, its CPU dry run; and the check itself
on CUDA (`gpu` marker)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_train import gpu_check, gpu_profile
from grpo_train.learner import plain_arch_list
from grpo_train.memory import estimate_memory


def write_metrics(run_dir: Path, rows: list[dict]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def step_row(step: int, **changes) -> dict:
    row = {"step": step, "train/loss": 0.01, "train/grad_norm": 0.5, "train/sync_logprob_max_diff": 0.01,
           "perf/step_s": 2.0, "perf/update_s": 0.5, "memory/update_gib": 2.0, "memory/logprobs_gib": 1.5}
    row.update(changes)
    return row


def small_estimate():
    # 100 M parameters, bf16, ZeRO-2 on one GPU: ~1.5 GiB of learner state, plus activations.
    return estimate_memory(params=100_000_000, trainable=100_000_000, zero_stage=2, world_size=1, precision="bf16",
                           micro_batch_size=4, seq_len=256, completion_len=128, hidden_size=512,
                           intermediate_size=2048, num_layers=8,
                           vocab_size=32000, gradient_checkpointing=False, reference=False,
                           gpu_memory_utilization=0.3, gpu_memory_gib=80)


def test_judge_run_passes_a_run_that_learns_within_the_estimate(tmp_path):
    estimate = small_estimate()
    run = write_metrics(tmp_path / "run", [{"step": 0, "eval/accuracy": 0.0}] + [step_row(s) for s in (1, 2, 3)])
    result = gpu_check.judge_run(run, 3, estimate, engine_gib=0.5)
    assert result["status"] == "PASS", result["summary"]
    assert result["steps"] == 3 and result["sync_gap_max"] == 0.01
    assert result["peak_gib"] == {"update": 2.0, "logprobs": 1.5}
    assert "estimate: update" in result["summary"]


@pytest.mark.parametrize(("rows", "problem"), [
    ([step_row(1), step_row(2)], "2 of 3 steps logged"),
    ([step_row(1), step_row(2, **{"train/loss": float("nan")}), step_row(3)], "train/loss not finite at steps [2]"),
    ([step_row(s, **{"train/grad_norm": 0.0}) for s in (1, 2, 3)], "no learning signal"),
    ([step_row(1), step_row(2, **{"train/sync_logprob_max_diff": 0.4}), step_row(3)], "sync gap 0.400"),
    ([step_row(1), step_row(2, **{"memory/update_gib": 40.0}), step_row(3)], "update phase: 39.50 GiB measured"),
])
def test_judge_run_names_what_failed(tmp_path, rows, problem):
    result = gpu_check.judge_run(write_metrics(tmp_path / "run", rows), 3, small_estimate(), engine_gib=0.5)
    assert result["status"] == "FAIL"
    assert problem in result["summary"]


def test_report_table_and_bug_report_hint(tmp_path):
    report = {
        "environment": {"gpu": "NVIDIA H100 80GB HBM3", "gpu_gib": 79.2, "torch": "2.11.0+cu130", "cuda": "13.0",
                        "transformers": "5.17.0", "deepspeed": "0.19.8", "peft": "0.21.0", "vllm": "not installed",
                        "nvcc": "cuda_13.0"},
        "model": "random-qwen2.5-0.5b", "work": str(tmp_path), "report_path": str(tmp_path / "report.json"),
        "seconds": 100.0,
        "items": {"matmul": {"status": "PASS", "seconds": 5, "summary": "bfloat16 8192^3 matmul: 777.0 TFLOP/s"},
                  "zero3": {"status": "FAIL", "seconds": 60, "summary": "exit code 1: RuntimeError: boom",
                            "log_tail": ["Traceback (most recent call last):", "RuntimeError: boom"]},
                  "vllm": {"status": "SKIP", "seconds": 0, "summary": "vLLM is not installed"}},
    }
    table = gpu_check.format_table(report)
    assert "NVIDIA H100 80GB HBM3 (79.2 GiB)" in table
    assert [line.split()[:2] for line in table.splitlines() if line.startswith(("matmul", "zero3", "vllm"))] == [
        ["matmul", "PASS"], ["zero3", "FAIL"], ["vllm", "SKIP"]]
    assert "result: 1 PASS, 1 SKIP, 1 FAIL" in table
    hint = gpu_check.bug_report_hint(report)
    assert f"{tmp_path}/logs/zero3.log" in hint and "RuntimeError: boom" in hint and "report.json" in hint


def test_flops_per_token_counts_every_matmul():
    from grpo_train.models import qwen25_config

    config = qwen25_config("0.5b")
    # Qwen2.5-0.5B: 494 M parameters, of which the 136 M embedding is also the LM head (tied); biases and norms
    # are not matmuls. 6 FLOPs per matmul weight and token, plus causal attention.
    layers = config.num_hidden_layers * (896 * (896 + 2 * 128) + 896 * 896 + 3 * 896 * 4864)
    expected = 6 * (layers + 896 * 151936) + 6 * 24 * 512 * 896
    assert gpu_profile.flops_per_token(config, 512) == expected
    assert 2.9e9 < expected < 3.1e9


def test_plain_arch_list_drops_arch_specific_suffixes():
    # DeepSpeed 0.19.8's JIT builder fails on "9.0a" (int('0a')): FusedAdam is built for the plain arch instead.
    assert plain_arch_list("8.0 9.0a;10.0f+PTX") == "8.0;9.0;10.0+PTX"
    assert plain_arch_list("9.0;9.0a") == "9.0"
    assert plain_arch_list("7.5;8.6+PTX") == "7.5;8.6+PTX"


def test_bad_arguments_are_refused_before_anything_runs(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.json").write_text("{}")
    assert gpu_check.main(["--out", str(tmp_path / "old"), "--cpu-dry-run"]) == 2
    assert (tmp_path / "old" / "report.json").read_text() == "{}"  # nothing overwritten
    assert gpu_check.main(["--out", str(tmp_path / "new"), "--items", "zero2,warp", "--cpu-dry-run"]) == 2
    assert not (tmp_path / "new").exists()


def _run_check(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "grpo_train.gpu_check", "--out", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=1200)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One CPU dry run of the check for the tests below: (the process, its --out folder)."""
    # Not the vllm item: the vLLM engine's training path is covered by tests/test_trainer.py. Not the resume item
    # (three more runs, ~70 s of CI): exact resume is checked end to end by tests/test_faults.py, test_async.py and
    # test_ustat_trainer.py; the item compares the final weights with the same safetensors reads as they do.
    out = tmp_path_factory.mktemp("gpu-check") / "check"
    proc = _run_check(out, "--cpu-dry-run", "--items", "fused_adam,matmul,profile,zero2,throughput,decode")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, out


@pytest.mark.slow
def test_cpu_dry_run_trains_measures_throughput_and_times_decode_steps(dry_run):
    """The check's own machinery on the CPU (not the resume item: the dry run leaves it out): the real CLI trains
    tiny-qwen2.5 (Qwen2.5's tokenizer and vocabulary) with a learning signal, the throughput item runs the learner
    and plain PyTorch, the decode item times decode steps of the model."""
    from transformers import AutoConfig

    from grpo_train.models import resolve_model

    proc, out = dry_run
    report = json.loads((out / "report.json").read_text())
    items = report["items"]
    assert {name: r["status"] for name, r in items.items()} == {
        "fused_adam": "SKIP", "matmul": "PASS", "profile": "PASS", "zero2": "PASS", "throughput": "PASS",
        "decode": "PASS"}
    assert list(items) == ["fused_adam", "matmul", "profile", "zero2", "throughput", "decode"]  # --items' order
    assert all(math.isfinite(x) and x != 0 for x in items["zero2"]["loss"])  # advantages were not all zero
    assert items["throughput"]["learner_tokens_per_s"] > 0 and items["throughput"]["plain_tokens_per_s"] > 0
    assert "learner_mfu" in items["throughput"]  # the matmul item's peak reached the throughput item
    decode = items["decode"]  # a step's time by batch, and the largest batch against twice its half
    assert set(decode["step_ms"]) == {"1", "2", "4"} and all(ms > 0 for ms in decode["step_ms"].values())
    assert decode["together"] == pytest.approx(decode["step_ms"]["4"] / (2 * decode["step_ms"]["2"]))
    # Each step ran the model on its batch: at least its sequences' forward FLOPs (2 per matmul weight), a floor that
    # grows with the batch, at 1 TFLOP/s, above any CPU's fp32 peak (a step that timed no model call reports a few
    # microseconds: 0.0395 ms per sequence here). Not the measured times against each other: on a 2-core CPU a
    # step of 1 sequence can take 3x one of 4 (95 ms against 28 ms, a slow path of the 1-row matmuls).
    config = AutoConfig.from_pretrained(resolve_model("tiny-qwen2.5"))
    floor_ms = {b: int(b) * gpu_profile.flops_per_token(config, decode["prompt_len"]) / 3 / 1e9
                for b in decode["step_ms"]}
    assert all(ms > floor_ms[b] for b, ms in decode["step_ms"].items()), (decode["step_ms"], floor_ms)
    assert "zero2" in proc.stdout and "result: " in proc.stdout
    assert not list((out / "runs").glob("*/checkpoints"))  # removed once judged (no --keep-runs)


@pytest.mark.slow
def test_cpu_dry_run_profiles_the_update_and_its_variants(dry_run):
    """The profile item on the CPU (aten ops stand for kernels, scalar reads for host syncs): the update's top ops,
    launches, busy share and syncs, the same counts in a second update, and one row per variant against the plain
    pass; the tables printed, in the report and in profile.json."""
    proc, out = dry_run
    profile = json.loads((out / "report.json").read_text())["items"]["profile"]
    assert json.loads((out / "profile.json").read_text()) == {k: v for k, v in profile.items() if k != "seconds"}
    top = profile["top_kernels"]
    assert 0 < len(top) <= 15
    assert {"aten::mm", "aten::addmm", "aten::bmm"} & {k["name"] for k in top}  # the model's matmuls ran
    assert [k["ms"] for k in top] == sorted((k["ms"] for k in top), reverse=True)
    assert all(k["calls"] > 0 for k in top) and 0 < sum(k["share"] for k in top) <= 1 + 1e-9
    # Counts of a second update of the same batch: the same (they are not timings). The update returns its
    # statistics as Python floats, so at least one scalar read (a host sync on a GPU).
    assert isinstance(profile["launches"], int) and profile["launches"] > 0
    assert isinstance(profile["host_syncs"], int) and profile["host_syncs"] > 0
    assert profile["again"] == {"launches": profile["launches"], "host_syncs": profile["host_syncs"]}
    assert 0 < profile["busy"] <= 1 and profile["wall_s"] > 0
    assert (out / "profile_trace.json.gz").stat().st_size > 0

    rows = {r["variant"]: r for r in profile["variants"]}
    assert list(rows) == [name for name, _ in gpu_profile.variants()]  # one row per variant, in order
    # On the CPU: flex attention has no backward pass and flash_attn is not installed; everything else runs.
    assert {name for name, r in rows.items() if r["status"] == "SKIP"} == {"flex attention", "flash attention 2"}
    assert "ZeRO-2" in rows and rows["ZeRO-2"]["status"] == "PASS"  # DeepSpeed's optimizer beside the default's
    for r in rows.values():
        if r["status"] == "PASS":
            assert r["tokens_per_s"] > 0
            assert r["vs_plain"] == pytest.approx(r["tokens_per_s"] / profile["plain_tokens_per_s"])
        else:
            assert r["status"] == "SKIP" and r["note"]
    assert rows["default"]["tokens_per_s"] == profile["learner_tokens_per_s"]

    printed = proc.stdout
    assert "top 15 CPU ops by CPU time:" in printed
    assert all(any(line.strip().startswith(name) for line in printed.splitlines()) for name in rows)
    table_lines = [line for line in printed.splitlines() if line.startswith("profile ")]
    assert len(table_lines) == 1 and "host syncs" in table_lines[0]  # format_table: one line


def test_profile_counts_ops_syncs_and_busy_time_on_cpu(tmp_path):
    """profile_update on a hand-made step: one matmul, a sum and a max, two scalar reads."""
    a = torch.randn(64, 64)

    def step():
        x = a @ a
        float(x.sum())
        x.max().item()

    result = gpu_profile.profile_update(step, cuda=False, trace=tmp_path / "trace.json.gz")
    assert result["host_syncs"] == 2  # float() and .item(): two aten::_local_scalar_dense
    names = [k["name"] for k in result["top_kernels"]]
    assert {"aten::mm", "aten::sum", "aten::max"} <= set(names)
    assert result["launches"] == sum(k["calls"] for k in result["top_kernels"])  # < 15 op names: all are listed
    assert 0 < result["busy"] <= 1
    assert (tmp_path / "trace.json.gz").stat().st_size > 0


def test_union_and_top_kernels_by_hand():
    # [0, 10] and [5, 15] overlap: 15 us; [20, 25]: 5 us; [30, 30]: 0 us. Union 20 us.
    assert gpu_profile.union_us([(20, 25), (0, 10), (30, 30), (5, 15)]) == 20
    assert gpu_profile.union_us([]) == 0
    # mm: 10 + 4 = 14 us in 2 calls, add: 6 us; of 20 us in all: 70% and 30%.
    ops = [("mm", 0, 10, 10.0), ("add", 10, 16, 6.0), ("mm", 20, 24, 4.0)]
    assert gpu_profile.top_kernels(ops) == [{"name": "mm", "calls": 2, "ms": 0.014, "share": 0.7},
                                            {"name": "add", "calls": 1, "ms": 0.006, "share": 0.3}]
    assert gpu_profile.top_kernels(ops, n=1)[0]["name"] == "mm"


def test_every_variant_is_a_config_the_learner_accepts(tmp_path):
    """Each variant's overrides load over the check's GPU config (bf16; the profile's ZeRO-0), but the attention
    kernels not installed here; ZeRO-2, DeepSpeed's optimizer, is the variant beside FlatAdamW."""
    import yaml

    config = tmp_path / "check.yaml"
    config.write_text(yaml.safe_dump(gpu_check.base_config("tiny-qwen2.5", dry_run=False)))
    bf16 = dict(gpu_profile.variants())
    assert bf16["ZeRO-2"] == ["learner.zero_stage=2"] and "learner.zero_stage=0" in gpu_profile.BASE_OVERRIDES
    keys = {o.split("=")[0] for overrides in bf16.values() for o in overrides}
    assert {"learner.packing", "learner.fused_head", "learner.zero_stage", "learner.compile",
            "model.gradient_checkpointing", "model.attn_implementation"} == keys
    refused = {name: why for name, overrides in bf16.items()
               if (why := gpu_profile.cannot_run(str(config), overrides, cuda=True))}
    # flash_attn is not installed here; flex_attention runs where config/schema.py lists it among the kernels it takes.
    assert set(refused) <= {"flash attention 2", "flex attention"}, refused
    assert "flash_attn" in refused["flash attention 2"]


@pytest.mark.gpu
def test_gpu_check_on_cuda(tmp_path):
    """On a CUDA machine: the check's core items pass (the full check is `grpo-gpu-check`); the profile saw kernels
    and counted the same launches and host syncs in two updates."""
    proc = _run_check(tmp_path / "check", "--items", "fused_adam,matmul,profile,zero2,resume")
    assert proc.returncode == 0, proc.stdout[-5000:]
    profile = json.loads((tmp_path / "check" / "report.json").read_text())["items"]["profile"]
    assert profile["device"] == "cuda" and profile["launches"] > 0 and 0 < profile["busy"] <= 1
    assert profile["again"] == {"launches": profile["launches"], "host_syncs": profile["host_syncs"]}


def test_paths_that_need_neither_import_neither():
    """vLLM and DeepSpeed are imported only where used (an image without vLLM runs the hf engine; --print-config,
    the verifier, grpo-eval's modules and the check's parent process need neither)."""
    code = ("import io, contextlib, sys\n"
            "import grpo_train.evaluation, grpo_train.rollout, grpo_train.gpu_check, grpo_train.verifier\n"
            "from grpo_train import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    cli.train_main(['--config', 'configs/tiny-cpu.yaml', '--print-config'])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
            "('vllm', 'deepspeed', 'datasets', 'wandb')}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
