"""Other trainers' names for our config keys, and the known keys an unknown key may have meant.

An unknown key spelled as TRL or verl spell it gets "did you mean <our key>?" (the error for unknown keys, in
grpo_train/config/yaml_io.py), and docs/configuration.md's "Coming from TRL or verl" table is generated from ALIASES
(scripts/maint/config_docs.py).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from grpo_train.config.schema import field_docs

# ----------------------------------------------------------------------------------------------------
# Other trainers' names for our keys. An unknown key spelled so gets "did you mean <our key>?", and
# docs/configuration.md's "Coming from TRL or verl" table is generated from this tuple (scripts/maint/config_docs.py).
# TRL: GRPOConfig's fields (and TrainingArguments'); verl: dotted paths of its ppo_trainer.yaml. Only names with a
# real equivalent; `note` says where the meaning differs. Names that are ours too (temperature, top_p, seed,
# weight_decay, grad_clip, ...) are found without a row, by their last part.


@dataclass(frozen=True)
class Alias:
    trainer: str  # "TRL" or "verl"
    name: str  # their key
    key: str  # ours
    note: str = ""  # where the meaning differs


ALIASES: tuple[Alias, ...] = (
    Alias("TRL", "learning_rate", "learner.lr"),
    Alias("TRL", "beta", "algorithm.kl_coef"),
    Alias("TRL", "num_generations", "algorithm.group_size"),
    Alias("TRL", "epsilon", "algorithm.clip_eps"),
    Alias("TRL", "epsilon_high", "algorithm.clip_eps_high",
          "0 = same as clip_eps; TRL's cispo cap (epsilon_high with loss_type cispo) is algorithm.cispo_weight_cap"),
    Alias("TRL", "max_completion_length", "rollout.max_tokens"),
    Alias("TRL", "vllm_max_model_length", "model.max_model_len", "prompt + completion, for the learner too"),
    Alias("TRL", "per_device_train_batch_size", "learner.micro_batch_size",
          "sequences per forward/backward pass; a step's batch is algorithm.prompts_per_step x group_size "
          "completions over all GPUs, not per-device x GPUs x gradient_accumulation_steps"),
    Alias("TRL", "gradient_accumulation_steps", "algorithm.prompts_per_step",
          "no such key: a step's prompts_per_step x group_size completions are accumulated in "
          "learner.micro_batch_size passes into algorithm.mini_batches optimizer steps"),
    Alias("TRL", "steps_per_generation", "algorithm.mini_batches",
          "optimizer steps per rollout batch (TRL's steps_per_generation / gradient_accumulation_steps)"),
    Alias("TRL", "loss_type", "algorithm.loss_agg",
          "grpo = seq_mean_token_mean, dr_grpo = seq_mean_token_sum_norm, dapo and bnpo = token_mean; cispo is "
          "algorithm.policy_loss=cispo; or algorithm.preset"),
    Alias("TRL", "scale_rewards", "algorithm.advantage", "group (true) = grpo, none (false) = dr_grpo; no batch"),
    Alias("TRL", "importance_sampling_level", "algorithm.policy_loss", "sequence = gspo"),
    Alias("TRL", "mask_truncated_completions", "algorithm.mask_truncated"),
    Alias("TRL", "use_bias_correction_kl", "algorithm.kl_ratio_correction", "on by default here"),
    Alias("TRL", "vllm_importance_sampling_mode", "algorithm.seq_correction",
          "sequence_truncate = truncate, sequence_mask = mask; token_truncate = algorithm.tis_cap"),
    Alias("TRL", "vllm_importance_sampling_cap", "algorithm.seq_correction_high",
          "the token-level cap is algorithm.tis_cap"),
    Alias("TRL", "top_k", "rollout.top_k", "off is -1 here, 0 in TRL"),
    Alias("TRL", "use_vllm", "rollout.engine", "vllm (the default here) or hf"),
    Alias("TRL", "vllm_gpu_memory_utilization", "rollout.gpu_memory_utilization"),
    Alias("TRL", "vllm_tensor_parallel_size", "rollout.tensor_parallel_size"),
    Alias("TRL", "vllm_enable_sleep_mode", "rollout.enable_sleep_mode"),
    Alias("TRL", "max_grad_norm", "learner.grad_clip"),
    Alias("TRL", "lr_scheduler_type", "learner.lr_schedule", "constant or cosine"),
    Alias("TRL", "bf16", "learner.precision", "bf16, with model.dtype bfloat16"),
    Alias("TRL", "max_steps", "run.steps"),
    Alias("TRL", "save_steps", "run.checkpoint_every"),
    Alias("TRL", "model_name_or_path", "model.name_or_path"),
    Alias("verl", "data.train_batch_size", "algorithm.prompts_per_step"),
    Alias("verl", "data.max_prompt_length", "model.max_model_len",
          "prompt + completion; a prompt over its budget is an error, not truncated"),
    Alias("verl", "data.max_response_length", "rollout.max_tokens"),
    Alias("verl", "data.train_files", "data.source"),
    Alias("verl", "data.val_files", "data.eval_source"),
    Alias("verl", "actor_rollout_ref.model.path", "model.name_or_path"),
    Alias("verl", "actor_rollout_ref.model.lora_rank", "model.lora.rank"),
    Alias("verl", "actor_rollout_ref.actor.optim.lr", "learner.lr"),
    Alias("verl", "actor_rollout_ref.actor.optim.lr_warmup_steps", "learner.warmup_steps"),
    Alias("verl", "actor_rollout_ref.actor.ppo_mini_batch_size", "algorithm.mini_batches",
          "verl gives the prompts per optimizer step; here mini_batches = train_batch_size / ppo_mini_batch_size"),
    Alias("verl", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "learner.micro_batch_size"),
    Alias("verl", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "learner.max_tokens_per_micro_batch",
          "on when set (no use_dynamic_bsz switch); counts padded tokens, rows x (longest prompt + completion)"),
    Alias("verl", "actor_rollout_ref.actor.ppo_epochs", "algorithm.num_iterations"),
    Alias("verl", "actor_rollout_ref.actor.clip_ratio_low", "algorithm.clip_eps"),
    Alias("verl", "actor_rollout_ref.actor.clip_ratio_high", "algorithm.clip_eps_high"),
    Alias("verl", "actor_rollout_ref.actor.clip_ratio_c", "algorithm.dual_clip", "off (0) by default here, 3 in verl"),
    Alias("verl", "actor_rollout_ref.actor.loss_agg_mode", "algorithm.loss_agg",
          "the same modes with _ for -; no seq-mean-token-sum"),
    Alias("verl", "actor_rollout_ref.actor.policy_loss.loss_mode", "algorithm.policy_loss", "vanilla = ppo"),
    Alias("verl", "actor_rollout_ref.actor.kl_loss_coef", "algorithm.kl_coef", "the KL term is on when > 0"),
    Alias("verl", "actor_rollout_ref.actor.kl_loss_type", "algorithm.kl_estimator",
          "kl = k1, mse = k2, low_var_kl = k3"),
    Alias("verl", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_coef",
          "verl's KL penalty in the reward; ours is a loss term, as actor.kl_loss_coef"),
    Alias("verl", "algorithm.adv_estimator", "algorithm.advantage", "grpo and rloo alike"),
    Alias("verl", "algorithm.norm_adv_by_std_in_grpo", "algorithm.advantage", "false = dr_grpo"),
    Alias("verl", "algorithm.filter_groups.enable", "algorithm.dynamic_sampling", "true = dapo"),
    Alias("verl", "algorithm.filter_groups.max_num_gen_batches", "algorithm.dynamic_sampling_max_rounds",
          "verl counts every generation batch (0 = no limit), this the extra rounds"),
    Alias("verl", "actor_rollout_ref.model.use_fused_kernels", "learner.fused_head",
          "verl's default is off, ours on (where a pass's logits exceed one chunk)"),
    Alias("verl", "actor_rollout_ref.rollout.n", "algorithm.group_size"),
    Alias("verl", "actor_rollout_ref.rollout.name", "rollout.engine", "vllm or hf"),
    Alias("verl", "actor_rollout_ref.rollout.gpu_memory_utilization", "rollout.gpu_memory_utilization"),
    Alias("verl", "actor_rollout_ref.rollout.tensor_model_parallel_size", "rollout.tensor_parallel_size"),
    Alias("verl", "trainer.total_training_steps", "run.steps"),
    Alias("verl", "trainer.save_freq", "run.checkpoint_every", "0 (not -1) = only at the end"),
    Alias("verl", "trainer.test_freq", "run.eval_every"),
    Alias("verl", "trainer.default_local_dir", "run.output_dir"),
    Alias("verl", "trainer.resume_mode", "run.resume", "auto alike; disable = never"),
)


def _ends_with(long: str, short: str) -> bool:
    """Whether dotted `short` is the last parts of dotted `long` (rollout.n of actor_rollout_ref.rollout.n)."""
    return long == short or long.endswith("." + short)


def suggest_keys(key: str) -> list[tuple[str, Alias | None]]:
    """The known keys an unknown dotted `key` may have meant, best first, each with the other trainer's Alias when
    it is one: another trainer's exact name, the same name in another section (algorithm.lr -> learner.lr), a name
    ending the same way (rollout.n -> verl's actor_rollout_ref.rollout.n), then the closest spelling of the last part
    (ours or another trainer's) and of the whole key."""
    generic = re.sub(r"\[\d+\]", "[]", key)  # reward.functions[0].wieght -> reward.functions[].wieght
    index = (re.findall(r"\[\d+\]", key) or ["[]"])[0]
    known = list(field_docs())
    leaf = generic.rpartition(".")[2]
    by_leaf: dict[str, list[tuple[str, Alias | None]]] = {}
    for k in known:
        by_leaf.setdefault(k.rpartition(".")[2], []).append((k, None))
    for alias in ALIASES:
        by_leaf.setdefault(alias.name.rpartition(".")[2], []).append((alias.key, alias))

    found: list[tuple[str, Alias | None]] = [(a.key, a) for a in ALIASES if generic == a.name]
    found = found or [(k, None) for k in known if k.rpartition(".")[2] == leaf]
    found = found or [(a.key, a) for a in ALIASES if _ends_with(generic, a.name) or _ends_with(a.name, generic)]
    found = found or [hit for name in difflib.get_close_matches(leaf, by_leaf, n=2, cutoff=0.75)
                      for hit in by_leaf[name]]
    found = found or [(k, None) for k in difflib.get_close_matches(generic, known, n=2, cutoff=0.8)]
    unique = dict.fromkeys(k for k, _ in found)
    return [(k.replace("[]", index), next(a for k2, a in found if k2 == k)) for k in unique]


def did_you_mean(path: str, suggested: list[tuple[str, Alias | None]]) -> str:
    """'did you mean algorithm.kl_coef? (beta is TRL's name for it)'"""
    why = [f"{a.name} is {a.trainer}'s name for {k}" + (f": {a.note}" if a.note else "") for k, a in suggested if a]
    return f"did you mean {' or '.join(k for k, _ in suggested)}?" + (f" ({'; '.join(why)})" if why else "")
