"""The console: one greppable line per step, and library logs quiet by default but never silenced for real warnings."""

import logging
import os

import pytest
from helpers.metrics_doc import undocumented_metrics

from grpo_train.config import load_config
from grpo_train.metrics import (
    KNOWN_HARMLESS,
    NO_SPREAD_STEPS,
    MetricsLogger,
    NoSpreadWarning,
    configure_library_logs,
)


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
    assert "stale" not in line  # synchronous: no staleness in the row, none on the line


def test_an_asynchronous_step_line_shows_the_staleness(tmp_path, capfd):
    """rollout.max_staleness >= 1: the trained tokens' mean staleness (rollout/staleness_mean) on the step line."""
    logger = MetricsLogger(load_config(None, [f"run.output_dir={tmp_path}"]), tmp_path, rank=0)
    logger.log(7, {"reward/mean": 0.5, "train/completion_len_mean": 40.0, "rollout/staleness_mean": 0.625,
                   "rollout/staleness_max": 1.0, "perf/step_s": 3.0})
    (line,) = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert line.split() == ["step", "7", "reward", "0.5", "len", "40", "stale", "0.625", "s/step", "3"], line



def test_steps_without_any_reward_spread_are_named_once_after_five_in_a_row(tmp_path, capfd):
    """Every group's G rewards equal (reward/zero_variance 1): advantages, loss and gradient 0. After NO_SPREAD_STEPS
    such steps in a row, one line on what to check; a step with spread starts the count again."""
    logger = MetricsLogger(load_config(None, [f"run.output_dir={tmp_path}"]), tmp_path, rank=0)
    watch = NoSpreadWarning(logger)
    flat = {"reward/mean": 0.0, "reward/zero_variance": 1.0, "train/loss": 0.0, "train/grad_norm": 0.0}
    for step in range(1, 5):
        watch.check(step, flat)
    watch.check(5, {**flat, "reward/zero_variance": 0.75})  # one group in four had spread
    for step in range(6, 10):
        watch.check(step, flat)
    assert NO_SPREAD_STEPS == 5 and capfd.readouterr().err == ""  # 4 steps, spread, 4 steps
    watch.check(10, flat)
    (line,) = capfd.readouterr().err.splitlines()
    assert line.startswith("warning: no reward spread in any group for 5 steps (steps 6-10, reward/mean 0): "), line
    assert all(what in line for what in ("reward function", "verifier", "answer format", "rollout.temperature"))
    for step in range(11, 30):
        watch.check(step, flat)
    assert capfd.readouterr().err == ""  # once per streak
    # Dynamic sampling found mixed groups in its extra rounds: the update learns from them.
    kept = NoSpreadWarning(logger, steps=1)
    kept.check(1, {**flat, "train/dynamic_kept_groups": 2.0})
    assert capfd.readouterr().err == ""
    kept.check(2, {**flat, "train/dynamic_kept_groups": 0.0})
    assert "no reward spread in any group for 1 steps" in capfd.readouterr().err


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


def test_the_metrics_page_matches_names_and_placeholders():
    assert undocumented_metrics(["reward/fn/length_penalty/timeout", "eval/category/add_sub_2", "ustat/c1_low",
                                 "train/seq_masked_frac", "perf/step_s"]) == []
    assert undocumented_metrics(["reward/timeouts", "train/new_thing", "eval/fn/x/y/z"]) == [
        "eval/fn/x/y/z", "reward/timeouts", "train/new_thing"]


def test_a_task_scored_only_by_reward_functions_shows_no_accuracy(tmp_path, capfd):
    """data.kind none: the verifier scores nothing, so the trainer logs no accuracy; the eval lines show the
    functions' means."""
    logger = MetricsLogger(load_config(None, [f"run.output_dir={tmp_path}", "data.kind=none"]), tmp_path, rank=0)
    before = {"eval/completion_len": 12.0, "eval/fn/countdown": 0.208, "eval/fn/countdown/error": 0.0}
    logger.log(0, before)
    logger.log(2, {"reward/mean": 0.4, "eval/completion_len": 9.0, "eval/fn/countdown": 0.522})
    assert logger.eval_summary(before) == "fn/countdown 0.208"
    logger.eval_report(100)
    err = capfd.readouterr().err
    assert "acc" not in err.replace("eval:", "") and "fn/countdown" in err and "0.208 -> 0.522" in err, err


# ----------------------------------------------------------------------------------------------------
# curves.png: the panels follow what the run logged


def custom_task_rows() -> list[dict]:
    """metrics.jsonl of a short data.kind none run (no accuracy) with two reward functions, a reference model and
    evals."""
    rows = [{"step": 0, "eval/completion_len": 30.0, "eval/fn/countdown": 0.2, "eval/fn/countdown/error": 0.0,
             "eval/fn/solved": 0.0}]
    for s in range(1, 4):
        rows.append({"step": s, "reward/mean": 0.1 * s, "reward/fn/countdown": 0.1 * s,
                     "reward/fn/countdown/error": 0.0, "reward/fn/solved": 0.01 * s, "reward/fn/solved/timeout": 0.0,
                     "train/completion_len_mean": 30.0,
                     "train/kl": 0.001 * s, "train/entropy": 1.0 - 0.1 * s,
                     "train/grad_norm": None if s == 2 else 0.5})  # null: a skipped step's NaN
    rows[-1].update({"eval/completion_len": 20.0, "eval/fn/countdown": 0.5, "eval/fn/solved": 0.06})
    return rows


def test_curves_of_a_task_scored_only_by_reward_functions():
    from grpo_train.plot import figure, panels

    rows = custom_task_rows()
    assert panels(rows) == [
        ("reward (mean)", ["reward/mean"]),
        ("reward functions (mean value, before weight)", ["reward/fn/countdown", "reward/fn/solved"]),
        ("completion length (tokens)", ["train/completion_len_mean"]),
        ("KL to the reference (per token)", ["train/kl"]),
        ("entropy (per token)", ["train/entropy"]),
        ("gradient norm (before clipping)", ["train/grad_norm"]),
        ("held-out reward functions (greedy)", ["eval/fn/countdown", "eval/fn/solved"])]
    fig = figure(rows)
    drawn = [ax for ax in fig.axes if ax.get_title()]
    assert len(drawn) == 7 and not any("accuracy" in ax.get_title() for ax in fig.axes)
    assert len(fig.axes) == 8 and not fig.axes[7].axison  # 2 rows of 4: the last place left empty
    for ax in drawn:  # steps are whole numbers on every axis (3 steps: matplotlib would tick at 0.5, 1.5, ...)
        assert all(float(tick).is_integer() for tick in ax.get_xticks()), (ax.get_title(), ax.get_xticks())
    functions = drawn[1]
    assert sorted(t.get_text() for t in functions.get_legend().get_texts()) == ["countdown", "solved"]


def test_curves_of_a_math_task_keep_accuracy_and_leave_out_what_was_not_logged():
    from grpo_train.plot import panels

    rows = [{"step": 0, "eval/accuracy": 0.2, "eval/category/division": 0.1}]
    rows += [{"step": s, "reward/mean": 0.1 * s, "reward/accuracy": 0.1 * s, "train/completion_len_mean": 20 + s,
              "train/entropy": 0.9, "train/grad_norm": 1.0} for s in range(1, 4)]
    titles = [title for title, _ in panels(rows)]
    # No reward function, no reference model (no train/kl): no panel for them.
    assert titles == ["reward (mean)", "train accuracy", "completion length (tokens)", "entropy (per token)",
                      "gradient norm (before clipping)", "held-out greedy accuracy"]
    assert panels(rows)[-1][1] == ["eval/accuracy", "eval/category/division"]


# ----------------------------------------------------------------------------------------------------
# The end of a run: each reward function's failure rate


def test_the_failure_summary_names_each_failing_function_with_its_rate():
    from grpo_train.metrics import failure_lines

    rows = [{"step": 0, "eval/fn/ok/error": 0.0, "eval/fn/flaky/error": 0.5, "eval/fn/flaky/timeout": 0.0}]
    rows += [{"step": s, "reward/fn/ok/error": 0.0, "reward/fn/ok/timeout": 0.0, "reward/fn/flaky/error": e,
              "reward/fn/flaky/timeout": t, "reward/fn/slow/error": 0.0, "reward/fn/slow/timeout": 0.125}
             for s, (e, t) in enumerate([(0.25, 0.0), (0.375, 0.125), (0.25, 0.0)], start=1)]
    # flaky: failed 0.25, 0.5, 0.25 of the steps' calls: mean 1/3, worst 0.5; errors (0.25 + 0.375 + 0.25) / 3.
    assert failure_lines(rows, 0.5) == [
        "reward function flaky: failed on 33.3% of its calls in training (errors 29.2%, timeouts 4.2%; worst step "
        "50.0%, the run stops above reward.max_failure_fraction 0.5) and 50.0% of its calls in eval",
        "reward function slow: failed on 12.5% of its calls in training (errors 0.0%, timeouts 12.5%; worst step "
        "12.5%, the run stops above reward.max_failure_fraction 0.5)"]
    assert failure_lines([{"step": 1, "reward/fn/ok/error": 0.0}], 0.5) == []  # nothing failed: nothing said


def test_the_first_prompts_are_saved_as_the_model_sees_them(tmp_path, capfd):
    logger = MetricsLogger(load_config(None, [f"run.output_dir={tmp_path}"]), tmp_path, rank=0)
    logger.prompts([("t:1", "<|system|>Be brief.\n<|user|>2 + 2?\n<|assistant|>", 14), ("t:2", "3 + 3?", 9)],
                   "data.template chat")
    text = (tmp_path / "prompts.txt").read_text()
    assert "<|system|>Be brief.\n<|user|>2 + 2?\n<|assistant|>\n# ---- end of problem t:1's prompt" in text
    assert "# ---- problem t:2: 9 tokens ----\n3 + 3?\n" in text and "(data.template chat)" in text
    assert f"prompts: the first 2 as the model sees them (9-14 tokens) in {tmp_path / 'prompts.txt'}" in \
        capfd.readouterr().err


def test_curves_of_an_asynchronous_run_show_the_staleness_and_its_histogram():
    from grpo_train.plot import figure, panels

    rows = [{"step": s, "reward/mean": 0.1, "rollout/staleness_mean": 0.5 * (s > 1), "rollout/staleness_max": s > 1,
             "rollout/staleness_frac/0": 1.0 - 0.5 * (s > 1), "rollout/staleness_frac/1": 0.5 * (s > 1),
             "train/behaviour_weight/0": 1.0, **({"train/behaviour_weight/1": 0.9} if s > 1 else {})}
            for s in range(1, 4)]
    assert panels(rows)[1:] == [
        ("trained tokens' staleness (weight versions)", ["rollout/staleness_mean", "rollout/staleness_max"]),
        ("trained tokens by staleness (fraction)", ["rollout/staleness_frac/0", "rollout/staleness_frac/1"]),
        ("behaviour weight by staleness (mean)", ["train/behaviour_weight/0", "train/behaviour_weight/1"])]
    histogram = [ax for ax in figure(rows).axes if ax.get_title().startswith("trained tokens by")][0]
    assert sorted(t.get_text() for t in histogram.get_legend().get_texts()) == ["0", "1"]
    assert "staleness" not in str(panels([{"step": 1, "reward/mean": 0.1}]))  # a synchronous run: no such panels
