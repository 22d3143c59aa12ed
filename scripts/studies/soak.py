"""A long tiny run under chaos: what a week on a shared cluster does to a run, in one script.

Each layout trains the tiny config for `--steps` steps (checkpoints every 10, run.keep_last 2) while a schedule of
faults hits it; after each fault the run is started again with `run.resume=auto`, as Slurm's requeue would:

    step 25   SIGTERM to the trainer (preemption, the time limit): expect exit 143 and the one resume line
    step 47   SIGKILL of the trainer (the node lost, Slurm's kill after the grace period): expect exit -9
    step 66   SIGKILL of a rollout server's process group (layout `servers` only): the run restarts it, goes on
    step 83   SIGKILL of the trainer, then the restart runs into a full disk (simulated: once it trains, the trainer's
              RLIMIT_FSIZE goes to 16 MiB, as tests/test_checkpoint.py does, under every checkpoint file's size and
              over the metrics file's): its first checkpoint save must fail with one line and leave the previous
              checkpoint intact; then the space is "freed" (a new attempt, without the limit) and the run resumes
              once more, to the end, uninterrupted

Afterwards, checked and written to runs/soak/soak.json (and printed as a table):
- every step's metric row exactly once (metrics.jsonl), samples likewise;
- no process left behind: every process the runs started carries an environment tag; after each attempt ends
  the script waits up to 60 s for all of them to be gone and counts the ones that are not;
- host memory flat after warm-up: memory/host_rss_gib (the trainer) and memory/host_children_rss_gib (vLLM's
  engine core, verifier workers, servers), growth from the first 20 to the last 20 of the last 200 steps (< 5%).
  A trainer process's resident memory climbs for its first ~160 steps here (the uninterrupted tiny run: 1.31 GiB
  at step 1, 1.58 from step 161 on), so the default 440 steps leave the last process (started at step 80, after the
  full disk) 160 steps of warm-up before the 200 measured;
- open files flat: memory/host_open_files over the same window;
- disk bounded: checkpoints on disk sampled every 0.5 s, at most run.keep_last + 1 (a new one is published before
  the oldest goes), and no temporary folder left after the full disk;
- with `--reference`, an uninterrupted run of the same layout, and whether the final weights are bit-identical.

    .venv/bin/python scripts/studies/soak.py                       # both layouts, 440 steps, with references
    .venv/bin/python scripts/studies/soak.py --layouts async --steps 120 --no-reference   # a quick look

Layouts: `async` (colocated vLLM, rollout.max_staleness 1) and `servers` (one rollout server the run starts,
rollout.max_staleness 1). Results of a run on this project's machine: docs/gpu-and-clusters.md#soak-under-chaos.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from grpo_train.metrics import read_jsonl  # noqa: E402

TINY = ROOT / "configs" / "tiny-cpu.yaml"
KEEP_LAST = 2
CHECKPOINT_EVERY = 10
DISK_LIMIT = 16 * 1024 * 1024  # bytes per file: the tiny model's weights are ~80 MB, metrics.jsonl < 2 MB
RUN = ["run.eval_size=0", "rollout.max_tokens=16", "algorithm.prompts_per_step=2", "algorithm.group_size=2",
       "reward.num_workers=1", "model.max_model_len=256", "rollout.cpu_kvcache_gb=0.125", "run.samples_every=10",
       f"run.checkpoint_every={CHECKPOINT_EVERY}", f"run.keep_last={KEEP_LAST}", "rollout.max_staleness=1"]
LAYOUTS = {"async": [], "servers": ["rollout.placement=servers", "rollout.servers.timeout_s=600"]}
# (step, fault): the fault hits once the metrics row of `step` is written.
SCHEDULE = [(25, "sigterm"), (47, "kill"), (66, "kill-server"), (83, "kill+disk-full")]
EXPECTED_EXIT = {"sigterm": 128 + signal.SIGTERM, "kill": -signal.SIGKILL, "kill+disk-full": -signal.SIGKILL}
TAG = "GRPO_SOAK_TAG"


# ----------------------------------------------------------------------------------------------------
# Processes


def tagged(tag: str) -> list[int]:
    """Every process whose environment carries the tag (children inherit it: vLLM's engine core, servers,
    verifier workers)."""
    found, needle = [], f"{TAG}={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours
            pass
    return found


def describe(pid: int) -> str:
    try:
        return f"{pid} " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return str(pid)


def wait_gone(tag: str, timeout_s: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [describe(pid) for pid in left]


def kill_all(tag: str) -> None:
    for pid in tagged(tag):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def ignore_file_size_signal() -> None:
    """preexec_fn of the full-disk attempt: past the file size limit a write then fails (EFBIG, as ENOSPC would)
    instead of the kernel killing the writer."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def fill_disk(pid: int) -> None:
    """The trainer's writes past DISK_LIMIT bytes per file are refused from now on. Set once the attempt is
    training, not at its start: the limit would also refuse the shared memory vLLM's engine core and a rollout
    server create (an artefact of the simulation: a full run folder leaves /dev/shm alone)."""
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (DISK_LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


# ----------------------------------------------------------------------------------------------------
# One attempt: the trainer from start (or resume) until it exits or the script's fault ends it


@dataclass
class Attempt:
    number: int
    fault: str | None  # what ended it (None: ran to its own end)
    exit_code: int | None = None
    seconds: float = 0.0
    last_lines: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, layout: str, steps: int, out: Path, chaos: bool):
        self.layout, self.steps, self.chaos = layout, steps, chaos
        self.run_dir = out / "run"
        self.out = out
        self.tag = f"{layout}-{uuid.uuid4().hex[:8]}"
        self.max_checkpoints = 0
        self.tmp_seen_after_disk_full: list[str] = []
        self.attempts: list[Attempt] = []

    def command(self, resume: bool) -> list[str]:
        return [sys.executable, "-m", "grpo_train", "--config", str(TINY), *RUN, *LAYOUTS[self.layout],
                f"run.steps={self.steps}", f"run.output_dir={self.run_dir}", *(["run.resume=auto"] if resume else [])]

    def last_step(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return 0
        try:
            return max((row.get("step", 0) for row in read_jsonl(path)), default=0)
        except (ValueError, json.JSONDecodeError):  # a line being written
            return 0

    def checkpoints(self) -> list[str]:
        root = self.run_dir / "checkpoints"
        return sorted(p.name for p in root.glob("step-*")) if root.exists() else []

    def attempt(self, faults: list[tuple[int, str]], disk_full: bool = False) -> Attempt:
        """Start (or resume) the trainer and inject `faults` in order, each once its step's row is written."""
        number = len(self.attempts) + 1
        log = self.out / f"attempt-{number}.log"
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
        env |= {TAG: self.tag, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}  # this checkout's package
        started = time.monotonic()
        with open(log, "w") as f:
            process = subprocess.Popen(self.command(resume=number > 1), stdout=f, stderr=subprocess.STDOUT, env=env,
                                       cwd=ROOT, start_new_session=True,
                                       preexec_fn=ignore_file_size_signal if disk_full else None)
        result = Attempt(number, ", ".join(f"{fault} at {step}" for step, fault in faults) or
                         ("disk-full" if disk_full else None))
        faults, resumed_at, filled = list(faults), self.last_step(), False
        while process.poll() is None:
            self.max_checkpoints = max(self.max_checkpoints, len(self.checkpoints()))
            if disk_full and not filled and self.last_step() > resumed_at:  # training: the next save meets it
                fill_disk(process.pid)
                filled = True
            if faults and self.last_step() >= faults[0][0]:
                self.inject(faults.pop(0)[1], process, result)
            time.sleep(0.5)
        result.exit_code = process.returncode
        result.seconds = round(time.monotonic() - started, 1)
        result.last_lines = log.read_text(errors="replace").strip().splitlines()[-3:]
        result.left_behind = wait_gone(self.tag)
        kill_all(self.tag)  # whatever was left, so that the next attempt starts clean
        self.attempts.append(result)
        print(f"  [{self.layout}] attempt {number} ({result.fault or 'to the end'}): exit {result.exit_code} after "
              f"{result.seconds:.0f} s, at step {self.last_step()}", flush=True)
        return result

    def inject(self, fault: str, process: subprocess.Popen, result: Attempt) -> None:
        print(f"  [{self.layout}] step {self.last_step()}: {fault}", flush=True)
        if fault == "sigterm":
            process.send_signal(signal.SIGTERM)
        elif fault in ("kill", "kill+disk-full"):
            process.kill()
        elif fault == "kill-server":
            leaders = []
            for server_log in sorted(self.run_dir.glob("rollout_server_*.log")):
                leaders += [int(p) for p in re.findall(r"Started server process \[(\d+)\]", server_log.read_text())]
            if not leaders:
                result.problems.append("no rollout server found to kill")
                return
            try:
                os.killpg(leaders[-1], signal.SIGKILL)
            except OSError as err:
                result.problems.append(f"killing the server's group failed: {err}")

    # ------------------------------------------------------------------------------------------------

    def run(self) -> dict:
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        started = time.monotonic()
        pending: list[tuple[int, str]] = []
        for step, fault in SCHEDULE if self.chaos else []:
            if fault == "kill-server":
                if self.layout == "servers":
                    pending.append((step, fault))  # the run goes on: the attempt continues to the next fault
                continue
            attempt = self.attempt([*pending, (step, fault)])
            pending = []
            if attempt.exit_code != EXPECTED_EXIT[fault]:
                attempt.problems.append(f"exit code {attempt.exit_code}, expected {EXPECTED_EXIT[fault]}")
            if fault == "kill+disk-full":
                self.disk_full_attempt()
        final = self.attempt(pending)
        if final.exit_code != 0:
            final.problems.append(f"the last attempt exited {final.exit_code}: {final.last_lines[-1:]}")
            return {"layout": self.layout, "seconds": round(time.monotonic() - started),
                    "problems": [p for a in self.attempts for p in a.problems]}
        return self.report(time.monotonic() - started)

    def disk_full_attempt(self) -> None:
        before = self.checkpoints()
        attempt = self.attempt([], disk_full=True)
        line = attempt.last_lines[-1] if attempt.last_lines else ""
        if attempt.exit_code in (0, None) or "failed" not in line:
            attempt.problems.append(f"the full disk did not stop the run with one line (exit {attempt.exit_code}: "
                                    f"{line!r})")
        after = self.checkpoints()
        if not after or after[-1] != before[-1]:
            attempt.problems.append(f"checkpoints before {before}, after {after}: the previous one is not the newest")
        leftovers = [p.name for p in (self.run_dir / "checkpoints").glob(".*")]
        if leftovers:
            attempt.problems.append(f"left in checkpoints/: {leftovers}")

    # ------------------------------------------------------------------------------------------------

    def report(self, seconds: float) -> dict:
        rows = [r for r in read_jsonl(self.run_dir / "metrics.jsonl") if r.get("step", 0) > 0]
        steps = [r["step"] for r in rows]
        missing = sorted(set(range(1, self.steps + 1)) - set(steps))
        duplicated = sorted({s for s in steps if steps.count(s) > 1})
        samples = [r["step"] for r in read_jsonl(self.run_dir / "samples.jsonl")] \
            if (self.run_dir / "samples.jsonl").exists() else []
        sample_steps = sorted(set(samples))
        samples_duplicated = [s for s in sample_steps if samples.count(s) != samples.count(sample_steps[0])]
        by_step = {r["step"]: r for r in rows}
        window = [by_step[s] for s in range(self.steps - 199, self.steps + 1) if s in by_step]

        def growth(key: str) -> dict:
            values = [r[key] for r in window if key in r]
            if len(values) < 40:
                return {"first": None, "last": None, "growth": None}
            first, last = statistics.mean(values[:20]), statistics.mean(values[-20:])
            return {"first": round(first, 4), "last": round(last, 4), "max": round(max(values), 4),
                    "growth": round(last / first - 1, 4) if first else None}

        memory = {key: growth(key) for key in ("memory/host_rss_gib", "memory/host_children_rss_gib",
                                               "memory/host_open_files")}
        left = [p for a in self.attempts for p in a.left_behind]
        result = {
            "layout": self.layout, "steps": self.steps, "chaos": self.chaos, "seconds": round(seconds),
            "attempts": [a.__dict__ for a in self.attempts],
            "rows_missing": missing, "rows_duplicated": duplicated, "sample_steps_duplicated": samples_duplicated,
            "processes_left_behind": left, "memory_last_200_steps": memory,
            "max_checkpoints_on_disk": self.max_checkpoints, "checkpoints_at_end": self.checkpoints(),
            "problems": [f"attempt {a.number}: {p}" for a in self.attempts for p in a.problems],
        }
        rss = memory["memory/host_rss_gib"]["growth"]
        if missing or duplicated or samples_duplicated:
            result["problems"].append(f"rows missing {missing[:10]}, duplicated {duplicated[:10]}")
        if left:
            result["problems"].append(f"{len(left)} processes left behind")
        if rss is None or rss >= 0.05:
            result["problems"].append(f"resident memory grew {rss} over the last 200 steps")
        if self.max_checkpoints > KEEP_LAST + 1:
            result["problems"].append(f"{self.max_checkpoints} checkpoints on disk at once (keep_last {KEEP_LAST})")
        return result


# ----------------------------------------------------------------------------------------------------


def final_weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    ckpt = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    weights = {}
    for path in sorted((ckpt / "hf_model").glob("*.safetensors")):
        weights.update(load_file(path))
    return weights


def same_weights(a: Path, b: Path) -> tuple[bool, float]:
    import torch

    wa, wb = final_weights(a), final_weights(b)
    if wa.keys() != wb.keys():
        return False, float("inf")
    diff = max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)
    return all(torch.equal(wa[k], wb[k]) for k in wa), diff


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    p.add_argument("--steps", type=int, default=440)
    p.add_argument("--no-reference", action="store_true", help="skip the uninterrupted runs")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "soak")
    return p


def main() -> int:
    args = parser().parse_args()
    if args.steps < 120:
        parser().error("--steps: at least 120 (the faults end at step 90, then 200 steps are measured at best)")
    results = []
    for layout in args.layouts:
        print(f"{layout}: {args.steps} steps under chaos", flush=True)
        result = Soak(layout, args.steps, args.out / layout, chaos=True).run()
        if not args.no_reference:
            print(f"{layout}: the uninterrupted reference", flush=True)
            reference = Soak(layout, args.steps, args.out / f"{layout}-reference", chaos=False).run()
            result["reference_seconds"] = reference["seconds"]
            result["reference_problems"] = reference["problems"]
            if not reference["problems"]:  # a reference that did not finish has no final weights to compare
                equal, diff = same_weights(args.out / layout / "run", args.out / f"{layout}-reference" / "run")
                result["final_weights_bit_identical_to_uninterrupted"] = equal
                result["final_weights_max_abs_diff"] = diff
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "attempts"}, indent=1), flush=True)
        (args.out / "soak.json").write_text(json.dumps(results, indent=1) + "\n")  # after each layout
    print(f"\n{'layout':8s} {'steps':>5s} {'attempts':>8s} {'lost':>4s} {'dup':>4s} {'procs':>5s} {'rss growth':>10s} "
          f"{'fds':>9s} {'ckpts':>5s} {'same weights':>12s}  problems")
    for r in results:
        if "memory_last_200_steps" not in r:  # did not finish
            print(f"{r['layout']:8s} did not finish: {'; '.join(r['problems'])}")
            continue
        mem = r["memory_last_200_steps"]
        fds = mem["memory/host_open_files"]
        print(f"{r['layout']:8s} {r['steps']:5d} {len(r['attempts']):8d} {len(r['rows_missing']):4d} "
              f"{len(r['rows_duplicated']):4d} {len(r['processes_left_behind']):5d} "
              f"{mem['memory/host_rss_gib']['growth']!s:>10s} {fds['first']!s:>4s}-{fds['max']!s:<4s} "
              f"{r['max_checkpoints_on_disk']:5d} {r.get('final_weights_bit_identical_to_uninterrupted', '-')!s:>12s}  "
              f"{'; '.join(r['problems']) or 'none'}")
    print(f"wrote {args.out / 'soak.json'}")
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
