"""Collect the benchmark results of `make bench` into bench/results.json and a readable table, bench/results.md.

    .venv/bin/python scripts/bench/bench_report.py    # after the bench_*.py scripts (make bench runs it last)

Reads what each benchmark wrote (bench/verifier.json, rollout.json, step.json, step-2proc.json, profile.json,
trl.json, step-ustat.json, step-async.json, dispatch.json); a missing file is reported as not run, never filled in.
Prints the table and checks the benchmark goals: our step time <= 0.5x TRL's, learner MFU >= 45% of
the measured matmul peak, the update >= 0.95x a plain step's rate timed in turns with it (step.json); an update's
operations <= 1.15x a plain training step's and its host syncs constant per optimizer step (dispatch.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The producers of dispatch.json and step.json word their own figures (found beside this script also when it is
# loaded by path, as tests/test_docs.py does, rather than run).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dispatch import report_text as dispatch_text  # noqa: E402
from plain_yardstick import yardstick_text  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "bench"
PARTS = {"verifier": "verifier.json", "rollout": "rollout.json", "step": "step.json", "step_2proc": "step-2proc.json",
         "profile": "profile.json", "trl": "trl.json", "step_ustat": "step-ustat.json",
         "step_async": "step-async.json", "dispatch": "dispatch.json"}
GOAL_STEP_RATIO = 0.5  # ours / TRL
GOAL_MFU = 0.45
GOAL_USTAT_OVERHEAD = 0.10  # the U-statistic monitor's share of the step (docs/u-statistics.md)
GOAL_UPDATE_VS_PLAIN = 0.95  # the update's rate over a plain PyTorch step's, timed in turns (issue #61)

# ----------------------------------------------------------------------------------------------------
# A projection on paper for Qwen2.5-7B on 8 H100s: published figures, stated assumptions, nothing measured there.

H100 = {"bf16_dense_flops": 989e12, "hbm_bytes_per_s": 3.35e12, "nvlink_bytes_per_s": 450e9}  # SXM5, per GPU
QWEN25_7B = {"params": 7.62e9, "layers": 28, "kv_heads": 4, "head_dim": 128}  # from its config.json
PROJECTION_WORKLOAD = {"gpus": 8, "prompts_per_step": 128, "group_size": 8, "prompt_tokens": 256,
                       "max_completion_tokens": 1024, "mean_completion_tokens": 512}
DECODE_BANDWIDTH_EFFICIENCY = 0.6  # assumed share of HBM bandwidth a vLLM decode step reaches
# Assumed learner MFU on the H100s. The MFU measured here on a CPU does not carry over: it is set by how fast the
# matmul units are against everything else (9% of a 2.6 TFLOP/s AMX bf16 peak, 45% of a 0.15 TFLOP/s fp32 one, the
# same code on 2-core machines).
GPU_LEARNER_MFU = 0.40


def h100_projection(mfu: float = GPU_LEARNER_MFU) -> dict:
    """Seconds per phase of one GRPO step of Qwen2.5-7B on 8 H100s (ZeRO-3 learner, one colocated vLLM per GPU).

    Rollout: decoding is memory-bound, so each decoding step reads the bf16 weights once plus the key/value cache
    of every running sequence; completion lengths are taken as uniform on [0, max] (mean max / 2), so the batch
    thins out linearly. Prefill (the prompt once per group, prefix-cached) is compute-bound at peak.
    Learner: 6 * params * tokens for the update plus 2 * params * tokens for the reference model's K3 forward,
    prompts counted once per group (learner.share_prompts), at an assumed MFU (GPU_LEARNER_MFU). Sync: each GPU
    gathers the 7/8 of the bf16 weights it does not hold.
    """
    w, m = PROJECTION_WORKLOAD, QWEN25_7B
    weight_bytes = 2 * m["params"]
    kv_bytes_per_token = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2  # K and V, bf16
    seqs_per_gpu = w["prompts_per_step"] * w["group_size"] // w["gpus"]
    prompts_per_gpu = w["prompts_per_step"] // w["gpus"]
    steps = w["max_completion_tokens"]
    decode_s = 0.0
    for t in range(steps):
        running = seqs_per_gpu * (1 - t / steps)
        cache_bytes = running * (w["prompt_tokens"] + t) * kv_bytes_per_token
        memory_s = (weight_bytes + cache_bytes) / (H100["hbm_bytes_per_s"] * DECODE_BANDWIDTH_EFFICIENCY)
        compute_s = 2 * m["params"] * running / H100["bf16_dense_flops"]  # below memory_s at these batch sizes
        decode_s += max(memory_s, compute_s)
    prefill_s = 2 * m["params"] * prompts_per_gpu * w["prompt_tokens"] / H100["bf16_dense_flops"]
    completion_tokens = seqs_per_gpu * w["mean_completion_tokens"]
    learner_tokens = completion_tokens + prompts_per_gpu * w["prompt_tokens"]
    update_s = 6 * m["params"] * learner_tokens / (H100["bf16_dense_flops"] * mfu)
    ref_s = 2 * m["params"] * learner_tokens / (H100["bf16_dense_flops"] * mfu)
    sync_s = weight_bytes * (w["gpus"] - 1) / w["gpus"] / H100["nvlink_bytes_per_s"]
    phases = {"rollout_s": decode_s + prefill_s, "ref_logprobs_s": ref_s, "update_s": update_s, "sync_s": sync_s}
    step_s = sum(phases.values())
    return {"workload": w, "mfu_used": mfu,
            "decode_bandwidth_efficiency": DECODE_BANDWIDTH_EFFICIENCY, "phases_s": phases, "step_s": step_s,
            "completion_tokens_per_s_per_gpu": completion_tokens / step_s}


def projection_lines(projection: dict) -> list[str]:
    w, phases = projection["workload"], projection["phases_s"]
    return ["## Projection (on paper, not measured): Qwen2.5-7B on 8 x H100", "",
            f"{w['prompts_per_step']} prompts x G={w['group_size']} per step, prompts of {w['prompt_tokens']} tokens, "
            f"completions up to {w['max_completion_tokens']} (mean {w['mean_completion_tokens']}), ZeRO-3 over "
            f"{w['gpus']} GPUs, one colocated vLLM per GPU, K3 KL on. Published figures: 989 TFLOP/s bf16 dense, "
            f"3.35 TB/s HBM, 450 GB/s NVLink per direction. Assumed: decoding at "
            f"{100 * projection['decode_bandwidth_efficiency']:.0f}% of HBM bandwidth (memory-bound), learner at "
            f"{100 * projection['mfu_used']:.0f}% MFU (assumed: the MFU measured on a CPU is set by its matmul "
            f"units against everything else, and does not carry over to a GPU).", "",
            _row("phase", "projected s per step"), _row("---", "---"),
            *[_row(k.removesuffix("_s"), f"{v:.1f}") for k, v in phases.items()],
            _row("**step**", f"**{projection['step_s']:.1f}**"), "",
            f"Projected: **{projection['completion_tokens_per_s_per_gpu']:.0f} completion tokens/s per GPU** "
            f"(a PROJECTION from the formulas in scripts/bench/bench_report.py, not a measurement).", ""]


def load_parts(folder: Path) -> dict[str, dict]:
    return {name: json.loads((folder / file).read_text()) for name, file in PARTS.items() if (folder / file).exists()}


def _row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def update_vs_plain_goal(paired: dict) -> str:
    """The goal line of step.json's update against the plain step timed in turns (plain_yardstick.paired_yardstick)."""
    ratio = paired["update_vs_plain_step_median"]
    return (f"Update vs plain step, timed in turns: **{ratio:.2f}x** (goal >= {GOAL_UPDATE_VS_PLAIN}x: "
            f"{'met' if ratio >= GOAL_UPDATE_VS_PLAIN else 'not met'}).")


def report_lines(parts: dict[str, dict]) -> list[str]:
    lines = ["# grpo_train benchmarks", ""]
    missing = [PARTS[name] for name in PARTS if name not in parts]
    if missing:
        lines += [f"Not run (no result file): {', '.join(missing)}", ""]
    if "trl" in parts:
        t = parts["trl"]
        ours, trl = t["ours"]["median_step_s"], t["trl"]["median_step_s"]
        lines += ["## Step time against TRL's GRPOTrainer", "", t["setting"], "",
                  _row("", "ours", f"TRL {t['trl']['trl_version']} ({', '.join(t['trl']['generation'])})"),
                  _row("---", "---", "---"),
                  _row("median step s", f"{ours:.1f}", f"{trl:.1f}"),
                  _row("measured steps", len(t["ours"]["step_s"]), len(t["trl"]["step_s"])),
                  *[_row(f"{phase.removesuffix('_s')} s", f"{t['ours']['breakdown_median_s'][phase]:.2f}",
                         f"{t['trl']['breakdown_median_s'][phase]:.2f}")
                    for phase in ("rollout_s", "reward_s", "sync_s")],
                  "",
                  f"ours / TRL step time: **{ours / trl:.2f}x** (goal <= {GOAL_STEP_RATIO}x: "
                  f"{'met' if ours / trl <= GOAL_STEP_RATIO else 'not met'})", ""]
        for attempt in t.get("trl_generation", {}).get("failed_attempts", []):
            lines += [f"TRL generation `{attempt['generation']}` failed: {attempt['error'][:200]}", ""]
    if "step" in parts:
        s = parts["step"]
        lines += ["## Our step, one process", "",
                  f"{s['setting']['model']}, {s['setting']['prompts_per_step']} prompts x "
                  f"G={s['setting']['group_size']}, {s['precision']}, kl_coef {s['kl_coef']}, "
                  f"{len(s['ours']['step_s'])} steps after "
                  f"{s['warmup']} warm-up", "", _row("phase", "median s", "share"), _row("---", "---", "---")]
        for phase, seconds in s["ours"]["breakdown_median_s"].items():
            lines.append(_row(phase.removesuffix("_s"), f"{seconds:.2f}",
                              f"{100 * s['ours']['breakdown_share_of_step'][phase]:.0f}%"))
        lines += [_row("**step**", f"**{s['ours']['median_step_s']:.2f}**", ""), ""]
        if "mfu" in s:
            m = s["mfu"]
            lines += [f"Learner MFU: **{100 * m['mfu_median']:.1f}%** of the measured {s['precision']} matmul peak "
                      f"({s['peak_gflops'][s['precision']]:.0f} GFLOP/s; goal >= {100 * GOAL_MFU:.0f}%: "
                      f"{'met' if m['mfu_median'] >= GOAL_MFU else 'not met'}); "
                      f"{100 * m['mfu_head_on_completions_median']:.1f}% counting the output head on completion "
                      f"tokens only. Useful tokens/step (median): "
                      f"{sorted(m['useful_tokens_per_step'])[len(m['useful_tokens_per_step']) // 2]}, prompts "
                      f"counted {m['prompt_tokens_counted']}.", ""]
            if "yardstick" in m or "plain_pytorch_gflops" in m:  # the latter: step.json from before the step yardstick
                lines += [yardstick_text(m), ""]
            if "paired" in m.get("yardstick", {}):
                lines += [update_vs_plain_goal(m["yardstick"]["paired"]), ""]
    if "step" in parts and "step_2proc" in parts:
        lines += ["## Scaling on this machine (torchrun)", ""]
        if parts["step"]["setting"] != parts["step_2proc"]["setting"]:
            lines += ["Not comparable: step.json and step-2proc.json ran different settings.", ""]
        else:
            one, two = parts["step"]["ours"]["median_step_s"], parts["step_2proc"]["ours"]["median_step_s"]
            lines += [_row("processes", "median step s", "speed-up"), _row("---", "---", "---"),
                      _row(1, f"{one:.2f}", "1.00"), _row(2, f"{two:.2f}", f"{one / two:.2f}"), ""]
    if "step" in parts and "step_ustat" in parts:
        lines += ustat_lines(parts["step"], parts["step_ustat"])
    if "step" in parts and "step_async" in parts:
        lines += async_lines(parts["step"], parts["step_async"])
    if "dispatch" in parts:
        lines += ["## Operations and host syncs of one update (dispatch counts, Qwen2.5-0.5B widths)", "",
                  *dispatch_text(parts["dispatch"]), ""]
    if "profile" in parts:
        p = parts["profile"]["profile"]
        lines += ["## Profile of our step (py-spy)", "",
                  "Share of the loop's samples: "
                  + ", ".join(f"{k} {100 * v:.0f}%" for k, v in p["phase_share"].items()),
                  ""]
        for phase, functions in p["top_functions"].items():
            if p["phase_share"][phase] >= 0.05:
                shown = "; ".join(f"`{name}` {100 * share:.0f}%" for name, share in functions[:4])
                lines.append(f"- {phase}: {shown}")
        lines.append("")
    if "rollout" in parts:
        r = parts["rollout"]
        lines += ["## Rollout engines", "",
                  f"{r['prompts']} prompts x G={r['group_size']}, <= {r['max_tokens']} tokens, "
                  f"{r.get('dtype', 'float32')}: "
                  f"vLLM {r['vllm_tokens_per_s']} tokens/s, transformers generate {r['hf_tokens_per_s']} tokens/s "
                  f"({r['vllm_over_hf']}x); weight sync {r['weight_sync_s']:.2f} s "
                  f"({100 * r['weight_sync_fraction_of_rollout_batch']:.1f}% of the rollout batch).", ""]
    lines += projection_lines(h100_projection())
    if "verifier" in parts:
        v = parts["verifier"]
        lines += ["## Verifier", "",
                  f"{v['cases']['total']} labelled cases: accuracy {v['ours']['accuracy']:.4f} "
                  f"(Math-Verify alone {v['math_verify']['accuracy']:.4f}); GSM8K "
                  f"{v['ours']['gsm8k_items_per_s']:.0f} items/s, MATH {v['ours']['math_items_per_s']:.1f} items/s.",
                  ""]
    return lines


def async_lines(plain: dict, asynchronous: dict) -> list[str]:
    """The asynchronous step (rollout.max_staleness, partial rollouts) beside the synchronous one (step.json,
    step-async.json): mean step time and rollout time per trained token, over the measured steps."""
    k = asynchronous["setting"]["max_staleness"]
    lines = [f"## Asynchronous step (rollout.max_staleness {k}, partial rollouts)", ""]
    if {**plain["setting"], "max_staleness": k} != asynchronous["setting"]:
        return lines + ["Not comparable: step.json and step-async.json ran different settings.", ""]
    a, b = plain["ours"], asynchronous["ours"]
    return lines + [
        _row("", "mean step s", "rollout s / 1k trained tokens"), _row("---", "---", "---"),
        _row("synchronous", f"{a['mean_step_s']:.2f}", f"{a['rollout_s_per_1k_trained_tokens']:.3f}"),
        _row(f"k = {k}", f"{b['mean_step_s']:.2f}", f"{b['rollout_s_per_1k_trained_tokens']:.3f}"),
        _row("ratio", f"{b['mean_step_s'] / a['mean_step_s']:.2f}",
             f"{b['rollout_s_per_1k_trained_tokens'] / a['rollout_s_per_1k_trained_tokens']:.2f}"), "",
        "Over the measured steps of each run; the two runs train on the same prompts but their weights, hence "
        "lengths, part after the first update.", ""]


def ustat_lines(plain: dict, monitored: dict) -> list[str]:
    """The U-statistic monitor's cost: the same step without and with it (step.json, step-ustat.json)."""
    lines = ["## The U-statistic monitor's cost", ""]
    if {**plain["setting"], "ustat": True} != monitored["setting"]:
        return lines + ["Not comparable: step.json and step-ustat.json ran different settings.", ""]
    a, b = plain["ours"], monitored["ours"]
    overhead = b["median_step_s"] / a["median_step_s"] - 1
    return lines + [
        _row("", "update s", "step s"), _row("---", "---", "---"),
        _row("without", f"{a['breakdown_median_s']['update_s']:.2f}", f"{a['median_step_s']:.2f}"),
        _row("with ustat", f"{b['breakdown_median_s']['update_s']:.2f}", f"{b['median_step_s']:.2f}"), "",
        f"Median step {100 * overhead:+.1f}% with the monitor (its estimate alone "
        f"{b['breakdown_median_s'].get('ustat_s', float('nan')):.3f} s/step; goal <= {100 * GOAL_USTAT_OVERHEAD:.0f}%: "
        f"{'met' if overhead <= GOAL_USTAT_OVERHEAD else 'not met'}). Step times vary with the sampled lengths: "
        "the two runs draw the same rollouts only while their weights agree.", ""]


def parser() -> argparse.ArgumentParser:
    """The command line: no options (also read by tests/test_docs.py to check the commands in the docs)."""
    return argparse.ArgumentParser(description=__doc__.split("\n")[0])


def main() -> None:
    parser().parse_args()
    parts = load_parts(BENCH)
    lines = report_lines(parts)
    results = {**parts, "h100_projection": h100_projection()}
    (BENCH / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (BENCH / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {BENCH / 'results.json'} and {BENCH / 'results.md'}")


if __name__ == "__main__":
    main()
