"""Training runs as a user starts them, and their metrics rows (used by tests/test_trainer.py and
tests/test_ustat_trainer.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs" / "tiny-cpu.yaml"


def run_env() -> dict[str, str]:
    # A learner test in this pytest process may have set these for its own world of one; a child run must
    # pick its own (or torchrun's), not collide on the same MASTER_PORT.
    inherited = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    return {k: v for k, v in os.environ.items() if k not in inherited} | {"PYTHONUNBUFFERED": "1"}


def run(args: list[str], launcher: list[str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = (launcher or [sys.executable]) + ["-m", "grpo_train", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout, env=run_env())
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return out


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_rows(run_dir: Path) -> list[dict]:
    return [r for r in rows(run_dir) if "train/loss" in r]
