"""The console: one greppable line per step, and library logs quiet by default but never silenced for real warnings."""

import logging
import os
import re
from pathlib import Path

import pytest

from grpo_train.config import load_config
from grpo_train.metrics import KNOWN_HARMLESS, MetricsLogger, configure_library_logs


def test_a_step_line_is_one_line_in_a_redirected_log(tmp_path, capfd):
    cfg = load_config(None, [f"run.output_dir={tmp_path}"])
    logger = MetricsLogger(cfg, tmp_path, rank=0)
    metrics = {"reward/mean": 0.123456, "reward/accuracy": 0.5, "train/loss": -0.0123456, "train/kl": 0.000123456,
               "train/grad_norm": 12.3456, "train/completion_len_mean": 123.456, "perf/step_s": 123.456,
               "eval/accuracy": 0.987654}
    logger.log(12345, metrics)
    err = capfd.readouterr().err  # a pipe, not a terminal: rich would wrap at 80 columns
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert len(line) > 80 and line.startswith("step 12345") and line.rstrip().endswith("eval_acc 0.9877"), err



def test_user_text_is_printed_as_written(tmp_path, capfd):
    """A reward function's error or a folder name with brackets or colons is not read as rich markup or emoji
    codes (a closing tag crashed the run; "[lr=1e-4]" vanished from the printed path)."""
    logger = MetricsLogger(load_config(None, [f"run.output_dir={tmp_path}"]), tmp_path, rank=0)
    for text in ("warning: reward function tagged: ValueError: no closing [/answer] tag in the completion",
                 "moved the earlier run in runs/sweep[lr=1e-4] to runs/sweep[lr=1e-4].replaced-1 :smile: [bold]x"):
        logger.print(text)
        assert capfd.readouterr().err.strip() == text

@pytest.fixture
def library_logging():
    """configure_library_logs changes process-wide logging; put it back."""
    names = ("vllm", "DeepSpeed", "transformers")
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).filters[:], logging.getLogger(n).level,
                 logging.getLogger(n).propagate) for n in names}
    env = {k: os.environ.get(k) for k in ("VLLM_CONFIGURE_LOGGING", "GRPO_TRAIN_LOG_LEVEL")}
    for key in ("VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_CONFIG_PATH", "GRPO_TRAIN_LOG_LEVEL"):
        os.environ.pop(key, None)
    yield
    for name, (handlers, filters, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.filters[:], logger.propagate = handlers, filters, propagate
        logger.setLevel(level)
    for key, value in env.items():
        os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def vllm_lines(capfd) -> list[str]:
    logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").warning(
        "%s: Failed to load weights", "RotaryEmbedding")
    loader = logging.getLogger("vllm.model_executor.models.utils")
    loader.warning("Attempted to load weight %s with dtype %s into parameter with dtype %s", "model.norm.weight",
                   "torch.float32", "torch.bfloat16")  # the rounding model.dtype asks for: harmless
    loader.warning("Attempted to load weight %s with dtype %s into parameter with dtype %s", "model.norm.weight",
                   "torch.bfloat16", "torch.float16")  # can overflow: stays
    logging.getLogger("vllm.platforms.cpu").warning(
        "Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'.", "none")  # no Mamba layers
    logging.getLogger("vllm.v1.worker.cpu_worker").warning("KV cache is too small: out of blocks")
    logging.getLogger("vllm.engine.arg_utils").info("non-default args: {}")
    return [line for line in capfd.readouterr().out.splitlines() if line.strip()]


def test_default_level_drops_known_harmless_lines_and_keeps_real_warnings(library_logging, capfd):
    assert configure_library_logs("warning") == "warning"
    assert vllm_lines(capfd) == [
        "vllm.model_executor.models.utils WARNING: Attempted to load weight model.norm.weight with dtype "
        "torch.bfloat16 into parameter with dtype torch.float16",
        "vllm.v1.worker.cpu_worker WARNING: KV cache is too small: out of blocks"]
    assert os.environ["VLLM_CONFIGURE_LOGGING"] == "0"  # vLLM leaves its logger to us


def test_info_level_and_the_environment_variable_show_everything(library_logging, capfd, monkeypatch):
    monkeypatch.setenv("GRPO_TRAIN_LOG_LEVEL", "info")
    assert configure_library_logs("warning") == "info"
    lines = vllm_lines(capfd)
    assert len(lines) == 6 and "RotaryEmbedding: Failed to load weights" in lines[0]


def test_a_users_own_vllm_logging_settings_are_left_alone(library_logging, capfd, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    vllm_logger = logging.getLogger("vllm")
    before = (vllm_logger.handlers[:], vllm_logger.level)
    configure_library_logs("warning")
    assert "VLLM_CONFIGURE_LOGGING" not in os.environ and (vllm_logger.handlers, vllm_logger.level) == before


def test_every_known_harmless_line_is_explained_in_the_troubleshooting_docs():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text()
    missing = [text for text in KNOWN_HARMLESS if text not in page]
    assert not missing, f"docs/troubleshooting.md does not explain: {missing}"


def test_a_bad_level_in_the_environment_is_named(library_logging, monkeypatch):
    from grpo_train.config import ConfigError

    monkeypatch.setenv("GRPO_TRAIN_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError, match="GRPO_TRAIN_LOG_LEVEL: 'loud' is not one of warning, info, debug"):
        configure_library_logs("warning")


METRICS_DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def documented_metric_patterns() -> list[re.Pattern]:
    """docs/metrics.md's tables name keys in backticks in their first column: `<placeholder>` parts, `/x` siblings
    (replacing the previous key's last part) and `_low`-style suffixes (added to each key of the cell)."""
    patterns = []
    for row in METRICS_DOC.read_text().splitlines():
        if not row.startswith("| `"):
            continue
        names: list[str] = []
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if name.startswith("/"):
                names.append(names[-1].rsplit("/", 1)[0] + name)
            elif name.startswith("_"):
                names += [n + name for n in names if not n.endswith(("_low", "_high"))]
            else:
                names.append(name)
        patterns += [re.compile("[^/]+".join(map(re.escape, re.split(r"<[^>]+>", n)))) for n in names]
    return patterns


def undocumented_metrics(keys) -> list[str]:
    """The keys docs/metrics.md does not list."""
    patterns = documented_metric_patterns()
    return sorted(k for k in keys if not any(p.fullmatch(k) for p in patterns))


def test_the_metrics_page_matches_names_and_placeholders():
    assert undocumented_metrics(["reward/fn/length_penalty/timeout", "eval/category/add_sub_2", "ustat/c1_low",
                                 "train/seq_masked_frac", "perf/step_s"]) == []
    assert undocumented_metrics(["reward/timeouts", "train/new_thing", "eval/fn/x/y/z"]) == [
        "eval/fn/x/y/z", "reward/timeouts", "train/new_thing"]


def test_a_task_scored_only_by_reward_functions_shows_no_accuracy(tmp_path, capfd):
    """data.kind none: the verifier scores nothing, so accuracy (always 0) is left off; the functions' means show."""
    logger = MetricsLogger(load_config(None, [f"run.output_dir={tmp_path}", "data.kind=none"]), tmp_path, rank=0)
    before = {"eval/accuracy": 0.0, "eval/fn/countdown": 0.208, "eval/fn/countdown/error": 0.0}
    logger.log(0, before)
    logger.log(2, {"reward/mean": 0.4, "reward/accuracy": 0.0, "eval/accuracy": 0.0, "eval/fn/countdown": 0.522})
    assert logger.eval_summary(before) == "fn/countdown 0.208"
    logger.eval_report(100)
    err = capfd.readouterr().err
    assert "acc" not in err.replace("eval:", "") and "fn/countdown" in err and "0.208 -> 0.522" in err, err
