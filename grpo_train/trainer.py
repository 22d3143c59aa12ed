"""The GRPO training loop, read top to bottom in `train`.

    grpo-train --config configs/tiny-cpu.yaml                                  # one process
    torchrun --nproc_per_node 2 -m grpo_train --config configs/tiny-cpu.yaml   # two ranks (gloo on CPU)

Each rank holds a colocated vLLM engine and a DeepSpeed learner. Per step:
data -> rollout -> reward -> advantage -> old/ref logprobs -> update -> weight sync -> log -> eval -> checkpoint.
Every rank rolls out its own share of the step's prompts; a group's advantages need only its own G rewards,
so ranks talk only inside DeepSpeed (gradients) and to average the logged metrics.

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
from grpo_train.config import Config, ConfigError, RewardConfig, load_config, save_config, to_dict, ustat_monitor_on
from grpo_train.data import PromptRenderer, PromptSampler, load_problems
from grpo_train.evaluation import run_eval, verify
from grpo_train.learner import Learner, all_reduce_max, global_means, init_distributed, make_update_batch
from grpo_train.metrics import MetricsLogger
from grpo_train.models import resolve_model
from grpo_train.plot import plot_run
from grpo_train.rollout import SamplingSpec, hf_weights, make_engine, rollout_seed
from grpo_train.ustat_monitor import UstatMonitor, group_sketches
from grpo_train.verifier_pool import VerifierPool


class RunDirError(RuntimeError):
    """The run folder cannot be used (not writable, or holds a different run)."""


def prepare_run_dir(cfg: Config, rank: int) -> Path:
    """Create the run folder and write the resolved config, refusing to mix two different runs in one folder."""
    run_dir = Path(cfg.run.output_dir)
    if rank == 0:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            probe = run_dir / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as err:
            raise RunDirError(f"run.output_dir: {run_dir} is not writable ({err.strerror})") from None
        saved = run_dir / "config.yaml"
        if saved.exists() and cfg.run.resume == "never":
            changed = config_changes(to_dict(load_config(saved)), to_dict(cfg))
            if changed:
                raise RunDirError(f"run.output_dir: {run_dir} holds a run with a different config.yaml "
                                  f"({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}); "
                                  "choose another folder, or set run.resume=auto to continue it")
        save_config(cfg, saved)
    dist.barrier()
    return run_dir


def config_changes(old: dict, new: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for every leaf that differs, except where the run is resumed from and written to."""
    changes = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes += config_changes(a, b, path + ".")
        elif a != b and path not in ("run.resume", "run.output_dir"):
            changes.append(f"{path}: {a!r} -> {b!r}")
    return changes


def check_context_length(cfg: Config, model_path: str) -> None:
    """model.max_model_len must fit the model's positions (vLLM refuses it later, with a long traceback)."""
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(model_path)
    limit = getattr(model_config, "max_position_embeddings", None)
    rope = getattr(model_config, "rope_parameters", None) or getattr(model_config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return  # scaled RoPE extends the context: vLLM works out by how much
    if limit is not None and cfg.model.max_model_len > limit:
        raise ConfigError(f"model.max_model_len: {cfg.model.max_model_len} is beyond the context of "
                          f"{cfg.model.name_or_path} (max_position_embeddings = {limit}); lower model.max_model_len "
                          "(prompt + rollout.max_tokens must fit in it)")


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


def evaluate(engine, tokenizer, renderer, pool, problems, cfg: Config, rank: int, world: int) -> dict[str, float]:
    """Greedy accuracy on the held-out problems, each rank scoring its own share (accuracy reward only)."""
    items = run_eval(engine, tokenizer, renderer, pool, problems[rank::world], RewardConfig(), cfg.rollout.max_tokens)
    sums = {
        "eval/accuracy": (sum(i.greedy_correct for i in items), len(items)),
        "eval/truncated": (sum(i.truncated for i in items), len(items)),
        "eval/completion_len": (sum(i.completion_tokens for i in items), len(items)),
        "eval/no_answer": (sum(i.greedy_status == "no_answer" for i in items), len(items)),
    }
    # Breakdowns (synthetic category, MATH level): the keys come from the whole set so every rank has them all.
    for key in ("category", "level"):
        for group in sorted({str(p.meta[key]) for p in problems if key in p.meta}):
            mine = [i.greedy_correct for i in items if str(i.problem.meta.get(key)) == group]
            sums[f"eval/{key}/{group}"] = (sum(mine), len(mine))
    return global_means(sums)


def train(cfg: Config) -> Path:
    # ------------------------------------------------------------------------------------------------
    # Set-up: processes, run folder, seeds, model
    rank, world = init_distributed()
    a = cfg.algorithm
    if a.prompts_per_step % world:
        raise ConfigError(f"algorithm.prompts_per_step: {a.prompts_per_step} must be a multiple of the "
                          f"{world} ranks (each rank rolls out an equal share)")
    run_dir = prepare_run_dir(cfg, rank)
    seed_everything(cfg.run.seed + rank)
    logger = MetricsLogger(cfg, run_dir, rank)
    model_path = resolve_model(cfg.model.name_or_path)
    check_context_length(cfg, model_path)

    # ------------------------------------------------------------------------------------------------
    # Data: training problems (same shuffled order on every rank), held-out problems, prompt renderer
    train_problems = load_problems(cfg.data, "train")
    eval_problems = load_problems(cfg.data, "test", n=cfg.run.eval_size) if cfg.run.eval_size else []
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = PromptRenderer(tokenizer, cfg.data)
    sampler = PromptSampler(train_problems, seed=cfg.run.seed)
    max_prompt_tokens = cfg.model.max_model_len - cfg.rollout.max_tokens

    # ------------------------------------------------------------------------------------------------
    # Learner (DeepSpeed), rollout engine (vLLM, colocated), verifier pool
    optimizer_steps = cfg.run.steps * a.num_iterations * a.mini_batches
    learner = Learner(cfg, model_path, optimizer_steps)
    engine = make_engine(cfg, seed=cfg.run.seed + rank)
    verifier = VerifierPool(num_workers=cfg.reward.num_workers, timeout_s=cfg.reward.timeout_s)
    save_hf = checkpoint.hf_folder_writer(learner.base_config, model_path)
    needs_old_logp = a.num_iterations > 1 or a.mini_batches > 1
    # The U-statistic monitor (ustat/ metrics) and group_size auto's choices; it holds the G in force.
    monitor = UstatMonitor(cfg, world) if ustat_monitor_on(cfg) else None

    def extra_round(step: int, group_size: int, prompts: int, k: int, needed: bool) -> dynamic_sampling.Round | None:
        """Dynamic sampling's extra round k of a step: steps 1-3 again (every rank advances the prompt sampler; a
        rank that needs no more groups generates nothing)."""
        more = sampler.next_batch(prompts)[rank::world]
        if not needed:
            return None
        ids = [renderer.check_length(p, max_prompt_tokens) for p in more]
        spec = SamplingSpec.from_config(cfg.rollout, n=group_size, seed=rollout_seed(cfg.run.seed, step, rank, k))
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
        before = evaluate(engine, tokenizer, renderer, verifier, eval_problems, cfg, rank, world)
        logger.log(0, before)
        logger.print(f"eval before training: accuracy {before['eval/accuracy']:.3f} on {len(eval_problems)}")

    for step in range(start_step + 1, cfg.run.steps + 1):
        t_step = time.perf_counter()
        # --------------------------------------------------------------------------------------------
        # 0. Group size: with group_size auto, every K steps the G of smallest predicted gradient MSE
        group_size, prompts_per_step = a.group_size, a.prompts_per_step
        if monitor is not None:
            reason = monitor.choose_group_size(step)
            if reason is not None:
                logger.print(f"group_size auto: {reason}")
            group_size, prompts_per_step = monitor.group_size, monitor.prompts_per_step

        # --------------------------------------------------------------------------------------------
        # 1. Prompts: the step's batch, this rank's share
        problems = sampler.next_batch(prompts_per_step)[rank::world]
        prompt_ids = [renderer.check_length(p, max_prompt_tokens) for p in problems]

        # --------------------------------------------------------------------------------------------
        # 2. Rollout: G completions per prompt, with the sampler's log-probs
        t0 = time.perf_counter()
        # The seed depends only on (run seed, step, rank): a resumed run regenerates the same rollouts.
        spec = SamplingSpec.from_config(cfg.rollout, n=group_size, seed=rollout_seed(cfg.run.seed, step, rank))
        rollouts = engine.generate(prompt_ids, spec)  # prompt-major: G consecutive rollouts per prompt
        t_rollout = time.perf_counter() - t0

        # --------------------------------------------------------------------------------------------
        # 3. Reward: verify every completion against its problem's gold answer
        t0 = time.perf_counter()
        texts, scores = verify(verifier, tokenizer, rollouts, problems, cfg.reward)
        rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)  # [n_prompts * G]
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

        # --------------------------------------------------------------------------------------------
        # 4. Advantages: within each group of G (contiguous)
        advantages = algorithms.group_advantages(rewards, group_size, a.advantage, a.adv_eps)
        zero_var = float(algorithms.zero_variance_fraction(step_rewards.flatten(), group_size))

        # --------------------------------------------------------------------------------------------
        # 5. Old and reference log-probs (no gradient)
        t0 = time.perf_counter()
        batch = make_update_batch([r.prompt_token_ids for r in rollouts], [r.completion_token_ids for r in rollouts],
                                  [r.logprobs for r in rollouts], advantages, pad_id=tokenizer.pad_token_id)
        if sampled is not None and sampled.placeholder:
            batch.completion_mask.zero_()  # no mixed group on this rank: nothing to learn, nothing to count
        if needs_old_logp:
            batch.old_logp = learner.logprobs(batch)
        if a.kl_coef > 0:
            batch.ref_logp = learner.logprobs(batch, reference=True)
        t_logprobs = time.perf_counter() - t0

        # --------------------------------------------------------------------------------------------
        # 6. Update: mu passes, mini-batches, micro-batches with a global loss normaliser
        t0 = time.perf_counter()
        engine.sleep()  # GPU sleep mode: free vLLM's memory for the update (load_weights wakes it; CPU: no-op)
        update_stats = learner.update(batch)
        t_update = time.perf_counter() - t0

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
        metrics = global_means({
            "reward/mean": (float(rewards.sum()), len(scores)),
            "reward/sq": (float((rewards**2).sum()), len(scores)),
            "reward/accuracy": (sum(s.accuracy_reward > 0 for s in scores), len(scores)),
            "reward/format": (sum(s.format_reward for s in scores), len(scores)),
            "reward/timeouts": (sum(s.status == "timeout" for s in scores), 1),
            "reward/no_answer": (sum(s.status == "no_answer" for s in scores), 1),
            "reward/errors": (sum(s.status == "error" for s in scores), 1),
            "reward/zero_variance_groups": (zero_var, 1),
            "train/completion_len_mean": (n_tokens, len(rollouts)),
            "train/truncated": (sum(r.truncated for r in rollouts), len(rollouts)),
            **{f"train/{k}": (v, 1) for k, v in update_stats.items()},
            **({"train/sync_logprob_max_diff": (sync_gap, 1)} if sync_gap is not None else {}),
            "perf/rollout_s": (t_rollout, 1), "perf/reward_s": (t_reward, 1), "perf/logprobs_s": (t_logprobs, 1),
            "perf/update_s": (t_update, 1), "perf/sync_s": (t_sync, 1), "perf/step_s": (step_s, 1),
            "perf/rollout_tokens_per_s": (n_tokens / max(t_rollout, 1e-9), 1),
        })
        metrics["reward/std"] = max(0.0, metrics.pop("reward/sq") - metrics["reward/mean"] ** 2) ** 0.5
        metrics["train/completion_len_max"] = all_reduce_max(max(lengths))
        metrics["train/skipped_steps_total"] = float(learner.skipped_nonfinite)
        metrics.update(ustat_metrics)
        if sampled is not None:
            metrics.update(global_means({"train/dynamic_extra_rollouts": (sampled.extra_rollouts, 1),
                                         "train/dynamic_kept_groups": (len(sampled.kept.problems) * (
                                             not sampled.placeholder), 1),
                                         "train/dynamic_rounds": (sampled.extra_rounds, 1)}))
            metrics["train/dynamic_extra_rollouts"] *= world  # sums over ranks, not means
            metrics["train/dynamic_kept_groups"] *= world
        if cfg.run.samples_every and step % cfg.run.samples_every == 0:
            logger.samples(step, [{"prompt": problems[r.prompt_index].question, "completion": text,
                                   "reward": s.reward, "gold": problems[r.prompt_index].gold, "answer": s.answer,
                                   "status": s.status} for r, text, s in zip(rollouts, texts, scores, strict=True)])

        # --------------------------------------------------------------------------------------------
        # 9. Eval: every eval_every steps and after the last one (in the same metrics row)
        if eval_problems and (step == cfg.run.steps or (cfg.run.eval_every and step % cfg.run.eval_every == 0)):
            metrics.update(evaluate(engine, tokenizer, renderer, verifier, eval_problems, cfg, rank, world))
        logger.log(step, metrics)

        # --------------------------------------------------------------------------------------------
        # 10. Checkpoint: every checkpoint_every steps and at the end; atomic, the last keep_last kept
        if step == cfg.run.steps or (cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0):
            state = trainer_state(step, sampler, learner, cfg, monitor)
            checkpoint.save_checkpoint(run_dir, step, learner.engine, state, hf_weights(learner.module), save_hf,
                                       cfg.run.keep_last)

    if eval_problems and cfg.run.steps > start_step:
        logger.eval_report(len(eval_problems))
    verifier.close()
    engine.close()
    logger.close()
    if rank == 0:
        logger.print(f"curves: {plot_run(run_dir)}")
    return run_dir
