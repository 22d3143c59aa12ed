"""Rollout servers lost mid-run: each scenario trains the tiny config on rollout servers, kills a server's
whole process group with SIGKILL once step `--kill-after` is logged, and reports whether the run finished, how long
the step that met the loss took against the others, the sync log-prob gap after every transfer (the servers have the
learner's weights again), and the lines the run printed about it.

    .venv/bin/python scripts/studies/server_faults.py                      # all three scenarios (~6 min on 2 cores)
    .venv/bin/python scripts/studies/server_faults.py --scenarios others

Scenarios:
- `restart`: one server the run starts; rollout.servers.on_failure wait (the default) restarts it.
- `url`: one server started beside the run with `grpo-train serve-rollout` (a rollout node's server), given to the
  run by URL; this script starts it again on the same port 5 s after the kill, as a supervisor (Slurm's loop in
  scripts/launch/slurm_split.sbatch) would; the run waits for it.
- `others`: two servers the run starts, rollout.servers.on_failure others: the lost one's requests go to the other.

Writes runs/server-faults/<scenario>/ and runs/server-faults/faults.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from grpo_train.distributed import free_port  # noqa: E402
from grpo_train.metrics import read_jsonl  # noqa: E402
from grpo_train.rollout.server_launch import await_health  # noqa: E402

BIN = Path(sys.executable).parent
SCENARIOS = ("restart", "url", "others")


def _leaders(log: Path) -> list[int]:
    """The process groups a server log's starts lead (uvicorn's line names the API server)."""
    if not log.exists():
        return []
    return [int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", log.read_text())]


def scenario(name: str, config: Path, steps: int, kill_after: int, out: Path) -> dict:
    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    overrides = ["rollout.placement=servers", f"run.steps={steps}", "run.check_sync_every=1", "run.eval_size=0",
                 f"run.output_dir={run_dir / 'run'}", "rollout.servers.timeout_s=300"]
    outside, outside_log, port = None, run_dir / "server.log", free_port()
    serve = [str(BIN / "grpo-train"), "serve-rollout", "--config", str(config), "--host", "127.0.0.1", "--port",
             str(port)]
    if name == "url":
        outside = subprocess.Popen(serve, stdout=outside_log.open("a"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        if not await_health(f"http://127.0.0.1:{port}", 300):
            raise SystemExit(f"the rollout server on port {port} did not answer /health within 300 s")
        overrides.append(f"rollout.servers.urls=[http://127.0.0.1:{port}]")
    elif name == "others":
        overrides += ["rollout.servers.count=2", "rollout.servers.on_failure=others"]
    server_log = outside_log if name == "url" else run_dir / "run" / (
        "rollout_server_1.log" if name == "others" else "rollout_server_0.log")
    command = [str(BIN / "grpo-train"), "--config", str(config), *overrides]
    started = time.perf_counter()
    with (run_dir / "stdout.txt").open("w") as stdout:
        run = subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT, cwd=ROOT)
        killed_at = None
        try:
            while run.poll() is None:
                time.sleep(0.2)
                rows = [r for r in read_jsonl(run_dir / "run" / "metrics.jsonl") if "train/loss" in r]
                if killed_at is None and len(rows) >= kill_after:
                    os.killpg(_leaders(server_log)[-1], signal.SIGKILL)
                    killed_at = time.perf_counter() - started
                    if outside is not None:  # a supervisor starts it again on its port
                        outside.wait()
                        time.sleep(5)
                        outside = subprocess.Popen(serve, stdout=outside_log.open("a"), stderr=subprocess.STDOUT,
                                                   start_new_session=True)
        finally:
            if outside is not None:
                os.killpg(outside.pid, signal.SIGTERM)
                outside.wait()
    wall = time.perf_counter() - started
    text = (run_dir / "stdout.txt").read_text()
    rows = [r for r in read_jsonl(run_dir / "run" / "metrics.jsonl") if "train/loss" in r]
    lost_steps = [r["step"] for r in rows if r.get("rollout/servers_lost")]
    others = [r["perf/step_s"] for r in rows if r["step"] not in lost_steps and r["step"] > 1]
    return {
        "scenario": name, "returncode": run.returncode, "wall_s": round(wall, 1),
        "killed_at_s": None if killed_at is None else round(killed_at, 1),
        "steps_logged": len(rows), "lost_at_steps": lost_steps,
        "lost_step_s": [round(r["perf/step_s"], 2) for r in rows if r["step"] in lost_steps],
        "other_steps_s_median": round(statistics.median(others), 2) if others else None,
        "sync_gap_max": max((r.get("train/sync_logprob_max_diff", float("nan")) for r in rows), default=None),
        "notes": [line for line in text.splitlines() if "rollout server" in line or "on_failure" in line][:6],
    }


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny-cpu.yaml")
    p.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--kill-after", type=int, default=2, help="kill once this many steps are logged")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "server-faults")
    return p


def main() -> None:
    args = parser().parse_args()
    results = [scenario(name, args.config, args.steps, args.kill_after, args.out) for name in args.scenarios]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "faults.json").write_text(json.dumps(results, indent=1) + "\n")
    print("| scenario | finished | steps | loss at step | that step s | other steps s (median) | max sync gap |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['scenario']} | {'yes' if r['returncode'] == 0 else 'NO'} | {r['steps_logged']} | "
              f"{r['lost_at_steps']} | {r['lost_step_s']} | {r['other_steps_s_median']} | {r['sync_gap_max']:.1e} |")
    for r in results:
        print(f"\n{r['scenario']}:", *r["notes"], sep="\n  ")


if __name__ == "__main__":
    main()
