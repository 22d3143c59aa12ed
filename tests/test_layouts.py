"""scripts/studies/layouts.py: the step-time model by layout, its check against runs' metrics, its GPU projection."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "studies"))
import layouts  # noqa: E402


def test_the_model_overlaps_only_on_split_devices():
    terms = {"G": 8.0, "L": 6.0, "S": 0.5, "O": 0.5, "R": 0.2, "X": 1.0}
    assert layouts.step_time("colocated-sync", **terms, devices=2) == pytest.approx(4 + 0.5 + 3 + 0.2 + 0.5)
    assert layouts.step_time("colocated-async", **terms, tail=0.25, devices=2) == pytest.approx(3 + 0.5 + 3 + 0.7)
    assert layouts.step_time("split-sync", **terms, gen=1, learn=3) == pytest.approx(8 + 0.5 + 2 + 1 + 0.5)
    # async on split devices: the longer of generation and the learner's side, then the transfer (servers paused)
    assert layouts.step_time("split-async", **terms, gen=1, learn=3) == pytest.approx(8 + 1)
    assert layouts.step_time("split-async", **terms, gen=4, learn=1) == pytest.approx(0.5 + 6 + 0.5 + 1)
    with pytest.raises(ValueError, match="unknown layout"):
        layouts.step_time("sideways", **terms)


def _run(folder: Path, steps: list[dict]) -> None:
    folder.mkdir(parents=True)
    rows = [{"step": i + 1, "train/loss": 0.0, **row} for i, row in enumerate(steps)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_check_calibrates_on_the_colocated_runs_and_predicts_the_split_ones(tmp_path):
    def phases(step, rollout, learn, sync, transfer=0.0):
        return {"perf/step_s": step, "perf/rollout_s": rollout, "perf/logprobs_s": learn / 2,
                "perf/update_s": learn / 2, "perf/reward_s": 0.1, "perf/sync_s": sync,
                "perf/transfer_bytes": transfer}

    warm = phases(99.0, 50.0, 40.0, 1.0)  # a warm-up step: left out
    _run(tmp_path / "colocated-sync" / "run", [warm, phases(4.6, 2.0, 2.4, 0.1), phases(4.6, 2.0, 2.4, 0.1)])
    _run(tmp_path / "colocated-async" / "run", [warm, phases(4.1, 1.5, 2.4, 0.1)])
    _run(tmp_path / "split-sync" / "run", [warm, phases(5.0, 2.3, 2.4, 0.2, transfer=5e7)])
    _run(tmp_path / "split-async" / "run", [warm, phases(3.0, 0.3, 2.4, 0.2, transfer=5e7)])
    result = layouts.check(tmp_path, warmup=1)
    by_layout = {r["layout"]: r for r in result["layouts"]}
    assert result["terms"]["G"] == pytest.approx(2.0) and result["terms"]["tail"] == pytest.approx(0.25)
    assert result["transfer_gb_s"] == pytest.approx(0.05 / 0.2)
    for layout in ("colocated-sync", "colocated-async"):  # the calibration
        assert by_layout[layout]["predicted_s"] == pytest.approx(by_layout[layout]["measured_s"], abs=1e-3)
    assert by_layout["split-sync"]["predicted_s"] == pytest.approx(2.0 + 0.1 + 2.4 + 0.2 + 0.0, abs=1e-3)
    assert by_layout["split-async"]["predicted_s"] == pytest.approx(max(1.5, 0.1 + 2.4 + 0.0) + 0.2, abs=1e-3)
    assert by_layout["split-async"]["error"] == pytest.approx(2.7 / 3.0 - 1, abs=1e-3)


@pytest.mark.parametrize("model", sorted(layouts.MODELS))
def test_the_projection_tries_every_split_and_names_the_fastest(model):
    args = layouts.parser().parse_args(["--project", model, "--gpus", "8"])
    result = layouts.project(args)
    splits = {(r["gen_gpus"], r["learn_gpus"]) for r in result["rows"] if r["layout"] == "split-async"}
    assert splits == {(g, 8 - g) for g in range(1, 8)}
    assert result["best"]["step_s"] == min(r["step_s"] for r in result["rows"])
    # More GPUs for generation never make a synchronous split's generation slower (the decode model is monotone).
    gen = [layouts.generation_s(layouts.MODELS[model], g, False, 0.9) for g in range(1, 9)]
    assert all(a >= b for a, b in zip(gen, gen[1:], strict=False))
