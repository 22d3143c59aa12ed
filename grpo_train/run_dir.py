"""The run folder: claimed by rank 0 at start, never overwritten or deleted unless the config says so.

    run_dir, note = prepare_run_dir(cfg)     # refuses a folder holding a run unless run.resume / run.overwrite
    check_shared_folder(run_dir, rank, world)  # every rank sees the folder rank 0 prepared (one shared filesystem)
    save_run_config(cfg, run_dir, rank)      # once start-up has passed: from then on the folder holds this run

A run that is replaced (`run.overwrite`) is moved aside to `<folder>.replaced-<time>`, not deleted. A start that
fails before the config is saved leaves no empty folder behind (`remove_if_left_empty`, called by the cli).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
from pathlib import Path

import torch.distributed as dist

from grpo_train import checkpoint
from grpo_train.config import Config, save_config
from grpo_train.metrics import METRICS_FILE


class RunDirError(RuntimeError):
    """The run folder cannot be used (not writable, or holds a run that would be lost)."""


def run_contents(run_dir: Path) -> list[str]:
    """What a fresh start in `run_dir` would lose: metric rows and checkpoints (a config.yaml alone, left by a run
    that failed at start, is not a run)."""
    held = []
    metrics = run_dir / METRICS_FILE
    rows = sum(1 for line in metrics.open() if line.strip()) if metrics.is_file() else 0
    if rows:
        held.append(f"{rows} row{'s' if rows > 1 else ''} of {METRICS_FILE}")
    names = [p.name for p in checkpoint.list_checkpoints(run_dir)]
    if names:
        held.append(f"checkpoints {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}")
    return held


def move_aside(run_dir: Path) -> Path:
    """Rename `run_dir` to `<run_dir>.replaced-<time>[-k]` (never deleted) and create it again, empty."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}")
    k = 1
    while target.exists():
        k += 1
        target = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}-{k}")
    run_dir.rename(target)
    run_dir.mkdir()
    return target


def prepare_run_dir(cfg: Config) -> tuple[Path, str | None]:
    """Rank 0: create the run folder, refusing one that holds a run unless the run continues it (`run.resume`) or
    replaces it (`run.overwrite`: the old run is moved aside, not deleted). Returns the folder and a note for the
    log. The resolved config is written later, once the run has passed its start-up checks (`save_run_config`)."""
    if not cfg.run.output_dir:
        raise RunDirError("run.output_dir: empty (load configs with load_config, which names the folder)")
    run_dir = Path(cfg.run.output_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise RunDirError(f"run.output_dir: {run_dir} is not writable ({err.strerror})") from None
    held = run_contents(run_dir)
    if cfg.run.resume == "never" and held and not cfg.run.overwrite:
        raise RunDirError(f"run.output_dir: {run_dir} holds a run ({'; '.join(held)}); set run.resume=auto to "
                          "continue it, run.overwrite=true to move it aside and start over, or choose another "
                          "run.output_dir")
    nothing_to_resume = cfg.run.resume == "auto" and checkpoint.find_resumable(run_dir, warn=False) is None
    notes = []
    if nothing_to_resume:
        notes.append(f"run.resume=auto: no complete checkpoint in {run_dir}, starting at step 0")
    if held and (cfg.run.resume == "never" or nothing_to_resume):
        notes.append(f"moved the earlier run in {run_dir} ({'; '.join(held)}) to {move_aside(run_dir)}")
    return run_dir, "; ".join(notes) or None


def save_run_config(cfg: Config, run_dir: Path, rank: int) -> None:
    """The resolved config (every field) into the run folder, once start-up has succeeded."""
    if rank == 0:
        save_config(cfg, run_dir / "config.yaml")


def config_changes(old: dict, new: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for every leaf that differs, except where the run is resumed from and written to."""
    changes = []
    for key in sorted(set(old) | set(new)):
        path = f"{prefix}{key}"
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changes += config_changes(a, b, path + ".")
        elif a != b and path not in ("run.resume", "run.output_dir", "run.overwrite"):
            changes.append(f"{path}: {a!r} -> {b!r}")
    return changes


SHARED_MARKER = ".shared-check"


def check_shared_folder(run_dir: Path, rank: int, world: int) -> None:
    """Collective, after rank 0 has prepared the folder: rank 0 writes a random token into it and every rank reads it
    back. Every rank checkpoints its own shards into this folder, so on several nodes it must be one shared
    filesystem mounted at the same path; a rank that cannot see the token fails the start on every rank at once
    (RunDirError naming the ranks and hosts), instead of a checkpoint that silently misses shards."""
    if world == 1:
        return
    marker = run_dir / SHARED_MARKER
    token = [secrets.token_hex(8) if rank == 0 else None]
    if rank == 0:
        marker.write_text(token[0])
    dist.broadcast_object_list(token, src=0)
    try:
        seen = marker.read_text() == token[0]
    except OSError:
        seen = False
    verdicts: list = [None] * world
    dist.all_gather_object(verdicts, (seen, socket.gethostname()))
    if rank == 0:
        marker.unlink(missing_ok=True)
    blind = [f"rank {r} on {host}" for r, (ok, host) in enumerate(verdicts) if not ok]
    if blind:
        raise RunDirError(
            f"run.output_dir: {run_dir} is not one folder for every rank: {', '.join(blind)} cannot see the file "
            "rank 0 wrote there. Every rank writes its checkpoint shards into it: put run.output_dir on a filesystem "
            "every node mounts at the same path (docs/gpu-and-clusters.md#multi-node-and-slurm)")


def remove_if_left_empty(folder: Path, existed: bool) -> None:
    """After a start that failed: remove `folder` if this start created it and nothing was written into it (never a
    folder that existed before, never one holding any file)."""
    if existed:
        return
    with contextlib.suppress(OSError):
        folder.rmdir()  # fails on a folder that holds anything
