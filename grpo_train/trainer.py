"""The GRPO training loop, read top to bottom in `train`.

    grpo-train --config configs/tiny-cpu.yaml                                  # one process
    torchrun --nproc_per_node 2 -m grpo_train --config configs/tiny-cpu.yaml   # two ranks (gloo on CPU)

Each rank holds a colocated vLLM engine and a DeepSpeed learner. Per step:
data -> rollout -> reward -> advantage -> old/ref logprobs -> update -> weight sync -> log -> eval -> checkpoint.
Every rank rolls out its own share of the step's prompts (with rollout.tensor_parallel_size > 1 the ranks of one
vLLM engine generate their prompts together and split the completions); a group's advantages need only its own
G rewards, so ranks talk only inside DeepSpeed (gradients), inside vLLM and to average the logged metrics.

Deviations from DeepSeekMath's GRPO, all configurable: the default loss aggregation is `token_mean` (DAPO)
rather than the per-sequence mean; the old-policy log-probs are not recomputed when the update is on-policy
(mu = 1 and one mini-batch: the ratio is then exactly 1, as in GRPO's own default); the KL term is off by
default (kl_coef = 0), as in DAPO and Dr. GRPO.
"""

from __future__ import annotations

import functools
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from transformers import AutoTokenizer

from grpo_train import algorithms, checkpoint, dynamic_sampling
from grpo_train.config import Config, ConfigError, RewardConfig, save_config, to_dict, ustat_monitor_on
from grpo_train.data import PromptSampler, load_problems
from grpo_train.evaluation import run_eval, verify
from grpo_train.learner import Learner, all_reduce_max, global_means, init_distributed, make_update_batch
from grpo_train.memory import PhasePeaks
from grpo_train.metrics import METRICS_FILE, MetricsLogger
from grpo_train.models import check_context_length, resolve_model
from grpo_train.plot import plot_run
from grpo_train.prompts import PromptRenderer
from grpo_train.rewards.functions import reward_functions
from grpo_train.rewards.pool import VerifierPool, function_errors, function_failures, function_sums, function_values
from grpo_train.rollout import EngineGroup, SamplingSpec, hf_weights, make_engine, rollout_seed
from grpo_train.ustat.monitor import UstatMonitor, group_sketches

PROMPTS_SHOWN = 3  # prompts.txt: the first problems' prompts, as the model sees them


class RunDirError(RuntimeError):
    """The run folder cannot be used (not writable, or holds a run that would be lost)."""


class RewardFunctionError(ConfigError):
    """A reward function failed on more than reward.max_failure_fraction of its calls in a step (a ConfigError: the
    cli prints it as one line, like the other mistakes in what the config names)."""

    kind = "reward function error"  # the cli's prefix of the line


def run_contents(run_dir: Path) -> list[str]:
    """What a fresh start in `run_dir` would lose: metric rows and checkpoints (a config.yaml alone, left by a run
    that failed at start, is not a run)."""
    held = []
    metrics = run_dir / METRICS_FILE
    rows = sum(1 for line in metrics.open() if line.strip()) if metrics.is_file() else 0
    if rows:
        held.append(f"{rows} row{'s' if rows > 1 else ''} of {METRICS_FILE}")
    names = [p.name for p in checkpoint.list_checkpoints(run_dir)]
    if names:
        held.append(f"checkpoints {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}")
    return held


def move_aside(run_dir: Path) -> Path:
    """Rename `run_dir` to `<run_dir>.replaced-<time>[-k]` (never deleted) and create it again, empty."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}")
    k = 1
    while target.exists():
        k += 1
        target = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}-{k}")
    run_dir.rename(target)
    run_dir.mkdir()
    return target


def prepare_run_dir(cfg: Config) -> tuple[Path, str | None]:
    """Rank 0: create the run folder, refusing one that holds a run unless the run continues it (`run.resume`) or
    replaces it (`run.overwrite`: the old run is moved aside, not deleted). Returns the folder and a note for the
    log. The resolved config is written later, once the run has passed its start-up checks (`save_run_config`)."""
    if not cfg.run.output_dir:
        raise RunDirError("run.output_dir: empty (load configs with load_config, which names the folder)")
    run_dir = Path(cfg.run.output_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise RunDirError(f"run.output_dir: {run_dir} is not writable ({err.strerror})") from None
    held = run_contents(run_dir)
    if cfg.run.resume == "never" and held and not cfg.run.overwrite:
        raise RunDirError(f"run.output_dir: {run_dir} holds a run ({'; '.join(held)}); set run.resume=auto to "
                          "continue it, run.overwrite=true to move it aside and start over, or choose another "
                          "run.output_dir")
    nothing_to_resume = cfg.run.resume == "auto" and checkpoint.find_resumable(run_dir, warn=False) is None
    notes = []
    if nothing_to_resume:
        notes.append(f"run.resume=auto: no complete checkpoint in {run_dir}, starting at step 0")
    if held and (cfg.run.resume == "never" or nothing_to_resume):
        notes.append(f"moved the earlier run in {run_dir} ({'; '.join(held)}) to {move_aside(run_dir)}")
    return run_dir, "; ".join(notes) or None


def save_run_config(cfg: Config, run_dir: Path, rank: int) -> None:
    """The resolved config (every field) into the run folder, once start-up has succeeded."""
    if rank == 0:
        save_config(cfg, run_dir / "config.yaml")


def config_changes(old: dict, new: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for every leaf that differs, except where the run is resumed from and written to."""
    changes = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes += config_changes(a, b, path + ".")
        elif a != b and path not in ("run.resume", "run.output_dir", "run.overwrite"):
            changes.append(f"{path}: {a!r} -> {b!r}")
    return changes


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def sync_logprob_gap(engine, learner: Learner, prompt_ids: list[int], pad_id: int) -> float:
    """Max |vLLM logprob - learner logprob| over a short greedy completion, right after a weight sync."""
    greedy = engine.generate([prompt_ids], SamplingSpec(n=1, temperature=0.0, max_tokens=8, seed=0))[0]
    batch = make_update_batch([greedy.prompt_token_ids], [greedy.completion_token_ids], [greedy.logprobs],
                              torch.zeros(1), pad_id=pad_id)
    learner_logp = learner.logprobs(batch, temperature=1.0)  # greedy logprobs are the raw log-softmax
    return float(((learner_logp - batch.sampler_logp) * batch.completion_mask).abs().max())


def trainer_state(step: int, sampler: PromptSampler, learner: Learner, cfg: Config,
                  monitor: UstatMonitor | None = None) -> dict:
    # The monitor's window and G: a resumed run then makes the same group_size auto choices.
    return {"step": step, "sampler": sampler.state_dict(), "skipped_nonfinite": learner.skipped_nonfinite,
            "config": to_dict(cfg), **({"ustat": monitor.state_dict()} if monitor is not None else {})}


def evaluate(engine, tokenizer, renderer, pool, problems, cfg: Config,
             group: EngineGroup) -> tuple[dict[str, float], dict[str, str]]:
    """Greedy accuracy on the held-out problems (none with data.kind none: no verifier scores them): each engine
    decodes its part, each rank scores its own share; the reward functions' means; and each function's first
    failure on this rank's share."""
    items = group.share(run_eval(engine, tokenizer, renderer, pool, group.prompts(problems), RewardConfig(),
                                 cfg.rollout.max_tokens))
    sums = {
        **function_sums([i.functions for i in items], pool.functions, "eval/fn/"),
        "eval/truncated": (sum(i.truncated for i in items), len(items)),
        "eval/completion_len": (sum(i.completion_tokens for i in items), len(items)),
    }
    if cfg.data.kind != "none":  # the verifier's judgement; with kind none only the reward functions score
        sums["eval/accuracy"] = (sum(i.greedy_correct for i in items), len(items))
        sums["eval/no_answer"] = (sum(i.greedy_status == "no_answer" for i in items), len(items))
        # Breakdowns (synthetic category, MATH level): the keys come from the whole set so every rank has them all.
        for key in ("category", "level"):
            for value in sorted({str(p.meta[key]) for p in problems if key in p.meta}):
                mine = [i.greedy_correct for i in items if str(i.problem.meta.get(key)) == value]
                sums[f"eval/{key}/{value}"] = (sum(mine), len(mine))
    return global_means(sums), function_errors([i.functions for i in items], pool.functions)


def report_first_failures(logger: MetricsLogger, failures: dict[str, str], reported: set[str], prefix: str) -> None:
    """Print the first error or timeout of each reward function in training (prefix reward/fn/) and in eval
    (eval/fn/); later ones are counted in the metrics only."""
    for name, failure in failures.items():
        if f"{prefix}{name}" not in reported:
            reported.add(f"{prefix}{name}")
            status = failure.partition(":")[0]  # error or timeout
            logger.print(f"warning: reward function {name}: {failure} (scored 0; counted in {prefix}{name}/{status}; "
                         f"the first failure of each function is printed)")


def check_failures(fractions: dict[str, float], failures: dict[str, str], limit: float, step: int) -> None:
    """RewardFunctionError when a reward function failed on more than `limit` of its calls in the step:
    `fractions` {name: failed fraction, over all ranks}, `failures` {name: this rank's first failure}."""
    over = {name: fraction for name, fraction in fractions.items() if fraction > limit}
    if not over:
        return
    name, *others = over
    also = f"; also over it: {', '.join(f'{n} ({over[n]:.1%})' for n in others)}" if others else ""
    first = failures.get(name, "none on this rank (see the other ranks' lines)")
    raise RewardFunctionError(
        f"reward function {name} failed on {over[name]:.1%} of its calls at step {step}, over "
        f"reward.max_failure_fraction {limit:g}{also}; its first failure: {first}. Fix the function, or raise "
        "reward.max_failure_fraction (1 = never stop)")


def train(cfg: Config) -> Path:
    # ------------------------------------------------------------------------------------------------
    # Set-up: processes, run folder, seeds, model
    rank, world = init_distributed()
    a = cfg.algorithm
    if a.prompts_per_step % world:
        raise ConfigError(f"algorithm.prompts_per_step: {a.prompts_per_step} must be a multiple of the "
                          f"{world} ranks (each rank rolls out an equal share)")
    group = EngineGroup.of(rank, world, cfg.rollout.tensor_parallel_size)  # the ranks sharing one vLLM engine
    run_dir, run_dir_note = prepare_run_dir(cfg) if rank == 0 else (Path(cfg.run.output_dir), None)
    dist.barrier()  # the other ranks use the folder once rank 0 has claimed it
    seed_everything(cfg.run.seed + rank)
    logger = MetricsLogger(cfg, run_dir, rank)
    if run_dir_note:
        logger.print(run_dir_note)
    model_path = resolve_model(cfg.model.name_or_path)
    check_context_length(cfg.model.max_model_len, cfg.model.name_or_path, model_path)

    # ------------------------------------------------------------------------------------------------
    # Data: training problems (same shuffled order on every rank), held-out problems, prompt renderer
    train_problems = load_problems(cfg.data, "train")
    eval_problems = load_problems(cfg.data, "test", n=cfg.run.eval_size) if cfg.run.eval_size else []
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = PromptRenderer(tokenizer, cfg.data)
    sampler = PromptSampler(train_problems, seed=cfg.run.seed)
    max_prompt_tokens = cfg.model.max_model_len - cfg.rollout.max_tokens
    # The first prompts as the model sees them, rendered now (a template error stops the run before the models
    # load) and written to prompts.txt once start-up has passed.
    first_prompts = [(p.uid, renderer.text(p), len(renderer.token_ids(p))) for p in train_problems[:PROMPTS_SHOWN]]

    # ------------------------------------------------------------------------------------------------
    # Learner (DeepSpeed), rollout engine (vLLM, colocated), verifier pool
    optimizer_steps = cfg.run.steps * a.num_iterations * a.mini_batches
    learner = Learner(cfg, model_path, optimizer_steps)
    engine = make_engine(cfg, seed=cfg.run.seed + group.index)
    verifier = VerifierPool(num_workers=cfg.reward.num_workers, timeout_s=cfg.reward.timeout_s,
                            functions=reward_functions(cfg.reward))
    reported_failures: set[str] = set()  # "reward/fn/<name>", "eval/fn/<name>": first failure printed
    save_hf = checkpoint.hf_folder_writer(learner.base_config, model_path)
    needs_old_logp = a.num_iterations > 1 or a.mini_batches > 1
    save_run_config(cfg, run_dir, rank)  # start-up passed: from here on the folder holds this run
    logger.prompts(first_prompts, f"data.template {cfg.data.template}" + (
        f", data.template_file {cfg.data.template_file}" if cfg.data.template_file else ""))
    # The U-statistic monitor (ustat/ metrics) and group_size auto's choices; it holds the G in force.
    monitor = UstatMonitor(cfg, world) if ustat_monitor_on(cfg) else None
    peaks = PhasePeaks()  # GPU: the allocator's peak in each phase (memory/ metrics, checked against memory.py)

    def extra_round(step: int, group_size: int, prompts: int, k: int, needed: bool) -> dynamic_sampling.Round | None:
        """Dynamic sampling's extra round k of a step: steps 1-3 again (every rank advances the prompt sampler; a
        rank that needs no more groups generates nothing; config validation keeps dapo to one rank per engine)."""
        more = group.share(group.prompts(sampler.next_batch(prompts)))
        if not needed:
            return None
        ids = [renderer.check_length(p, max_prompt_tokens) for p in more]
        spec = SamplingSpec.from_config(cfg.rollout, n=group_size,
                                        seed=rollout_seed(cfg.run.seed, step, group.index, k))
        outs = engine.generate(ids, spec)
        texts, scores = verify(verifier, tokenizer, outs, more, cfg.reward)
        return dynamic_sampling.Round(more, outs, texts, scores, torch.tensor([s.reward for s in scores]))

    # ------------------------------------------------------------------------------------------------
    # Resume: learner state, data position, RNG; then the engine gets the resumed weights
    start_step = 0
    resume_from = checkpoint.resolve_resume(run_dir, cfg.run.resume)
    if resume_from is not None:
        state = checkpoint.load_checkpoint(resume_from, learner.engine)
        start_step = state["step"]
        try:
            sampler.load_state_dict(state["sampler"])
        except ValueError as err:
            raise checkpoint.CheckpointError(f"{resume_from}: {err}") from None
        learner.skipped_nonfinite = state["skipped_nonfinite"]
        if monitor is not None and "ustat" in state:
            monitor.load_state_dict(state["ustat"])
        engine.load_weights(hf_weights(learner.module))
        changed = config_changes(state["config"], to_dict(cfg))
        if changed:
            logger.print(f"warning: the config differs from the checkpoint's: {'; '.join(changed)}")
        logger.print(f"resumed from {resume_from} at step {start_step}")
    # Rows after the resumed step (all rows, on a fresh start) are from an attempt that was cut short.
    logger.truncate_after(start_step if resume_from is not None else -1)
    if resume_from is None and eval_problems:
        before, eval_failures = evaluate(engine, tokenizer, renderer, verifier, eval_problems, cfg, group)
        report_first_failures(logger, eval_failures, reported_failures, "eval/fn/")
        logger.log(0, before)
        logger.print(f"eval before training: {logger.eval_summary(before)} on {len(eval_problems)}")

    for step in range(start_step + 1, cfg.run.steps + 1):
        t_step = time.perf_counter()
        peaks.start()
        # --------------------------------------------------------------------------------------------
        # 0. Group size: with group_size auto, every K steps the G of smallest predicted gradient MSE
        group_size, prompts_per_step = a.group_size, a.prompts_per_step
        if monitor is not None:
            reason = monitor.choose_group_size(step)
            if reason is not None:
                logger.print(f"group_size auto: {reason}")
            group_size, prompts_per_step = monitor.group_size, monitor.prompts_per_step

        # --------------------------------------------------------------------------------------------
        # 1. Prompts: the step's batch; this rank's engine generates its part, the rank trains on a share of that
        group_problems = group.prompts(sampler.next_batch(prompts_per_step))
        problems = group.share(group_problems)
        prompt_ids = [renderer.check_length(p, max_prompt_tokens) for p in group_problems]

        # --------------------------------------------------------------------------------------------
        # 2. Rollout: G completions per prompt, with the sampler's log-probs
        t0 = time.perf_counter()
        # The seed depends only on (run seed, step, engine): a resumed run regenerates the same rollouts, and the
        # ranks of a tensor-parallel engine submit identical requests.
        spec = SamplingSpec.from_config(cfg.rollout, n=group_size,
                                        seed=rollout_seed(cfg.run.seed, step, group.index))
        rollouts = group.share_rollouts(engine.generate(prompt_ids, spec))  # prompt-major: G consecutive per prompt
        t_rollout = time.perf_counter() - t0

        # --------------------------------------------------------------------------------------------
        # 3. Reward: verify every completion against its problem's gold answer; add the reward functions
        t0 = time.perf_counter()
        texts, scores = verify(verifier, tokenizer, rollouts, problems, cfg.reward)
        rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)  # [n_prompts * G]
        failures = function_errors([s.functions for s in scores], verifier.functions)
        if verifier.functions and cfg.reward.max_failure_fraction < 1.0:  # stop before training on broken rewards
            check_failures(global_means(function_failures([s.functions for s in scores], verifier.functions)),
                           failures, cfg.reward.max_failure_fraction, step)
        report_first_failures(logger, failures, reported_failures, "reward/fn/")
        t_reward = time.perf_counter() - t0

        # --------------------------------------------------------------------------------------------
        # 3b. Dynamic sampling: train on the groups with mixed rewards; dapo draws more prompts for them
        step_rewards, group_starts = rewards.view(-1, group_size), [g * group_size for g in range(len(problems))]
        sampled = None
        if a.dynamic_sampling != "off":
            t0 = time.perf_counter()
            sampled = dynamic_sampling.select(
                a.dynamic_sampling, dynamic_sampling.Round(problems, rollouts, texts, scores, rewards), group_size,
                prompts_per_step // world, a.dynamic_sampling_max_rounds,
                functools.partial(extra_round, step, group_size, prompts_per_step),
                lambda short: all_reduce_max(float(short)) > 0)
            group_starts = sampled.first_round_starts
            # From here on the step is the kept groups; the logged rewards and lengths cover every drawn rollout.
            problems, rollouts, texts, scores = (sampled.kept.problems, sampled.kept.rollouts, sampled.kept.texts,
                                                 sampled.kept.scores)
            rewards = sampled.kept.rewards
            t_rollout += time.perf_counter() - t0
        peaks.mark("rollout")  # generation, dynamic sampling's extra rounds included

        # --------------------------------------------------------------------------------------------
        # 4. Advantages: within each group of G (contiguous)
        advantages = algorithms.group_advantages(rewards, group_size, a.advantage, a.adv_eps)
        zero_var = float(algorithms.zero_variance_fraction(step_rewards.flatten(), group_size))

        # --------------------------------------------------------------------------------------------
        # 5. Old and reference log-probs (no gradient), with vLLM asleep
        t0 = time.perf_counter()
        engine.sleep()  # GPU sleep mode: free vLLM's memory for the learner (load_weights wakes it; CPU: no-op)
        batch = make_update_batch([r.prompt_token_ids for r in rollouts], [r.completion_token_ids for r in rollouts],
                                  [r.logprobs for r in rollouts], advantages, pad_id=tokenizer.pad_token_id,
                                  truncated=[r.truncated for r in rollouts])
        if sampled is not None and sampled.placeholder:
            batch.completion_mask.zero_()  # no mixed group on this rank: nothing to learn, nothing to count
        if needs_old_logp:
            batch.old_logp = learner.logprobs(batch)
        if a.kl_coef > 0:
            batch.ref_logp = learner.logprobs(batch, reference=True)
        t_logprobs = time.perf_counter() - t0
        peaks.mark("logprobs")

        # --------------------------------------------------------------------------------------------
        # 6. Update: mu passes, mini-batches, micro-batches with a global loss normaliser
        t0 = time.perf_counter()
        update_stats = learner.update(batch)
        t_update = time.perf_counter() - t0
        peaks.mark("update")

        # --------------------------------------------------------------------------------------------
        # 6b. U-statistic monitor: c1, c2, c3 from the step's groups and the update's score sketches
        ustat_metrics: dict[str, float] = {}
        if monitor is not None:
            t0 = time.perf_counter()
            sketches, scored = learner.score_sketch.take(len(rollouts))
            ustat_metrics = monitor.observe(step, *group_sketches(step_rewards, sketches, scored, group_starts))
            ustat_metrics["perf/ustat_s"] = time.perf_counter() - t0

        # --------------------------------------------------------------------------------------------
        # 7. Weight sync: push the new policy into the live vLLM engine
        t0 = time.perf_counter()
        engine.load_weights(hf_weights(learner.module))
        t_sync = time.perf_counter() - t0
        peaks.mark("sync")
        sync_gap = None
        if cfg.run.check_sync_every and step % cfg.run.check_sync_every == 0:
            sync_gap = sync_logprob_gap(engine, learner, prompt_ids[0], tokenizer.pad_token_id)

        # --------------------------------------------------------------------------------------------
        # 8. Log: averages over all ranks
        if sampled is not None:  # every rollout drawn, kept or not
            drawn = sampled.drawn
            problems, rollouts, texts, scores, rewards = (drawn.problems, drawn.rollouts, drawn.texts, drawn.scores,
                                                          drawn.rewards)
        lengths = [len(r.completion_token_ids) for r in rollouts]
        n_tokens = sum(lengths)
        step_s = time.perf_counter() - t_step
        # The verifier's accuracy and statuses as fractions of the completions, like eval/no_answer (docs/metrics.md);
        # with data.kind none no verifier scores, and they are not logged.
        verified = {} if cfg.data.kind == "none" else {
            "reward/accuracy": (sum(s.correct for s in scores), len(scores)),
            **{f"reward/{status}": (sum(s.status == status for s in scores), len(scores))
               for status in ("no_answer", "timeout", "error")}}
        metrics = global_means({
            "reward/mean": (float(rewards.sum()), len(scores)),
            "reward/sq": (float((rewards**2).sum()), len(scores)),
            **verified,
            **function_sums([s.functions for s in scores], verifier.functions, "reward/fn/"),
            "reward/zero_variance": (zero_var, 1),  # fraction of the groups; every rank holds as many groups
            "train/completion_len_mean": (n_tokens, len(rollouts)),
            "train/truncated": (sum(r.truncated for r in rollouts), len(rollouts)),
            **({"train/sync_logprob_max_diff": (sync_gap, 1)} if sync_gap is not None else {}),
            "perf/rollout_s": (t_rollout, 1), "perf/reward_s": (t_reward, 1), "perf/logprobs_s": (t_logprobs, 1),
            "perf/update_s": (t_update, 1), "perf/sync_s": (t_sync, 1), "perf/step_s": (step_s, 1),
            "perf/rollout_tokens_per_s": (n_tokens / max(t_rollout, 1e-9), 1),
        })
        metrics.update({f"train/{k}": v for k, v in update_stats.items()})  # already over all ranks (Learner.update)
        metrics["reward/std"] = max(0.0, metrics.pop("reward/sq") - metrics["reward/mean"] ** 2) ** 0.5
        metrics["train/completion_len_max"] = all_reduce_max(max(lengths))
        metrics["train/skipped_steps_total"] = float(learner.skipped_nonfinite)
        metrics.update(ustat_metrics)
        metrics.update({name: all_reduce_max(gib) for name, gib in peaks.metrics().items()})
        if sampled is not None:
            metrics.update(global_means({"train/dynamic_extra_rollouts": (sampled.extra_rollouts, 1),
                                         "train/dynamic_kept_groups": (len(sampled.kept.problems) * (
                                             not sampled.placeholder), 1),
                                         "train/dynamic_rounds": (sampled.extra_rounds, 1)}))
            metrics["train/dynamic_extra_rollouts"] *= world  # sums over ranks, not means
            metrics["train/dynamic_kept_groups"] *= world
        if cfg.run.samples_every and step % cfg.run.samples_every == 0:
            rendered = {i: renderer.text(problems[i]) for i in {r.prompt_index for r in rollouts}}  # as generated
            logger.samples(step, [{"uid": problems[r.prompt_index].uid, "prompt": problems[r.prompt_index].question,
                                   "rendered_prompt": rendered[r.prompt_index], "completion": text,
                                   "reward": s.reward, "gold": problems[r.prompt_index].gold,
                                   "answer": s.answer, "status": s.status,
                                   "functions": function_values(s.functions, verifier.functions),
                                   "meta": problems[r.prompt_index].meta}  # the row's other fields
                                  for r, text, s in zip(rollouts, texts, scores, strict=True)])

        # --------------------------------------------------------------------------------------------
        # 9. Eval: every eval_every steps and after the last one (in the same metrics row)
        if eval_problems and (step == cfg.run.steps or (cfg.run.eval_every and step % cfg.run.eval_every == 0)):
            eval_metrics, eval_failures = evaluate(engine, tokenizer, renderer, verifier, eval_problems, cfg, group)
            report_first_failures(logger, eval_failures, reported_failures, "eval/fn/")
            metrics.update(eval_metrics)
        logger.log(step, metrics)

        # --------------------------------------------------------------------------------------------
        # 10. Checkpoint: every checkpoint_every steps and at the end; atomic, the last keep_last kept
        if step == cfg.run.steps or (cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0):
            state = trainer_state(step, sampler, learner, cfg, monitor)
            checkpoint.save_checkpoint(run_dir, step, learner.engine, state, hf_weights(learner.module), save_hf,
                                       cfg.run.keep_last)

    if eval_problems and cfg.run.steps > start_step:
        logger.eval_report(len(eval_problems))
    logger.failure_report(cfg.reward.max_failure_fraction)
    verifier.close()
    engine.close()
    logger.close()
    if rank == 0:
        logger.print(f"curves: {plot_run(run_dir)}")
    return run_dir
