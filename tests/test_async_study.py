"""scripts/studies/async_study.py and decode_cost.py: the figures they compute from a run's metrics and from timed
engine steps (the runs themselves are the studies', not tests)."""

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "studies"))
import async_study  # noqa: E402
import decode_cost  # noqa: E402


def _run(folder: Path, steps: list[dict], evals: dict[int, float]) -> Path:
    folder.mkdir(parents=True)
    rows = [{"step": s, "eval/accuracy": a} for s, a in evals.items()]
    rows += [{"step": i + 1, "train/loss": 0.0, **row} for i, row in enumerate(steps)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.yaml").write_text(yaml.safe_dump({"algorithm": {"prompts_per_step": 2, "group_size": 4}}))
    return folder


def test_a_runs_figures_leave_out_the_warm_up_and_count_decode_steps_by_k(tmp_path):
    sync = _run(tmp_path / "k0", [
        {"perf/step_s": 9.0, "perf/rollout_s": 8.0, "train/completion_len_mean": 10.0, "train/completion_len_max": 50},
        {"perf/step_s": 3.0, "perf/rollout_s": 2.0, "train/completion_len_mean": 20.0, "train/completion_len_max": 40},
        {"perf/step_s": 5.0, "perf/rollout_s": 4.0, "train/completion_len_mean": 30.0, "train/completion_len_max": 60},
    ], {0: 0.1, 3: 0.4})
    r = async_study.result(sync, warmup=1)
    assert r["measured_steps"] == 2 and r["trained_tokens"] == (10 + 20 + 30) * 8 and r["completions_per_step"] == 8
    assert r["rollout_s_per_1k_tokens"] == pytest.approx(1000 * 6.0 / ((20 + 30) * 8), abs=1e-4)
    assert r["mean_step_s"] == 4.0 and r["engine_idle_s"] == 1.0  # k = 0: all but the rollout
    assert r["decode_steps"] == 50.0  # k = 0: a synchronous batch decodes to its longest completion
    assert (r["accuracy_before"], r["accuracy_after"]) == (0.1, 0.4)

    pooled = _run(tmp_path / "k1", [
        {"perf/step_s": 9.0, "perf/rollout_s": 8.0, "train/completion_len_mean": 10.0, "train/completion_len_max": 50,
         "rollout/engine_steps": 70, "perf/engine_idle_s": 1.0, "rollout/staleness_mean": 0.0},
        {"perf/step_s": 1.0, "perf/rollout_s": 0.0, "train/completion_len_mean": 20.0, "train/completion_len_max": 40,
         "rollout/engine_steps": 0, "perf/engine_idle_s": 0.5, "rollout/staleness_mean": 1.0},
        {"perf/step_s": 7.0, "perf/rollout_s": 6.0, "train/completion_len_mean": 30.0, "train/completion_len_max": 60,
         "rollout/engine_steps": 64, "perf/engine_idle_s": 0.7, "rollout/staleness_mean": 0.0},
    ], {})
    r = async_study.result(pooled, warmup=1)
    assert r["decode_steps"] == 32.0  # the pool's own count, not the longest completion
    assert r["engine_idle_s"] == pytest.approx(0.6) and r["staleness_mean"] == pytest.approx(1 / 3, abs=1e-3)
    assert r["accuracy_after"] is None


def test_the_long_tail_settings_are_named_and_kept_apart():
    args = async_study.parser().parse_args(["--long-tail"])
    assert args.long_tail == "demo" and async_study.LONG_TAIL["demo"] == ["rollout.max_tokens=256"]
    assert async_study.parser().parse_args(["--long-tail", "chat", "--seeds", "0"]).long_tail == "chat"
    assert async_study.parser().parse_args([]).long_tail is None
    with pytest.raises(SystemExit):
        async_study.parser().parse_args(["--long-tail", "poetry"])


def test_the_decode_cost_fit_recovers_a_line_and_its_intercept():
    points = [(b, 0.012 + 0.0007 * b) for b in (1, 4, 16, 64, 128) for _ in range(3)]
    a, c = decode_cost.fit(points)
    assert a == pytest.approx(0.012) and c == pytest.approx(0.0007)
    a, c = decode_cost.fit([(1, 0.010), (1, 0.012), (3, 0.014), (3, 0.016)])  # noise: the least-squares line
    assert a == pytest.approx(0.009) and c == pytest.approx(0.002)


def _work(pool: bool, steps: list[tuple[int, int, int]]) -> list[dict]:
    """Steps (decode steps, tokens, resumed) timed by a known line: 15 ms a decode step, 0.9 ms a token, 8 ms a
    resumed request, 0.2 s for generate or 0.1 s for the pool."""
    return [{"pool": pool, "decode_steps": d, "tokens": t, "resumed": r,
             "rollout_s": 0.015 * d + 0.0009 * t + 0.008 * r + (0.1 if pool else 0.2)} for d, t, r in steps]


def test_the_cost_fit_recovers_the_line_splits_each_k_and_bounds_a_full_pool(tmp_path):
    sync = _work(False, [(50, 1900, 0), (40, 1800, 0), (90, 2100, 0), (45, 1700, 0)])
    pool = _work(True, [(30, 2000, 20), (35, 1900, 30), (20, 1700, 10), (40, 2200, 25)])
    fit = async_study.cost_fit(sync + pool)
    assert fit["decode_step_s"] == pytest.approx(0.015) and fit["token_s"] == pytest.approx(0.0009)
    assert fit["resumed_s"] == pytest.approx(0.008) and fit["r2"] == pytest.approx(1.0)
    assert (fit["sync_s"], fit["pool_s"]) == (pytest.approx(0.2), pytest.approx(0.1))
    split = async_study.parts(fit, pool)
    assert split["resumed_s"] == pytest.approx(0.008 * 21.25) and split["constant_s"] == pytest.approx(0.1)
    assert sum(v for key, v in split.items() if key != "measured_s") == pytest.approx(split["measured_s"])
    # k = 0's 1,875 tokens a step in full steps of 128, nothing resumed, against k = 0's fitted 2.6875 s
    best = 0.015 * 1875 / 128 + 0.0009 * 1875 + 0.1
    assert async_study.ceiling(fit, sync, 128) == pytest.approx(best / (0.015 * 56.25 + 0.0009 * 1875 + 0.2))
    assert async_study.ceiling(fit, sync, 256) < async_study.ceiling(fit, sync, 128) < 1

    # every step decoded to the limit (k = 0: 256 decode steps, the pool: 128): a decode step's cost cannot be told
    # from the constants
    with pytest.raises(ValueError, match="do not determine"):
        async_study.cost_fit(_work(False, [(256, t, 0) for t in (1000, 1100, 1200, 1300)])
                             + _work(True, [(128, t, r) for t, r in ((900, 20), (1000, 30), (1200, 10), (950, 25))]))


def test_engine_work_reads_a_runs_steps_by_k(tmp_path):
    rows = [{"perf/step_s": 3.0, "perf/rollout_s": 2.0, "train/completion_len_mean": 20.0,
             "train/completion_len_max": 40}] * 2
    sync = async_study.engine_work(_run(tmp_path / "k0", rows, {}), warmup=1)
    assert sync == [{"pool": False, "decode_steps": 40, "tokens": 160.0, "resumed": 0, "rollout_s": 2.0}]
    pooled = async_study.engine_work(_run(tmp_path / "k1", [
        {**rows[0], "rollout/engine_steps": 31, "rollout/phase_tokens": 150, "rollout/resumed": 4}] * 3, {}), warmup=1)
    assert len(pooled) == 2 and pooled[0] == {"pool": True, "decode_steps": 31, "tokens": 150, "resumed": 4,
                                              "rollout_s": 2.0}


def test_the_hindsight_errors_are_those_of_the_best_constant_and_of_the_mean():
    spans = [(1, 10.0), (1, 10.0), (1, 10.0), (1, 30.0), (2, 20.0)]  # per step 10, 10, 10, 30, 10
    assert async_study.hindsight_error(spans) == pytest.approx(0.0, abs=1e-3)  # 10 s a step fits 4 of 5 exactly
    mean = (10 * 3 + 30 + 20) / 6
    assert async_study.hindsight_error(spans, mean=True) == pytest.approx((mean - 10) / 10)
