"""The config system: every shipped config validates; overrides convert types; bad input names its key."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_train.config import Config, ConfigError, cpu_has_native_bf16, field_docs, load_config, save_config, to_dict

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
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


def test_cpu_bf16_flag_detection():
    assert not cpu_has_native_bf16("flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512bw\n")
    assert cpu_has_native_bf16("flags\t\t: avx512f avx512_bf16 avx512_vnni\n")
    assert cpu_has_native_bf16("flags\t\t: avx512f amx_bf16 amx_tile amx_int8\n")
    assert not cpu_has_native_bf16("flags\t\t: avx512_bf16x amx_bf16_future\n")  # whole flags only
    assert not cpu_has_native_bf16("")


@pytest.mark.parametrize("native, expected", [(True, ("bfloat16", "bf16")), (False, ("float32", "fp32"))])
def test_auto_precision_resolves_per_machine(tmp_path, monkeypatch, native, expected):
    monkeypatch.setattr("grpo_train.config.native_bf16", lambda: native)
    cfg = load_config(write(tmp_path, "model:\n  dtype: auto\nlearner:\n  precision: auto\n  zero_stage: 1\n"))
    assert (cfg.model.dtype, cfg.learner.precision) == expected
    # an explicit value is kept whatever the machine; the two keys resolve independently
    cfg = load_config(None, ["model.dtype=bfloat16", "learner.precision=auto", "learner.zero_stage=1"])
    assert (cfg.model.dtype, cfg.learner.precision) == ("bfloat16", expected[1])
    # ZeRO stage 0 is refused with bf16, also when auto picks it (checked after auto is resolved)
    if native:
        with pytest.raises(ConfigError, match="learner.zero_stage: 0 with bf16"):
            load_config(None, ["learner.precision=auto"])
    else:
        assert load_config(None, ["learner.precision=auto"]).learner.zero_stage == 0


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
        ("", ["learner.precision=bf16"], "learner.zero_stage"),  # stage 0 (the default) with bf16
        ("", ["rollout.max_tokens=4096"], "rollout.max_tokens"),  # beyond the model length
        ("", ["algorithm.mini_batches=3"], "algorithm.mini_batches"),  # does not divide the batch
        ("", ["run.nonsense=1"], "run.nonsense"),
        ("", ["learner.compile=true", "learner.zero_stage=3"], "learner.compile"),
        ("", ["learner.share_prompts=true", "model.attn_implementation=flash_attention_2"], "learner.share_prompts"),
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
