"""The GRPO training loop, read top to bottom in `train`.

    grpo-train --config configs/tiny-cpu.yaml                                  # one process
    torchrun --nproc_per_node 2 -m grpo_train --config configs/tiny-cpu.yaml   # two ranks (gloo on CPU)

Each rank holds a colocated vLLM engine and a DeepSpeed learner (or, with rollout.placement servers, sends its prompts
to vLLM servers and pushes its weights to them: grpo_train/rollout/servers.py). Per step:
data -> rollout -> reward -> advantage -> old/ref logprobs -> update -> weight sync -> log -> eval -> checkpoint.
What the loop calls besides the learner and the engine: grpo_train/rounds.py (a step's rounds, synchronous or from
the rollout pool, chosen once at set-up), rollout/weight_sync.py (where the weights go; the sync check),
metrics_row.py (the metrics row), evaluation.py (the held-out eval), checkpoint.py (the trainer's state).
Every rank rolls out its own share of the step's prompts (with rollout.tensor_parallel_size > 1 the ranks of one
vLLM engine generate their prompts together and split the completions); a group's advantages need only its own
G rewards, so ranks talk only inside DeepSpeed (gradients), inside vLLM and to average the logged metrics.

Deviations from DeepSeekMath's GRPO, all configurable: the default loss aggregation is `token_mean` (DAPO)
rather than the per-sequence mean; the old-policy log-probs are not recomputed when the update is on-policy
(mu = 1 and one mini-batch: the ratio is then exactly 1, as in GRPO's own default); the KL term is off by
default (kl_coef = 0), as in DAPO and Dr. GRPO.
"""

from __future__ import annotations

import time
from pathlib import Path

from transformers import AutoTokenizer

from grpo_train import algorithms, checkpoint, dynamic_sampling
from grpo_train.config import Config, ConfigError, to_dict, ustat_monitor_on
from grpo_train.data import PromptSampler, load_problems
from grpo_train.distributed import all_reduce_max, init_distributed
from grpo_train.evaluation import evaluate
from grpo_train.learner import Learner, make_update_batch
from grpo_train.memory import PhasePeaks
from grpo_train.metrics import MetricsLogger, NoSpreadWarning
from grpo_train.metrics_row import StepRecord, sample_rows, step_metrics
from grpo_train.models import check_context_length, resolve_model
from grpo_train.pace import Pace
from grpo_train.plot import plot_run
from grpo_train.preemption import StepStart, StopSignals
from grpo_train.prompts import PromptRenderer
from grpo_train.rewards.failures import FailureReports
from grpo_train.rewards.functions import reward_functions
from grpo_train.rewards.workers import VerifierPool
from grpo_train.rollout import EngineRanks, RolloutPool, SamplingSpec, ServerPool, make_engine
from grpo_train.rollout.weight_sync import sync_logprob_gap
from grpo_train.rounds import EngineRounds, PoolRounds, RolloutTools, step_sizes
from grpo_train.run_dir import check_shared_folder, config_changes, prepare_run_dir, save_run_config
from grpo_train.ustat.monitor import UstatMonitor, group_sketches

PROMPTS_SHOWN = 3  # prompts.txt: the first problems' prompts, as the model sees them


def train(cfg: Config, stop: StopSignals | None = None) -> Path:
    # ------------------------------------------------------------------------------------------------
    # Set-up: processes, run folder, seeds, model
    rank, world = init_distributed()
    # SIGTERM / SIGUSR1 (preemption, a time limit; grpo_train/preemption.py): the cli installs the handlers
    stop = stop or StopSignals(cfg.run.preempt_grace_s, install=False)
    a = cfg.algorithm
    if a.prompts_per_step % world:
        raise ConfigError(f"algorithm.prompts_per_step: {a.prompts_per_step} must be a multiple of the "
                          f"{world} ranks (each rank rolls out an equal share)")
    # The ranks of this rank's engine; a rollout server's tensor parallelism is inside the server.
    engine_ranks = EngineRanks.of(rank, world, cfg.rollout.tensor_parallel_size
                                  if cfg.rollout.placement == "colocated" else 1)
    run_dir, run_dir_note = prepare_run_dir(cfg) if rank == 0 else (Path(cfg.run.output_dir), None)
    check_shared_folder(run_dir, rank, world)  # collective: the other ranks use the folder once rank 0 has claimed it
    checkpoint.seed_everything(cfg.run.seed + rank)
    logger = MetricsLogger(cfg, run_dir, rank)
    if run_dir_note:
        logger.print(run_dir_note)
    # Where to resume from, before anything loads: a bad run.resume fails in seconds; a finished run stops here.
    resume_from = checkpoint.resolve_resume(run_dir, cfg.run.resume)
    saved_step = checkpoint.saved_step(resume_from) if resume_from is not None else None
    if saved_step is not None and saved_step >= cfg.run.steps:
        logger.print(f"the run in {run_dir} already finished at step {saved_step} "
                     f"(run.steps {cfg.run.steps}): nothing to train; raise run.steps to train further")
        logger.close()
        return run_dir
    model_path = resolve_model(cfg.model.name_or_path)
    check_context_length(cfg.model.max_model_len, cfg.model.name_or_path, model_path)

    # ------------------------------------------------------------------------------------------------
    # Data: training problems (same shuffled order on every rank), held-out problems, prompt renderer
    train_problems = load_problems(cfg.data, "train")
    eval_problems = load_problems(cfg.data, "test", n=cfg.run.eval_size) if cfg.run.eval_size else []
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = PromptRenderer(tokenizer, cfg.data)
    sampler = PromptSampler(train_problems, seed=cfg.run.seed)
    # The first prompts as the model sees them, rendered now (a template error stops the run before the models
    # load) and written to prompts.txt once start-up has passed.
    first_prompts = [(p.uid, renderer.text(p), len(renderer.token_ids(p))) for p in train_problems[:PROMPTS_SHOWN]]

    # ------------------------------------------------------------------------------------------------
    # Learner (DeepSpeed), rollout engine (vLLM: colocated, or rollout servers with rollout.placement servers),
    # verifier pool
    learner = Learner(cfg, model_path, total_optimizer_steps=cfg.run.steps * a.num_iterations * a.mini_batches)
    engine = make_engine(cfg, seed=cfg.run.seed + engine_ranks.index)
    verifier = VerifierPool(num_workers=cfg.reward.num_workers, timeout_s=cfg.reward.timeout_s,
                            functions=reward_functions(cfg.reward))
    tools = RolloutTools(engine, verifier, tokenizer, renderer, engine_ranks, cfg.rollout, cfg.reward,
                         max_prompt_tokens=cfg.model.max_model_len - cfg.rollout.max_tokens)
    failures = FailureReports(logger)  # each reward function's first failure printed, in training and in eval
    no_spread = NoSpreadWarning(logger)  # a line when no group's rewards differ for steps in a row: nothing learned
    # The U-statistic monitor (ustat/ metrics) and group_size auto's choices; it holds the G in force.
    monitor = UstatMonitor(cfg, world) if ustat_monitor_on(cfg) else None
    # rollout.max_staleness >= 1: the groups this rank's engine keeps in flight across steps (partial rollouts;
    # on rollout servers they go on generating through the update). max_staleness auto: the pool has capacity
    # max_staleness_max and the pace (grpo_train/pace.py) sets the bound in force, k = 0 included.
    start_g, start_prompts = step_sizes(a, monitor, None, 1, engine_ranks.count)  # the G and B the run starts at
    pool_kind = ServerPool if cfg.rollout.placement == "servers" else RolloutPool
    pool = None if cfg.rollout.max_staleness == 0 else pool_kind(
        engine, SamplingSpec.from_config(cfg.rollout, n=start_g, seed=0), start_g,
        start_prompts // engine_ranks.count, cfg.rollout.max_staleness)
    # A step's rounds (grpo_train/rounds.py): its own prompts', then dynamic sampling's; from the pool with k >= 1
    rounds = (EngineRounds(tools, sampler, cfg.run.seed) if pool is None
              else PoolRounds(tools, pool, sampler, cfg.run.seed))
    pace = Pace(cfg, world) if cfg.rollout.max_staleness_auto else None
    # Recomputed only when the update takes several optimizer steps: with one, the learner before it is the policy
    # whose ratio the loss takes (also asynchronous: the proximal policy; sampler log-probs weight the older tokens).
    needs_old_logp = a.num_iterations > 1 or a.mini_batches > 1
    save_run_config(cfg, run_dir, rank)  # start-up passed: from here on the folder holds this run
    logger.prompts(first_prompts, f"data.template {cfg.data.template}" + (
        f", data.template_file {cfg.data.template_file}" if cfg.data.template_file else ""))
    peaks = PhasePeaks()  # GPU: the allocator's peak in each phase (memory/ metrics, checked against memory.py)

    # ------------------------------------------------------------------------------------------------
    # Resume: learner state, data position, RNG; then the engine gets the resumed weights
    start_step = 0
    if resume_from is not None:
        state = learner.load_checkpoint(resume_from)
        start_step = stop.last_saved = state["step"]
        try:
            sampler.load_state_dict(state["sampler"])
        except ValueError as err:
            raise checkpoint.CheckpointError(f"{resume_from}: {err}") from None
        if monitor is not None and "ustat" in state:
            monitor.load_state_dict(state["ustat"])
        if pace is not None and "pace" in state:
            pace.load_state_dict(state["pace"])
        if pool is not None:
            pool.load_state_dict(checkpoint.pool_state(resume_from, state, rank, world),
                                 {p.uid: p for p in train_problems})
        engine.load_weights(learner.policy_weights())
        changed = config_changes(state["config"], to_dict(cfg))
        if changed:
            logger.print(f"warning: the config differs from the checkpoint's: {'; '.join(changed)}")
        logger.print(f"resumed from {resume_from} at step {start_step}")
    elif cfg.rollout.placement == "servers":
        engine.load_weights(learner.policy_weights())  # a server already running may hold another run's weights
    # Rows after the resumed step (all rows, on a fresh start) are from an attempt that was cut short.
    logger.truncate_after(start_step if resume_from is not None else -1)
    if resume_from is None and eval_problems:
        before = evaluate(tools, eval_problems, cfg, failures)
        logger.log(0, before)
        logger.print(f"eval before training: {logger.eval_summary(before)} on {len(eval_problems)}")
    engine.take_times()  # rollout servers: the start's weight push is not step 1's

    stopped = False  # by SIGTERM / SIGUSR1, at a checkpoint
    for step in range(start_step + 1, cfg.run.steps + 1):
        t_step = time.perf_counter()
        peaks.start()
        seconds: dict[str, float] = {}  # perf/<phase>_s
        # what this step changes of the last complete one
        step_start = StepStart.take(step - 1, sampler, monitor, pool, pace)
        # --------------------------------------------------------------------------------------------
        # 0. Group size: with group_size auto, every K steps the G of smallest predicted gradient MSE (with a rollout
        # pool, for the groups due from step + k on: those due before are in flight with the G they were admitted
        # with). With rollout.max_staleness auto, the pace chooses the staleness bound k (and G) together instead:
        # the (G, k) of smallest predicted gradient MSE per second.
        if pace is not None:
            reason = pace.choose(step, monitor, rounds)
            if reason is not None:
                logger.print(f"max_staleness auto: {reason}")
        elif monitor is not None:
            reason = monitor.choose_group_size(step)
            if reason is not None:
                reason += rounds.resize(monitor.group_size, monitor.prompts_per_step // engine_ranks.count, step)
                logger.print(f"group_size auto: {reason}")
        group_size, prompts_per_step = step_sizes(a, monitor, pool, step, engine_ranks.count)

        # --------------------------------------------------------------------------------------------
        # 1-3. Prompts, rollout and reward: G completions per prompt with the sampler's log-probs, each verified
        # against its problem's gold answer and scored by the reward functions. Synchronous: the step's batch, this
        # rank's engine generates its part and the rank trains on a share of that; asynchronous (rollout.max_staleness
        # k >= 1): new prompts join the pool of groups in flight, which runs until the groups due at this step are
        # complete (phase: what it did).
        first, phase, seconds["rollout"], seconds["reward"] = rounds.first(step, group_size, prompts_per_step)
        failures.check_step(first.scores, verifier.functions, cfg.reward.max_failure_fraction, step)

        # --------------------------------------------------------------------------------------------
        # 3b. Dynamic sampling: train on the groups with mixed rewards; dapo draws more prompts for them
        # (Asynchronous: an extra round's prompts join the pool due at this step, and the pool runs again.)
        t0 = time.perf_counter()
        sampled = dynamic_sampling.select(a.dynamic_sampling, first, group_size, prompts_per_step // world,
                                          a.dynamic_sampling_max_rounds, rounds.extra,
                                          lambda short: all_reduce_max(float(short)) > 0)
        seconds["rollout"] += time.perf_counter() - t0
        trained = sampled.kept  # the groups the update trains on (off: every group of the first round)
        peaks.mark("rollout")  # generation, dynamic sampling's extra rounds included

        # --------------------------------------------------------------------------------------------
        # 3c. Preemption (SIGTERM, SIGUSR1): the ranks agree whether to stop. The step is finished when its learner
        # phases and a save fit in the grace budget left (measured on this process's saved steps); else it is
        # abandoned before the learner touches the weights, and the step before is saved as this step found it.
        if stop.agree(step, "rollout") and not stop.finish_fits():
            if stop.last_saved < step - 1:
                step_start.save(learner, run_dir, cfg)
            stop.abandoned, stopped = step, True
            break

        # --------------------------------------------------------------------------------------------
        # 4. Advantages: within each GRPO group of G (contiguous)
        advantages = algorithms.group_advantages(trained.rewards, group_size, a.advantage, a.adv_eps)

        # --------------------------------------------------------------------------------------------
        # 5. Old and reference log-probs (no gradient), with vLLM asleep
        t0 = time.perf_counter()
        engine.sleep()  # GPU sleep mode: free vLLM's memory for the learner (load_weights wakes it; CPU: no-op)
        batch = make_update_batch([r.prompt_token_ids for r in trained.rollouts],
                                  [r.completion_token_ids for r in trained.rollouts],
                                  [r.logprobs for r in trained.rollouts], advantages, pad_id=tokenizer.pad_token_id,
                                  truncated=[r.truncated for r in trained.rollouts],
                                  staleness=rounds.token_staleness(trained.rollouts, step - 1))
        if sampled.placeholder:
            batch.completion_mask.zero_()  # no mixed group on this rank: nothing to learn, nothing to count
        if needs_old_logp:
            batch.old_logp = learner.logprobs(batch)
        if a.kl_coef > 0:
            batch.ref_logp = learner.logprobs(batch, reference=True)
        seconds["logprobs"] = time.perf_counter() - t0
        peaks.mark("logprobs")

        # --------------------------------------------------------------------------------------------
        # 6. Update: mu passes, mini-batches, micro-batches with a global loss normaliser
        t0 = time.perf_counter()
        update_stats = learner.update(batch)
        seconds["update"] = time.perf_counter() - t0
        peaks.mark("update")

        # --------------------------------------------------------------------------------------------
        # 6b. U-statistic monitor: c1, c2, c3 from the step's groups and the update's score sketches
        ustat_metrics: dict[str, float] = {}
        if monitor is not None:
            t0 = time.perf_counter()
            sketches, scored = learner.take_score_sketches(len(trained.rollouts))
            ustat_metrics = monitor.observe(step, *group_sketches(first.rewards.view(-1, group_size), sketches,
                                                                  scored, sampled.first_round_starts))
            ustat_metrics["perf/ustat_s"] = time.perf_counter() - t0

        # --------------------------------------------------------------------------------------------
        # 7. Weight sync: push the new policy into the live engine
        t0 = time.perf_counter()
        engine.load_weights(learner.policy_weights())
        seconds["sync"] = time.perf_counter() - t0
        peaks.mark("sync")
        engine_times = engine.take_times()  # rollout servers: perf/server_busy_s, ... (colocated: none)
        sync_gap = None
        if cfg.run.check_sync_every and step % cfg.run.check_sync_every == 0:
            sync_gap = sync_logprob_gap(engine, learner, renderer.token_ids(rounds.engine_problems[0]),
                                        tokenizer.pad_token_id)

        # --------------------------------------------------------------------------------------------
        # 8. Log: averages over all ranks; samples.jsonl every samples_every steps
        seconds["step"] = time.perf_counter() - t_step
        record = StepRecord(group_size, first, sampled, update_stats, seconds, sync_gap, ustat_metrics,
                            peaks.metrics(), learner.skipped_nonfinite, phase, engine_times)
        metrics = step_metrics(cfg, record, verifier.functions, world, step)
        if pace is not None:  # the step at the k in force joins the pace's windows; pace/ metrics
            metrics.update(pace.observe(step, monitor, phase, [len(r.completion_token_ids) for r in first.rollouts],
                                        seconds, update_stats))
        if cfg.run.samples_every and step % cfg.run.samples_every == 0:  # every rollout drawn
            logger.samples(step, sample_rows(sampled.drawn, renderer, verifier.functions))

        # --------------------------------------------------------------------------------------------
        # 9. Eval: every eval_every steps and after the last one (in the same metrics row)
        if eval_problems and (step == cfg.run.steps or (cfg.run.eval_every and step % cfg.run.eval_every == 0)):
            metrics.update(evaluate(tools, eval_problems, cfg, failures))
        logger.log(step, metrics)
        no_spread.check(step, metrics)

        # --------------------------------------------------------------------------------------------
        # 10. Checkpoint: every checkpoint_every steps, at the end, and when the ranks agree to stop (a stop at the
        # last step ends the run as finished); atomic, the last keep_last kept
        if stop.agree(step, "end") or step == cfg.run.steps or (cfg.run.checkpoint_every
                                                                 and step % cfg.run.checkpoint_every == 0):
            learner.save_checkpoint(run_dir, step, checkpoint.trainer_state(step, sampler, cfg, monitor, pool, pace),
                                    cfg.run.keep_last)
            stop.saved(step)
        if stop.agreed and step < cfg.run.steps:
            stopped = True
            break

    if eval_problems and cfg.run.steps > start_step and not stopped:
        logger.eval_report(len(eval_problems))
    logger.failure_report(cfg.reward.max_failure_fraction)
    verifier.close()
    engine.close()  # rollout servers this run started stop with it
    logger.close()
    if stopped:
        raise stop.preempted()  # the cli prints the step, the checkpoint and the resume command
    if rank == 0:
        logger.print(f"curves: {plot_run(run_dir)}")
    return run_dir
