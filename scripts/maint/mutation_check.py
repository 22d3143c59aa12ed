"""The mutation check: deliberate breakages of the core features, each applied to a scratch copy of the repository,
and the tests that should catch it run there. A breakage that no test catches is a feature the suite does not
guard: a test can stay green with its feature gone.

    make mutation-check                                          # every breakage, then the table (11 min, 2 cores)
    .venv/bin/python scripts/maint/mutation_check.py --only pool-prefix,fused-head
    .venv/bin/python scripts/maint/mutation_check.py --list      # the breakages and the tests named for each
    .venv/bin/python scripts/maint/mutation_check.py --working-tree   # the uncommitted edits too (default: HEAD)

Not in CI. The scratch copy is HEAD (`git archive`), or with --working-tree the files git tracks or would track as
they are on disk; it runs with this venv, its own grpo_train/ first on PYTHONPATH. Every breakage's old text must
occur exactly once in its file, or the check stops before running anything (the code moved: update the list). First
the named tests run on the unbroken copy and must pass (--no-baseline skips that: 5.4 of the 11 min, two
pytest-xdist workers); then each breakage in turn, its tests only (one process). Caught: a named test failed.
Survived: all passed (strengthen the test named for it). An error (a test not found, a collection error) is
neither. Exit status 1 unless every breakage was caught.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 900  # one pytest run (the baseline runs every named test)


@dataclass(frozen=True)
class Breakage:
    name: str
    what: str  # the feature it breaks
    path: str  # relative to the repository root
    old: str  # occurs exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest node ids: a file, or file::test (with [params])


POOL_TESTS = ("tests/test_rollout_pool.py",
              "tests/test_rollout.py::test_the_pool_on_vllm_trains_whole_groups_with_their_versions")
FUSED_TESTS = tuple(f"tests/test_fused_logprobs.py::{t}" for t in (
    "test_tiny_model_fused_equals_reference_with_gradients",
    "test_qwen25_vocabulary_fused_equals_reference_with_gradients",
    "test_lora_fused_equals_reference_and_adapters_off"))

BREAKAGES = (
    Breakage("pool-prefix", "partial rollouts: a paused request resumed without its generated prefix",
             "grpo_train/rollout/async_pool.py",
             '{completion.resumed}", group.prompt_ids + completion.tokens,',
             '{completion.resumed}", group.prompt_ids,',
             POOL_TESTS),
    Breakage("pool-budget", "partial rollouts: a resumed request given the whole token budget again",
             "grpo_train/rollout/async_pool.py",
             "max_tokens=self.spec.max_tokens - len(completion.tokens))",
             "max_tokens=self.spec.max_tokens)",
             POOL_TESTS),
    Breakage("pool-staleness", "the colocated pool's staleness bound: deadlines up to k + 1 steps ahead",
             "grpo_train/rollout/async_pool.py",
             "for d in range(step, step + self.bound + 1)}",
             "for d in range(step, step + self.bound + 2)}",
             ("tests/test_rollout_pool.py", "tests/test_pace.py")),
    Breakage("server-staleness", "the server pool's staleness bound: a token k + 1 versions old let through",
             "grpo_train/rollout/async_pool.py",
             "if versions and min(versions) < oldest:",
             "if versions and min(versions) < oldest - 1:",
             ("tests/test_server_pool.py::test_a_token_older_than_the_staleness_bound_is_an_error",)),
    Breakage("version-spans", "the server's version labels: spans that cover only part of a completion accepted",
             "grpo_train/rollout/server_pool.py",
             "    if len(versions) != tokens:",
             "    if len(versions) > tokens:",
             ("tests/test_server_pool.py::test_version_spans_that_do_not_cover_the_completion_are_errors",)),
    Breakage("behaviour-weight", "the decoupled objective's behaviour weight pi_prox / pi_behav: always 1",
             "grpo_train/algorithms.py",
             "        weight = ratio.clamp(max=tis_cap)\n        events.update(tis_weight_mean=weight,",
             "        weight = torch.ones_like(ratio)\n        events.update(tis_weight_mean=weight,",
             ("tests/test_algorithms_variants.py::test_mismatch_weights_worked_example",
              "tests/test_async.py::test_async_run_keeps_staleness_within_k_and_resumes_exactly")),
    Breakage("fused-head", "the fused log-prob head: never taken (the reference path instead)",
             "grpo_train/forward.py",
             "    if not fused and not select_in_head:\n",
             "    if not select_in_head:\n",
             FUSED_TESTS),
    Breakage("fused-head-backward", "the fused log-prob head's backward: the hidden states' gradient halved",
             "grpo_train/logprob_kernels.py",
             "torch.mm(grad_logits, weight, out=grad_hidden[chunk])",
             "torch.mm(0.5 * grad_logits, weight, out=grad_hidden[chunk])",
             FUSED_TESTS),
    Breakage("token-budget", "token-budget micro-batches: a row added past the budget",
             "grpo_train/micro_batches.py",
             "if current and count([*current, row], prompt_lens, completion_lens) > budget:",
             "if current and count(current, prompt_lens, completion_lens) > budget:",
             ("tests/test_micro_batches.py",)),
    Breakage("weight-sync", "the weight sync into vLLM: the MLP down projections skipped",
             "grpo_train/rollout/engines.py",
             'kwargs={"weights_iterator": iter(named_tensors), "is_checkpoint_format": True})',
             'kwargs={"weights_iterator": (t for t in named_tensors if "down_proj" not in t[0]),'
             ' "is_checkpoint_format": True})',
             ("tests/test_rollout.py::test_plain_update_eos_and_truncation",)),
    Breakage("resume-rng", "checkpoint resume: the RNG state not restored",
             "grpo_train/checkpoint.py",
             "            set_rng_state(json.loads(rng_file.read_text()))",
             "            json.loads(rng_file.read_text())",
             ("tests/test_checkpoint.py::test_trainer_state_keeps_sampler_position_and_skip_counter",)),
    Breakage("hedge", "the verifier's hedge rule: a second value offered after the answer ignored",
             "grpo_train/verifier/hedge.py",
             "    text, pos = _plain_after(text, pos), 0\n",
             "    return False\n",
             ("tests/test_verifier_attacks.py::test_adversarial_suite_category[hedge]",)),
    Breakage("attack-cases", "the attack suite: a category's cases not loaded",
             "tests/cases/verifier_attacks.py",
             "*BAD_GOLD, *COST, *RECALL, *COMMIT, *SPELLING, *REASONING]",
             "*BAD_GOLD, *COST, *RECALL, *COMMIT, *SPELLING]",
             ("tests/test_verifier_attacks.py::test_the_suite_loads_every_case_of_every_category",)),
    Breakage("normaliser-ranks", "the loss normaliser: this rank's tokens instead of the sum over ranks",
             "grpo_train/learner.py",
             "normaliser = max(1.0, all_reduce_sum(algorithms.loss_normaliser(mask, a.loss_agg, "
             "self.cfg.rollout.max_tokens)))",
             "normaliser = max(1.0, algorithms.loss_normaliser(mask, a.loss_agg, self.cfg.rollout.max_tokens))",
             ("tests/test_learner_losses.py::test_two_ranks_log_the_global_loss_and_take_the_naive_gradient",)),
    Breakage("gpu-check-decode", "the GPU check's decode item: the decode step's model call removed",
             "grpo_train/gpu_check.py",
             "                out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)\n",
             "                pass  # no model call: the timed region is empty\n",
             ("tests/test_gpu_check.py::test_cpu_dry_run_trains_measures_throughput_and_times_decode_steps",)),
    Breakage("slurm-placement", "the split layout's placement: the learner's step no longer kept off the rollout node",
             "scripts/launch/slurm_split.sbatch",
             'srun --nodes="$learner_nodes" --ntasks-per-node=1 --exclude="$rollout_node"',
             'srun --nodes="$learner_nodes" --ntasks-per-node=1',
             ("tests/test_cluster.py::test_slurm_split_script_serves_on_the_first_node_and_trains_on_the_others",)),
    Breakage("packing", "packed sequences: one segment, so each sees the ones before it in its row",
             "grpo_train/forward.py",
             "            segments += [seq] * length\n",
             "            segments += [0] * length\n",
             ("tests/test_packing.py::test_packed_sequences_never_see_each_other",)),
    Breakage("flat-sum", "FlatAdamW's bf16 fold: each micro-batch's gradients replace the fp32 sum instead of adding",
             "grpo_train/flat_optimizer.py",
             "                self.master.grad.add_(self.grads)\n",
             "                self.master.grad.copy_(self.grads)\n",
             ("tests/test_learner.py::test_bf16_updates_follow_the_fp32_updates[0]",)),
)


# ----------------------------------------------------------------------------------------------------
def scratch_copy(dest: Path, working_tree: bool) -> None:
    """The repository at HEAD, or its working tree's files (tracked or not ignored, as on disk), under `dest`."""
    if not working_tree:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a tracked file deleted on disk is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


def check_breakages(scratch: Path, breakages: list[Breakage]) -> None:
    """Every old text exactly once in its file: else stop, naming them (the code moved)."""
    moved = []
    for b in breakages:
        path = scratch / b.path
        count = path.read_text().count(b.old) if path.is_file() else 0
        if count != 1:
            moved.append(f"{b.name}: {b.path} holds its old text {count} times (expected once): {b.old.strip()!r}")
    if moved:
        sys.exit("mutation check: update these breakages (the code moved):\n  " + "\n  ".join(moved))


def pytest(scratch: Path, tests: list[str], workers: int = 0) -> tuple[int, list[str], str, float]:
    """The tests in the scratch copy: (exit status, the FAILED summary lines, the output's tail, seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env |= {"PYTHONPATH": str(scratch), "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "240"}
    parallel = ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *parallel, *tests]
    started = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        text = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else err.stdout or ""
        return -1, [], f"timed out after {RUN_TIMEOUT_S} s\n{text[-2000:]}", time.perf_counter() - started
    text = out.stdout + out.stderr
    failed = [line for line in text.splitlines() if line.startswith("FAILED ")]
    return out.returncode, failed, text[-3000:], time.perf_counter() - started


def imports_from(scratch: Path) -> Path:
    env = dict(os.environ, PYTHONPATH=str(scratch))
    out = subprocess.run([sys.executable, "-c", "import grpo_train; print(grpo_train.__file__)"], cwd="/", env=env,
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def caught_by(failed: list[str]) -> tuple[str, str]:
    """From pytest's FAILED lines: the failed tests (file::test, parameters left out) and the first one's error."""
    nodes = [line.removeprefix("FAILED ").partition(" - ") for line in failed]
    tests = dict.fromkeys(re.sub(r"^tests/|\.py(?=::)|\[.*$", "", node) for node, _, _ in nodes)
    return ", ".join(tests), (nodes[0][2][:110] if nodes else "")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", help="comma-separated breakage names")
    p.add_argument("--list", action="store_true", help="list the breakages and their tests, run nothing")
    p.add_argument("--working-tree", action="store_true", help="copy the working tree (default: HEAD)")
    p.add_argument("--no-baseline", action="store_true", help="skip running the tests on the unbroken copy")
    p.add_argument("--baseline-workers", type=int, default=2, help="pytest-xdist workers for the baseline")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    breakages = list(BREAKAGES)
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {b.name for b in BREAKAGES}
        if unknown:
            sys.exit(f"mutation check: unknown breakages {sorted(unknown)}; --list names them")
        breakages = [b for b in BREAKAGES if b.name in names]
    if args.list:
        for b in breakages:
            print(f"{b.name:20} {b.what}\n{'':20} {b.path}; tests: {', '.join(b.tests)}")
        return 0

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as tmp:
        scratch = Path(tmp)
        scratch_copy(scratch, args.working_tree)
        check_breakages(scratch, breakages)
        where = imports_from(scratch)
        if scratch not in where.parents:
            sys.exit(f"mutation check: grpo_train imports from {where}, not from the scratch copy {scratch}")
        print(f"scratch copy of {'the working tree' if args.working_tree else 'HEAD'} at {scratch}; "
              f"{len(breakages)} breakages", flush=True)
        if not args.no_baseline:
            tests = list(dict.fromkeys(t for b in breakages for t in b.tests))
            status, failed, tail, seconds = pytest(scratch, tests, args.baseline_workers)
            print(f"baseline: {len(tests)} selections, exit status {status} in {seconds:.0f} s", flush=True)
            if status != 0:
                sys.exit(f"mutation check: the named tests fail without any breakage: {caught_by(failed)[0]}\n"
                         f"{tail}")
        rows = []
        for b in breakages:
            path = scratch / b.path
            original = path.read_text()
            path.write_text(original.replace(b.old, b.new))
            try:
                status, failed, tail, seconds = pytest(scratch, list(b.tests))
            finally:
                path.write_text(original)
            result = "caught" if status == 1 and failed else "SURVIVED" if status == 0 else f"error ({status})"
            rows.append((b, result, failed, seconds))
            tests, error = caught_by(failed)
            print(f"{b.name}: {result} in {seconds:.0f} s by {tests or '-'}: {error}", flush=True)
            if result.startswith("error"):
                print(tail, flush=True)
    total = time.perf_counter() - started

    print("\n| breakage | what it breaks | result | caught by (the first one's error) | s |\n|---|---|---|---|---|")
    for b, result, failed, seconds in rows:
        tests, error = caught_by(failed)
        print(f"| {b.name} | {b.what} | {result} | {tests or '-'} ({error}) | {seconds:.0f} |")
    missed = [b.name for b, result, _, _ in rows if result != "caught"]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} breakages caught in {total / 60:.1f} min"
          + (f"; not caught: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
