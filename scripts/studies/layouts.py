"""Step time by layout: a model of where a GRPO step's time goes (colocated or split, synchronous or not), checked
against our own runs with CPU cores as devices, and its projection to GPU layouts.

    .venv/bin/python scripts/studies/layouts.py                    # measure 4 layouts on 2 cores (~10 min), check
    .venv/bin/python scripts/studies/layouts.py --report-only      # the check, from the runs already there
    .venv/bin/python scripts/studies/layouts.py --project 7b       # GPU layouts of the 7B config from per-GPU rates
    .venv/bin/python scripts/studies/layouts.py --project 1.5b --gpus 8 --gen-tok-s 9000 --learn-tok-s 20000

The model, per step (G, L in device-seconds: the time one device would take, so they divide by the devices):
    G  generation of the step's completions      = generated tokens / generation tokens/s per device
    L  the learner's passes (log-probs, update)  = trained tokens / learner tokens/s per device
    S  scoring, O the rest (logging): host work on the learner's side; R the colocated engine's weight reload;
    X  the weight transfer to rollout servers    = weight bytes / transfer bandwidth (the servers paused meanwhile)
    tail: the share of a synchronous generation spent waiting on the longest completions, which partial rollouts
          remove (k >= 1 fills the engine's batch with the groups due later)

    colocated sync,  D devices         T = G/D + S + L/D + R + O
    colocated async (k >= 1)           T = (1 - tail) G/D + S + L/D + R + O       (the devices take turns: no overlap)
    split N + M, sync                  T = G/N + S + L/M + X + O
    split N + M, async (k >= 1)        T = max((1 - tail) G/N, S + L/M + O) + X  (the servers generate through the
                                                                                  learner's work, paused for X)

The check (`measure`): one CPU core is one device (taskset, vLLM's OpenMP threads bound to it, OMP_NUM_THREADS=1).
colocated-sync and colocated-async run the learner and its engine on core 0; split-sync and split-async run the
learner on core 0 and a rollout server (`grpo-train serve-rollout`) on core 1, given by URL. The tiny config with
fixed-length completions (the random model never stops before max_tokens). The rates come from the colocated runs
(G, L, S, R, O from colocated-sync; tail from colocated-async's generation per step, which is shorter although no
completion ends early: the pool's batch holds twice the groups) and X from split-sync's transfer (its bandwidth: an
input of the model, as on a cluster); the split layouts are predicted from them and compared with their measured
mean step time (target: within 20%); the colocated ones are the calibration.

Writes <out>/layouts.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from grpo_train.distributed import free_port  # noqa: E402
from grpo_train.metrics import read_jsonl  # noqa: E402
from grpo_train.rollout.server_launch import SERVER_GPU_MEMORY_UTILIZATION, await_health  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts" / "bench"))
from bench_report import DECODE_BANDWIDTH_EFFICIENCY, GPU_LEARNER_MFU, H100, QWEN25_7B  # noqa: E402

BIN = Path(sys.executable).parent
LAYOUTS = ("colocated-sync", "colocated-async", "split-sync", "split-async")
WORKLOAD = ["rollout.max_tokens=64", "run.eval_size=0", "run.samples_every=0", "run.checkpoint_every=0",
            "run.check_sync_every=0", "reward.num_workers=1"]


# ----------------------------------------------------------------------------------------------------
# The model


def step_time(layout: str, G: float, L: float, S: float, O: float, R: float = 0.0, X: float = 0.0,  # noqa: E741, N803
              tail: float = 0.0, devices: int = 1, gen: int = 1, learn: int = 1) -> float:
    """Seconds per step of `layout` (module docstring): colocated-* on `devices`, split-* on gen + learn devices."""
    if layout == "colocated-sync":
        return G / devices + S + L / devices + R + O
    if layout == "colocated-async":
        return (1 - tail) * G / devices + S + L / devices + R + O
    if layout == "split-sync":
        return G / gen + S + L / learn + X + O
    if layout == "split-async":
        return max((1 - tail) * G / gen, S + L / learn + O) + X
    raise ValueError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")


# ----------------------------------------------------------------------------------------------------
# The check on CPU cores


def _pinned_env(core: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": str(core), "PYTHONUNBUFFERED": "1"}


def measure(layout: str, config: Path, steps: int, out: Path, overrides: list[str]) -> None:
    run_dir = out / layout
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    common = [*WORKLOAD, *overrides, f"run.steps={steps}"]
    args = [*common, f"run.output_dir={run_dir / 'run'}"]
    if layout.endswith("async"):
        args.append("rollout.max_staleness=1")
    server = None
    try:
        if layout.startswith("split"):
            port = free_port()
            serve = ["taskset", "-c", "1", str(BIN / "grpo-train"), "serve-rollout", "--config", str(config), *common,
                     "--host", "127.0.0.1", "--port", str(port)]
            server = subprocess.Popen(serve, stdout=(run_dir / "server.log").open("w"), stderr=subprocess.STDOUT,
                                      env=_pinned_env(1), start_new_session=True, cwd=ROOT)
            if not await_health(f"http://127.0.0.1:{port}", 600):
                raise SystemExit(f"the rollout server on port {port} did not answer /health within 600 s")
            args += ["rollout.placement=servers", f"rollout.servers.urls=[http://127.0.0.1:{port}]",
                     "rollout.servers.timeout_s=600"]
        command = ["taskset", "-c", "0", str(BIN / "grpo-train"), "--config", str(config), *args]
        with (run_dir / "stdout.txt").open("w") as stdout:
            subprocess.run(command, stdout=stdout, stderr=subprocess.STDOUT, env=_pinned_env(0), cwd=ROOT, check=True)
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait()


def phases(run_dir: Path, warmup: int) -> dict[str, float]:
    """Mean seconds per measured step: the step, and the model's terms as the run's perf/ metrics give them."""
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "train/loss" in r and r["step"] > warmup]
    if not rows:
        raise SystemExit(f"{run_dir}: no step after the {warmup} warm-up steps")

    def mean(key: str) -> float:
        return statistics.mean(r.get(key, 0.0) for r in rows)

    step, gen, score, sync = mean("perf/step_s"), mean("perf/rollout_s"), mean("perf/reward_s"), mean("perf/sync_s")
    learn = mean("perf/logprobs_s") + mean("perf/update_s")
    return {"steps": len(rows), "step_s": step, "rollout_s": gen, "learn_s": learn, "score_s": score, "sync_s": sync,
            "other_s": step - gen - learn - score - sync, "transfer_bytes": mean("perf/transfer_bytes")}


def check(out: Path, warmup: int) -> dict:
    measured = {layout: phases(out / layout / "run", warmup) for layout in LAYOUTS}
    base = measured["colocated-sync"]
    # The pool's generation per step (k = 1: twice the groups in the engine's batch, none waited on at its end)
    # against the synchronous batch's: what partial rollouts save, here from the larger batch alone.
    tail = 1 - measured["colocated-async"]["rollout_s"] / base["rollout_s"]
    terms = {"G": base["rollout_s"], "L": base["learn_s"], "S": base["score_s"], "O": base["other_s"],
             "R": base["sync_s"], "X": measured["split-sync"]["sync_s"], "tail": tail}
    rows = []
    for layout in LAYOUTS:
        predicted = step_time(layout, **terms)
        actual = measured[layout]["step_s"]
        rows.append({"layout": layout, "measured_s": round(actual, 3), "predicted_s": round(predicted, 3),
                     "error": round(predicted / actual - 1, 3),
                     **{k: round(v, 3) for k, v in measured[layout].items()}})
    bandwidth = measured["split-sync"]["transfer_bytes"] / 1e9 / terms["X"] if terms["X"] else None
    return {"terms": {k: round(v, 4) for k, v in terms.items()}, "layouts": rows,
            "transfer_gb_s": None if bandwidth is None else round(bandwidth, 3)}


# ----------------------------------------------------------------------------------------------------
# GPU projection


# The shipped configs' models and steps on H100s, with bench_report.py's published figures and assumptions (decoding
# memory-bound at 60% of HBM bandwidth, the learner at 40% MFU): generation time depends on how many sequences share a
# GPU's weight reads, so it does not simply divide by the GPUs, which is what makes a split pay.
MODELS = {  # memory: the colocated engine's share of an H100's 80 GB (the config's rollout.gpu_memory_utilization)
    "1.5b": {"config": "configs/qwen2.5-1.5b-gsm8k-fig5.yaml", "params": 1.54e9, "layers": 28, "kv_heads": 2,
             "head_dim": 128, "completions": 64 * 16, "max_tokens": 512, "prompt_tokens": 256, "colocated_memory": 0.3},
    "7b": {"config": "configs/qwen2.5-math-7b-math.yaml", **QWEN25_7B, "completions": 16 * 64, "max_tokens": 3072,
           "prompt_tokens": 256, "colocated_memory": 0.5},
}
H100_BYTES = 80e9


def generation_s(m: dict, gpus: int, partial: bool, memory: float) -> float:
    """Seconds to generate a step's completions on `gpus` H100s (bench_report.h100_projection's decode model), with
    `memory` of each GPU's 80 GB for vLLM: lengths uniform on [0, max_tokens]; as many sequences run at once as their
    keys and values fit (at the mean context), the rest wait for a later wave. Synchronous, each wave's batch thins out
    as completions end; with partial rollouts (k >= 1) the pool keeps it full, the same tokens in fewer decode steps."""
    weight_bytes = 2 * m["params"]
    kv_bytes_per_token = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2
    seqs = m["completions"] / gpus
    steps = m["max_tokens"]
    fits = (memory * H100_BYTES - weight_bytes) / (kv_bytes_per_token * (m["prompt_tokens"] + steps / 2))
    batch = max(1.0, min(seqs, fits))
    bandwidth = H100["hbm_bytes_per_s"] * DECODE_BANDWIDTH_EFFICIENCY

    def decode_step(running: float, context: float) -> float:
        return max((weight_bytes + running * context * kv_bytes_per_token) / bandwidth,
                   2 * m["params"] * running / H100["bf16_dense_flops"])

    if partial:  # seqs x mean length tokens at a full batch of mean context
        decode = seqs * steps / 2 / batch * decode_step(batch, m["prompt_tokens"] + steps / 2)
    else:
        wave = sum(decode_step(batch * (1 - t / steps), m["prompt_tokens"] + t) for t in range(steps))
        decode = math.ceil(seqs / batch - 1e-9) * wave
    prefill = 2 * m["params"] * seqs * m["prompt_tokens"] / H100["bf16_dense_flops"]
    return decode + prefill


def learner_s(m: dict, gpus: int) -> float:
    """Seconds of the learner's passes on `gpus` H100s: 6 P per trained token for the update, 2 P for the reference
    forward (the K3 term), over the completions (mean max_tokens / 2) and the prompts."""
    tokens = m["completions"] * (m["max_tokens"] / 2 + m["prompt_tokens"])
    return 8 * m["params"] * tokens / (gpus * H100["bf16_dense_flops"] * GPU_LEARNER_MFU)


def project(args: argparse.Namespace) -> dict:
    m = MODELS[args.project]
    weight_bytes = 2 * m["params"]
    fixed = {"S": args.score_s, "O": args.other_s, "R": weight_bytes / H100["nvlink_bytes_per_s"],
             "X": weight_bytes / (args.transfer_gb_s * 1e9)}

    def seconds(layout: str, gen: int, learn: int) -> float:
        # step_time's terms in device-seconds at this many GPUs: G / gen is the generation time on gen GPUs; a server
        # has its GPU to itself, a colocated engine its share beside the learner
        memory = m["colocated_memory"] if layout.startswith("colocated") else SERVER_GPU_MEMORY_UTILIZATION
        sync_gen = generation_s(m, gen, partial=False, memory=memory)
        partial = generation_s(m, gen, partial=True, memory=memory)
        tail = 1 - partial / sync_gen if layout.endswith("async") else 0.0
        return step_time(layout, G=sync_gen * gen, L=learner_s(m, learn) * learn, tail=tail, devices=gen,
                         gen=gen, learn=learn, **fixed)

    rows = [{"layout": layout, "gen_gpus": args.gpus, "learn_gpus": args.gpus,
             "step_s": round(seconds(layout, args.gpus, args.gpus), 1)}
            for layout in ("colocated-sync", "colocated-async")]
    for gen in range(1, args.gpus):
        for layout in ("split-sync", "split-async"):
            rows.append({"layout": layout, "gen_gpus": gen, "learn_gpus": args.gpus - gen,
                         "step_s": round(seconds(layout, gen, args.gpus - gen), 1)})
    best = min(rows, key=lambda r: r["step_s"])
    return {"model": args.project, "config": m["config"], "gpus": args.gpus,
            "generation_s_all_gpus": round(generation_s(m, args.gpus, False, m["colocated_memory"]), 1),
            "learner_s_all_gpus": round(learner_s(m, args.gpus), 1),
            "fixed": {k: round(v, 2) for k, v in fixed.items()},
            "rows": rows, "best": best}


# ----------------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny-cpu.yaml")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the figures")
    p.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run (repeatable)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "layouts")
    p.add_argument("--report-only", action="store_true", help="check the runs already there, train nothing")
    p.add_argument("--project", choices=sorted(MODELS), help="project H100 layouts of this model's config instead")
    p.add_argument("--gpus", type=int, default=8, help="--project: the GPUs to lay out")
    p.add_argument("--transfer-gb-s", type=float, default=10.0,
                   help="--project: the learner's weights to the servers, GB/s (NCCL, across nodes: ~10)")
    p.add_argument("--score-s", type=float, default=1.0, help="--project: scoring seconds per step")
    p.add_argument("--other-s", type=float, default=1.0, help="--project: other host seconds per step")
    return p


def main() -> None:
    args = parser().parse_args()
    if args.project:
        result = project(args)
        print(f"{result['model']} ({result['config']}) on {result['gpus']} H100s: synchronous generation "
              f"{result['generation_s_all_gpus']} s, learner {result['learner_s_all_gpus']} s on all of them; "
              f"{result['fixed']}")
        print("| layout | generation GPUs | learner GPUs | step s |\n|---|---|---|---|")
        for r in result["rows"]:
            print(f"| {r['layout']} | {r['gen_gpus']} | {r['learn_gpus']} | {r['step_s']} |")
        print(f"best: {result['best']}")
        return
    if not args.report_only:
        for layout in args.layouts:
            print(f"{layout} ...", flush=True)
            measure(layout, args.config, args.steps, args.out, args.overrides)
    result = check(args.out, args.warmup)
    (args.out / "layouts.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"terms from colocated-sync (s): {result['terms']}; transfer {result['transfer_gb_s']} GB/s")
    print("| layout | measured step s | predicted s | error | rollout wait s | learner s | score s | sync s "
          "| other s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in result["layouts"]:
        print(f"| {r['layout']} | {r['measured_s']:.2f} | {r['predicted_s']:.2f} | {r['error']:+.0%} | "
              f"{r['rollout_s']:.2f} | {r['learn_s']:.2f} | {r['score_s']:.2f} | {r['sync_s']:.2f} | "
              f"{r['other_s']:.2f} |")
    print(f"wrote {args.out / 'layouts.json'}")


if __name__ == "__main__":
    main()
