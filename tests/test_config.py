"""The config system: every shipped config validates; overrides convert types; bad input names its key."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_train.config import (
    ALIASES,
    PRESETS,
    Config,
    ConfigError,
    cpu_has_native_bf16,
    field_docs,
    get_key,
    load_config,
    preset_report,
    save_config,
    to_dict,
)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_validate_and_open_with_purpose_and_command(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    lines = path.read_text().splitlines()
    header = lines[: next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))]
    assert header[0].startswith("# "), f"{path.name} must open with a comment stating its purpose"
    assert any(f"--config configs/{path.name}" in line for line in header), \
        f"{path.name} must give the exact command that runs it in its header"


def test_there_is_a_tiny_cpu_config():
    assert (REPO / "configs" / "tiny-cpu.yaml") in CONFIGS


def test_defaults_without_a_file():
    cfg = load_config(None)
    assert cfg.algorithm.group_size == 8 and cfg.run.seed == 0 and cfg.run.output_dir == "runs/default"


def test_default_output_folder_is_named_after_the_config_file(tmp_path):
    """Two configs without run.output_dir must not share a folder."""
    first, second = write(tmp_path, "", "exp-a.yaml"), write(tmp_path, "", "exp-b.yaml")
    assert load_config(first).run.output_dir == "runs/exp-a"
    assert load_config(second).run.output_dir == "runs/exp-b"
    assert load_config(first, ["run.output_dir=elsewhere"]).run.output_dir == "elsewhere"


def test_an_error_names_the_override_that_set_the_key(tmp_path):
    path = write(tmp_path, "algorithm:\n  group_size: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["run.seed=2", "algorithm.group_size=1"])
    assert str(err.value).startswith(f"{path} (override 'algorithm.group_size=1'): algorithm.group_size: 1 must")
    bad_file = write(tmp_path, "algorithm:\n  group_size: 1\n", "bad.yaml")
    with pytest.raises(ConfigError) as err:  # the same error from the file names the file alone
        load_config(bad_file, ["run.seed=2"])
    assert str(err.value).startswith(f"{bad_file}: algorithm.group_size: 1 must")
    with pytest.raises(ConfigError, match=r"\(override 'model=3'\): model: expected a mapping"):
        load_config(path, ["model=3"])


def test_a_check_of_several_keys_names_the_override_of_each_key_it_names(tmp_path):
    path = write(tmp_path, "algorithm:\n  prompts_per_step: 2\n  group_size: 4\n  mini_batches: 8\n")
    with pytest.raises(ConfigError) as err:  # mini_batches from the file no longer divides 2 x 2
        load_config(path, ["algorithm.group_size=2"])
    assert str(err.value).startswith(f"{path} (override 'algorithm.group_size=2'): algorithm.mini_batches: 8 must")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "run:\n  overwrite: true\n", "o.yaml"), ["run.resume=auto"])
    assert "(override 'run.resume=auto'): run.overwrite: true cannot go with run.resume=auto" in str(err.value)
    odd = write(tmp_path, "algorithm:\n  prompts_per_step: 2\n  group_size: 4\n  mini_batches: 3\n", "odd.yaml")
    with pytest.raises(ConfigError) as err:  # no key it names set by an override: the file alone
        load_config(odd, ["run.seed=3"])
    assert str(err.value).startswith(f"{odd}: algorithm.mini_batches: 3 must")


@pytest.mark.parametrize("override, allowed", [
    ("run.resume=yes", "never, auto (latest complete checkpoint in output_dir) or a checkpoint path"),
    ("run.wandb=true", "disabled, offline or online"),
])
def test_a_yaml_boolean_for_a_word_names_the_allowed_values(tmp_path, override, allowed):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, ""), [override])
    message = str(err.value)
    assert allowed in message and "YAML reads yes/no/on/off/true/false as booleans" in message, message


def test_cpu_bf16_flag_detection():
    assert not cpu_has_native_bf16("flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512bw\n")
    assert cpu_has_native_bf16("flags\t\t: avx512f avx512_bf16 avx512_vnni\n")
    assert cpu_has_native_bf16("flags\t\t: avx512f amx_bf16 amx_tile amx_int8\n")
    assert not cpu_has_native_bf16("flags\t\t: avx512_bf16x amx_bf16_future\n")  # whole flags only
    assert not cpu_has_native_bf16("")


@pytest.mark.parametrize("native, expected", [(True, ("bfloat16", "bf16")), (False, ("float32", "fp32"))])
def test_auto_precision_resolves_per_machine(tmp_path, monkeypatch, native, expected):
    monkeypatch.setattr("grpo_train.config.auto.native_bf16", lambda: native)
    cfg = load_config(write(tmp_path, "model:\n  dtype: auto\nlearner:\n  precision: auto\n  zero_stage: 1\n"))
    assert (cfg.model.dtype, cfg.learner.precision) == expected
    # an explicit value is kept whatever the machine; the two keys resolve independently
    cfg = load_config(None, ["model.dtype=bfloat16", "learner.precision=auto", "learner.zero_stage=1"])
    assert (cfg.model.dtype, cfg.learner.precision) == ("bfloat16", expected[1])
    # ZeRO stage 0 (FlatAdamW) takes either precision auto resolves to
    cfg = load_config(None, ["learner.precision=auto"])
    assert (cfg.learner.zero_stage, cfg.learner.precision) == (0, expected[1])


def test_yaml_holds_only_differences(tmp_path):
    cfg = load_config(write(tmp_path, "algorithm:\n  group_size: 16\n"))
    assert cfg.algorithm.group_size == 16
    assert cfg.algorithm.clip_eps == 0.2  # untouched default


def test_overrides_convert_types(tmp_path):
    cfg = load_config(
        write(tmp_path, "run:\n  seed: 3\n"),
        ["algorithm.group_size=4", "learner.lr=3e-6", "model.gradient_checkpointing=true",
         "rollout.stop=[a, b]", "run.output_dir=runs/x", "algorithm.kl_coef=0", "model.lora.rank=8"],
    )
    assert cfg.algorithm.group_size == 4
    assert cfg.learner.lr == pytest.approx(3e-6)
    assert cfg.model.gradient_checkpointing is True
    assert cfg.rollout.stop == ["a", "b"]
    assert cfg.run.output_dir == "runs/x"
    assert cfg.run.seed == 3
    assert isinstance(cfg.algorithm.kl_coef, float) and cfg.algorithm.kl_coef == 0.0  # int accepted for float
    assert cfg.model.lora.rank == 8


@pytest.mark.parametrize(
    "text, overrides, key",
    [
        ("algorithm:\n  group_sise: 8\n", [], "algorithm.group_sise"),  # unknown key
        ("algorithms:\n  group_size: 8\n", [], "algorithms"),  # unknown section
        ("algorithm:\n  group_size: eight\n", [], "algorithm.group_size"),  # wrong type
        ("algorithm:\n  group_size: 8.5\n", [], "algorithm.group_size"),  # float for int
        ("model:\n  gradient_checkpointing: 1\n", [], "model.gradient_checkpointing"),  # int for bool
        ("rollout:\n  stop: </s>\n", [], "rollout.stop"),  # scalar for list
        ("algorithm: 3\n", [], "algorithm"),  # scalar for section
        ("", ["algorithm.group_size=1"], "algorithm.group_size"),  # out of range
        ("", ["algorithm.clip_eps=0"], "algorithm.clip_eps"),
        ("", ["algorithm.clip_eps=-0.1"], "algorithm.clip_eps"),
        ("", ["algorithm.kl_coef=-0.01"], "algorithm.kl_coef"),
        ("", ["learner.zero_stage=4"], "learner.zero_stage"),
        ("", ["algorithm.advantage=ppo"], "algorithm.advantage"),  # not a choice
        ("", ["model.attn_implementation=flash"], "model.attn_implementation"),
        ("", ["rollout.max_tokens=4096"], "rollout.max_tokens"),  # beyond the model length
        ("", ["algorithm.mini_batches=3"], "algorithm.mini_batches"),  # does not divide the batch
        ("", ["run.nonsense=1"], "run.nonsense"),
        ("", ["learner.compile=true", "learner.zero_stage=3"], "learner.compile"),
        ("", ["learner.share_prompts=true", "model.attn_implementation=flash_attention_2"], "learner.share_prompts"),
        ("", ["algorithm.preset=ppo"], "algorithm.preset"),
        ("", ["algorithm.policy_loss=grpo"], "algorithm.policy_loss"),
        ("", ["algorithm.seq_correction=drop"], "algorithm.seq_correction"),
        ("", ["model.lora.rank=8", "model.lora.dropout=0.05"], "model.lora.dropout"),
        ("", ["algorithm.policy_loss=gspo", "algorithm.dual_clip=3"], "algorithm.dual_clip"),
        ("", ["algorithm.tis_cap=2", "algorithm.seq_correction=mask"], "algorithm.seq_correction"),
        ("", ["algorithm.tis_cap=2", "rollout.top_p=0.9"], "algorithm.tis_cap"),
        ("", ["algorithm.seq_correction=truncate", "rollout.top_k=20"], "algorithm.seq_correction"),
        ("", ["algorithm.seq_correction_low=1.5"], "algorithm.seq_correction_low"),
        ("", ["algorithm.cispo_weight_cap=0.5"], "algorithm.cispo_weight_cap"),
        ("", ["rollout.tensor_parallel_size=0"], "rollout.tensor_parallel_size"),
        ("", ["rollout.tensor_parallel_size=2", "rollout.engine=hf"], "rollout.tensor_parallel_size"),
    ],
)
def test_bad_config_names_the_key_and_file(tmp_path, text, overrides, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    assert key in str(err.value)
    assert str(path) in str(err.value)


def test_the_check_tables_name_known_keys_and_the_defaults_pass_them():
    """CHOICES and CHECKS are data: every row names a key of the tree, the defaults meet every row, a failing row's
    error is `<key>: <value> <requirement>`, and the loss code accepts exactly the modes validation lets through."""
    from grpo_train import algorithms
    from grpo_train.config import CHECKS, CHOICES

    keys = field_docs()
    assert set(CHOICES) <= set(keys) and {check.key for check in CHECKS} <= set(keys)
    cfg = Config()
    assert [key for key, allowed in CHOICES.items() if get_key(cfg, key) not in allowed] == []
    assert [check.key for check in CHECKS if not check.test(cfg)] == []
    with pytest.raises(ConfigError, match=r"'rollout.top_k=0'\): rollout.top_k: 0 must be -1 or >= 1$"):
        load_config(None, ["rollout.top_k=0"])
    assert algorithms.AGG_MODES is CHOICES["algorithm.loss_agg"]
    assert CHOICES["algorithm.seq_correction"] == (*algorithms.SEQ_CORRECTIONS, "auto")


@pytest.mark.parametrize(
    "overrides, unknown, hint",
    [
        # A key of another section: the same name where it lives.
        (["algorithm.lr=1e-5"], "algorithm.lr", "did you mean learner.lr?"),
        (["learner.seed=1"], "learner.seed", "did you mean data.synthetic.seed or run.seed?"),
        # TRL's names, in any section or none.
        (["algorithm.beta=0.04"], "algorithm.beta",
         "did you mean algorithm.kl_coef? (beta is TRL's name for algorithm.kl_coef)"),
        (["algorithm.num_generations=8"], "algorithm.num_generations",
         "did you mean algorithm.group_size? (num_generations is TRL's name for algorithm.group_size)"),
        (["num_generations=8"], "num_generations", "did you mean algorithm.group_size?"),
        (["learner.learning_rate=1e-6"], "learner.learning_rate", "did you mean learner.lr?"),
        (["algorithm.num_generation=8"], "algorithm.num_generation", "did you mean algorithm.group_size"),  # typo
        (["learner.per_device_train_batch_size=4"], "learner.per_device_train_batch_size",
         "did you mean learner.micro_batch_size? (per_device_train_batch_size is TRL's name for "
         "learner.micro_batch_size: sequences per forward/backward pass; a step's batch is"),
        # verl's dotted paths arrive as an unknown section; the whole path is named, and its override.
        (["actor_rollout_ref.rollout.n=8"], "actor_rollout_ref.rollout.n",
         "did you mean algorithm.group_size? (actor_rollout_ref.rollout.n is verl's name for algorithm.group_size)"),
        (["algorithm.kl_ctrl.kl_coef=0.001"], "algorithm.kl_ctrl.kl_coef",
         "did you mean algorithm.kl_coef? (algorithm.kl_ctrl.kl_coef is verl's name for algorithm.kl_coef: verl's "
         "KL penalty in the reward"),
        (["rollout.n=8"], "rollout.n", "did you mean algorithm.group_size?"),  # the end of verl's path
        (["data.max_response_length=512"], "data.max_response_length", "did you mean rollout.max_tokens?"),
        # A typo, also under a list entry.
        (["algorithm.group_sise=8"], "algorithm.group_sise", "did you mean algorithm.group_size or"),
        (["reward.functions=[{function: grpo_train.rewards:boxed_format, wieght: 2}]"],
         "reward.functions[0].wieght", "did you mean reward.functions[0].weight?"),
        (["run.nonsense=1"], "run.nonsense", ""),  # nothing near: the known keys only
    ],
)
def test_unknown_key_suggests_the_nearest_known_key(overrides, unknown, hint):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    message = str(err.value)
    # Where it was set (the override), the key, the suggestion, then the keys known where it was looked up.
    assert message.startswith(f"<defaults> (override {overrides[0]!r}): unknown key {unknown!r}"), message
    assert (f"{unknown!r}: {hint}" if hint else f"{unknown!r} (known: ") in message, message


def test_unknown_keys_in_a_file_name_the_file_and_every_suggestion(tmp_path):
    path = write(tmp_path, "algorithm:\n  beta: 0.04\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: unknown key 'algorithm.beta': did you mean"):
        load_config(path)
    # Under an unknown section every leaf with a suggestion gets its own.
    path.write_text("actor_rollout_ref:\n  rollout:\n    n: 8\n  actor:\n    optim:\n      lr: 1e-6\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(
        f"{path}: unknown key 'actor_rollout_ref': actor_rollout_ref.rollout.n: did you mean algorithm.group_size? "
        "(actor_rollout_ref.rollout.n is verl's name for algorithm.group_size); actor_rollout_ref.actor.optim.lr: "
        "did you mean learner.lr?"), err.value


def test_an_override_sets_an_entry_of_a_list(tmp_path):
    """`a.b[i].c=v` edits entry i of the file's list (or of the key's default list); the other entries stay."""
    path = write(tmp_path, "reward:\n  functions:\n    - {function: grpo_train.rewards:boxed_format, weight: 0.5}\n"
                 "    - {function: grpo_train.rewards:think_format, name: think}\n")
    cfg = load_config(path, ["reward.functions[1].function=grpo_train.rewards:length_penalty",
                             "reward.functions[1].kwargs={max_len: 64}", "reward.functions[0].weight=2",
                             "learner.adam_betas[1]=0.95"])
    assert [(f.function, f.weight, f.name) for f in cfg.reward.functions] == [
        ("grpo_train.rewards:boxed_format", 2.0, ""), ("grpo_train.rewards:length_penalty", 1.0, "think")]
    assert cfg.reward.functions[1].kwargs == {"max_len": 64}
    assert cfg.learner.adam_betas == [0.9, 0.95]  # an entry of a default list
    # A bad value under an entry names the entry's key and the override that set it.
    with pytest.raises(ConfigError, match=re.escape("(override 'reward.functions[0].weight=heavy'): "
                                                    "reward.functions[0].weight: expected float")):
        load_config(path, ["reward.functions[0].weight=heavy"])


@pytest.mark.parametrize("file, override, expected", [
    ("reward:\n  functions:\n    - {function: grpo_train.rewards:boxed_format}\n", "reward.functions[1].weight=2",
     "reward.functions[1].weight: index 1 is out of range: reward.functions has 1 entry"),
    ("", "reward.functions[0].function=pkg.mod:fn",
     "reward.functions[0].function: index 0 is out of range: reward.functions has 0 entries"),
    ("", "algorithm.group_size[0]=4", "algorithm.group_size[0]: algorithm.group_size is not a list"),
])
def test_a_list_index_out_of_range_names_the_key_and_the_lists_length(tmp_path, file, override, expected):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, file), [override])
    assert f"(override {override!r}): {expected}" in str(err.value), err.value
    assert "did you mean" not in str(err.value)  # not the same key suggested back


def test_aliases_name_our_keys_and_not_our_own_names():
    keys = field_docs()
    assert all(alias.key in keys for alias in ALIASES), [a for a in ALIASES if a.key not in keys]
    # An alias spelled as one of our keys would never be looked up; one listed twice says two things.
    assert not [a.name for a in ALIASES if a.name in keys]
    names = [(a.trainer, a.name) for a in ALIASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_sets_its_keys_and_explicit_keys_win(tmp_path, name):
    cfg = load_config(None, [f"algorithm.preset={name}"])
    for key, value in PRESETS[name].items():
        assert get_key(cfg, key) == value, key
    # A key in the YAML and a key on the command line both win over the preset; the report says which is which.
    path = write(tmp_path, "algorithm:\n  preset: " + name + "\n  loss_agg: seq_mean_token_mean\n")
    cfg = load_config(path, ["algorithm.kl_coef=0.01"])
    assert cfg.algorithm.loss_agg == "seq_mean_token_mean" and cfg.algorithm.kl_coef == 0.01
    report = preset_report(path, ["algorithm.kl_coef=0.01"])
    kept = report.splitlines()[-1]
    assert "set explicitly" in kept and "algorithm.kl_coef" in kept
    assert ("algorithm.loss_agg" in kept) == ("algorithm.loss_agg" in PRESETS[name])
    taken = [key for key in PRESETS[name] if key not in ("algorithm.kl_coef", "algorithm.loss_agg")]
    assert all(key in report.splitlines()[0] for key in taken)
    # The saved config holds the resolved values: it reloads to the same config.
    save_config(cfg, tmp_path / "saved.yaml")
    assert to_dict(load_config(tmp_path / "saved.yaml")) == to_dict(cfg)


def test_presets_are_the_published_recipes():
    dr_grpo = load_config(None, ["algorithm.preset=dr_grpo"]).algorithm
    assert (dr_grpo.advantage, dr_grpo.loss_agg) == ("dr_grpo", "seq_mean_token_sum_norm")
    dapo = load_config(None, ["algorithm.preset=dapo"]).algorithm
    assert (dapo.clip_eps, dapo.clip_eps_high, dapo.loss_agg, dapo.mask_truncated) == (0.2, 0.28, "token_mean", True)
    assert dapo.dynamic_sampling == "dapo"
    gspo = load_config(None, ["algorithm.preset=gspo"]).algorithm
    assert (gspo.policy_loss, gspo.gspo_clip_eps, gspo.gspo_clip_eps_high) == ("gspo", 3e-4, 4e-4)
    grpo = load_config(None, ["algorithm.preset=grpo"]).algorithm
    assert (grpo.loss_agg, grpo.kl_coef, grpo.kl_ratio_correction) == ("seq_mean_token_mean", 0.04, False)
    assert preset_report(None, []) == "" and preset_report(None, ["algorithm.group_size=4"]) == ""


@pytest.mark.parametrize("overrides, expected", [
    (["model.dtype=bfloat16"], "mask"),  # vLLM sampling in bf16
    (["learner.precision=bf16", "learner.zero_stage=1"], "mask"),  # learner in bf16
    ([], "none"),  # fp32 throughout
    (["model.dtype=bfloat16", "rollout.engine=hf"], "none"),
    (["model.dtype=bfloat16", "rollout.top_p=0.95"], "none"),  # the correction would be refused
    (["model.dtype=bfloat16", "algorithm.tis_cap=2"], "none"),  # token level chosen instead
    (["algorithm.seq_correction=truncate"], "truncate"),  # explicit
])
def test_auto_sequence_correction(overrides, expected):
    assert load_config(None, overrides).algorithm.seq_correction == expected


def test_missing_file_and_malformed_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(write(tmp_path, "algorithm:\n  group_size: [1, 2\n"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["algorithm.group_size"])


def test_yaml_is_loaded_safely(tmp_path):
    # A python object tag must not be constructed (yaml.load would run code here).
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(write(tmp_path, "run: !!python/object/apply:os.system ['true']\n"))


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(REPO / "configs" / "tiny-cpu.yaml", ["run.seed=7"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert to_dict(again) == to_dict(cfg)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["run"]["seed"] == 7


def test_every_field_has_a_doc():
    docs = field_docs()
    assert "algorithm.group_size" in docs and "run.output_dir" in docs and "run.seed" in docs
    missing = [k for k, d in docs.items() if not d]
    assert not missing, f"fields without a doc: {missing}"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo_train", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_cli_print_config_and_bad_override():
    ok = run_cli("--config", "configs/tiny-cpu.yaml", "--print-config", "algorithm.group_size=6")
    assert ok.returncode == 0, ok.stderr
    assert yaml.safe_load(ok.stdout)["algorithm"]["group_size"] == 6
    preset = run_cli("--config", "configs/tiny-cpu.yaml", "--print-config", "algorithm.preset=dapo",
                     "algorithm.clip_eps_high=0.3")
    assert yaml.safe_load(preset.stdout)["algorithm"]["mask_truncated"] is True
    assert "# algorithm.preset dapo: set explicitly, kept over the preset: algorithm.clip_eps_high" in preset.stdout
    bad = run_cli("--config", "configs/tiny-cpu.yaml", "algorithm.group_size=1")
    assert bad.returncode != 0
    assert "algorithm.group_size" in bad.stderr


@pytest.mark.parametrize("script", ["grpo-train", "grpo-eval"])
def test_console_scripts_show_help(script):
    exe = Path(sys.executable).parent / script
    assert exe.exists(), f"{script} is not installed next to {sys.executable} (run make install)"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "usage:" in out.stdout


def test_cli_accepts_the_deepspeed_launchers_local_rank():
    out = run_cli("--local_rank=0", "--config", "configs/tiny-cpu.yaml", "--print-config")
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["run"]["output_dir"] == "runs/tiny-cpu"


def test_max_staleness_needs_the_vllm_engine_and_an_off_policy_correction():
    """rollout.max_staleness k >= 1: seq_correction auto picks the token-level tis_cap 2 (k = 0 keeps its own rule);
    what cannot be corrected or paused is refused, naming the key."""
    cfg = load_config(None, ["rollout.max_staleness=1"])
    assert (cfg.algorithm.tis_cap, cfg.algorithm.seq_correction) == (2.0, "none")
    assert load_config(None, ["rollout.max_staleness=1", "algorithm.tis_cap=3"]).algorithm.tis_cap == 3.0
    assert load_config(None, ["rollout.max_staleness=2", "algorithm.seq_correction=mask"]).algorithm.tis_cap == 0.0
    assert load_config(None, []).algorithm.tis_cap == 0.0
    assert load_config(None, ["rollout.max_staleness=1", "algorithm.dynamic_sampling=dapo"]).rollout.max_staleness == 1
    auto = load_config(None, ["rollout.max_staleness=1", "algorithm.group_size=auto", "algorithm.rollouts_per_step=16"])
    assert auto.algorithm.group_size_auto and auto.rollout.max_staleness == 1  # each choice applies k steps later
    for overrides, message in [
        (["algorithm.seq_correction=none"], "needs an off-policy correction"),
        (["rollout.top_p=0.9"], "needs an off-policy correction"),
        (["rollout.engine=hf"], "needs rollout.engine vllm"),
    ]:
        with pytest.raises(ConfigError, match=f"rollout.max_staleness: 1 {message}"):
            load_config(None, ["rollout.max_staleness=1", *overrides])
    with pytest.raises(ConfigError, match="rollout.max_staleness: -1 must be >= 0"):
        load_config(None, ["rollout.max_staleness=-1"])


def test_rollout_servers_are_configured_or_refused_naming_the_key():
    """rollout.placement servers (grpo_train/rollout/servers.py): the keys parse, asynchronous rollouts included, and
    what cannot run is refused before anything loads."""
    cfg = load_config(None, ["rollout.placement=servers", "rollout.servers.urls=[http://node7:8000]",
                             "rollout.servers.timeout_s=30"])
    assert (cfg.rollout.placement, cfg.rollout.servers.urls, cfg.rollout.servers.timeout_s) == (
        "servers", ["http://node7:8000"], 30.0)
    assert load_config(None, []).rollout.placement == "colocated"
    assert load_config(None, ["rollout.placement=servers", "rollout.max_staleness=2"]).rollout.max_staleness == 2
    for overrides, message in [
        (["rollout.engine=hf"], "rollout.placement: 'servers' servers needs rollout.engine vllm"),
        (["rollout.servers.count=0"], "rollout.servers.count: 0 must be >= 1"),
        (["rollout.servers.urls=[node7:8000]"], "rollout.servers.urls: .* must be http://host:port addresses"),
        (["rollout.servers.urls=[http://a:1, http://a:1]"], "rollout.servers.urls: .* must not repeat a server"),
        (["rollout.servers.count=2", "rollout.servers.devices=[4, 5, 6]"],
         "rollout.servers.devices: .*servers.count \\* rollout.tensor_parallel_size CUDA device ids"),
        (["rollout.servers.urls=[http://a:1]", "rollout.servers.devices=[4]"],
         "rollout.servers.devices: .* leave it empty with rollout.servers.urls"),
        (["rollout.servers.timeout_s=0"], "rollout.servers.timeout_s: 0.0 must be > 0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["rollout.placement=servers", *overrides])
    with pytest.raises(ConfigError, match="rollout.placement: 'server' is not one of colocated, servers"):
        load_config(None, ["rollout.placement=server"])
