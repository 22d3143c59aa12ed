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
    assert r["measured_steps"] == 2 and r["trained_tokens"] == (10 + 20 + 30) * 8
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
