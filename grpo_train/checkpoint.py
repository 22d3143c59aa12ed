"""Atomic checkpoints, resume, and export to a plain Hugging Face folder.

Layout of `run_dir/checkpoints/`:

    step-000010/
        engine/                 DeepSpeed's own files (model, optimizer, scheduler; sharded per rank)
        hf_model/               the policy as safetensors + config + tokenizer (LoRA merged): `export` copies it
        trainer_state.json      step, data-sampler position, counters, the resolved config
        rng_rank{r}.json        python / numpy / torch RNG states of rank r
        MANIFEST.json           every file's size, written last: a checkpoint without it, or whose files
                                disagree with it, is incomplete and skipped on resume
    latest                      the name of the newest complete checkpoint, replaced atomically

A checkpoint is written into `.tmp-step-N/` and renamed when complete, then `latest` is updated; a kill at
any moment leaves the previous checkpoint intact. Trainer state is JSON, weights for export are safetensors.
DeepSpeed's own optimizer files are torch pickles: we load them with `weights_only=True` (`_SafeLoad`),
so a checkpoint handed to you cannot run code when loaded.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MANIFEST = "MANIFEST.json"
TRAINER_STATE = "trainer_state.json"
HF_MODEL = "hf_model"


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was asked for."""


# ----------------------------------------------------------------------------------------------------
# Small file helpers


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_tree(root: Path) -> None:
    """Flush every file (and the folder entries) so a rename never publishes half-written data."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        fd = os.open(folder, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def step_of(path: Path) -> int:
    return int(path.name.split("-")[-1])


# ----------------------------------------------------------------------------------------------------
# RNG state as JSON


def rng_state() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


# ----------------------------------------------------------------------------------------------------
# Validation and discovery


def is_complete(ckpt: Path) -> tuple[bool, str]:
    """(ok, reason): the manifest exists and every file it lists has its recorded size."""
    manifest_path = ckpt / MANIFEST
    if not manifest_path.is_file():
        return False, "no MANIFEST.json (the save did not finish)"
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return False, "MANIFEST.json is not valid JSON"
    for rel, size in manifest["files"].items():
        path = ckpt / rel
        if not path.is_file():
            return False, f"{rel} is missing"
        if path.stat().st_size != size:
            return False, f"{rel} has {path.stat().st_size} bytes, the manifest says {size}"
    try:
        json.loads((ckpt / TRAINER_STATE).read_text())
    except (OSError, json.JSONDecodeError):
        return False, f"{TRAINER_STATE} is unreadable"
    return True, ""


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Published checkpoints (not temporary folders), newest first."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-")), key=step_of, reverse=True)


def find_resumable(run_dir: Path) -> Path | None:
    """The newest complete checkpoint; each incomplete or corrupt newer one is named in a warning."""
    for ckpt in list_checkpoints(run_dir):
        ok, reason = is_complete(ckpt)
        if ok:
            return ckpt
        warnings.warn(f"skipping checkpoint {ckpt}: {reason}", stacklevel=2)
    return None


def resolve_resume(run_dir: Path, resume: str) -> Path | None:
    """`run.resume`: never -> None; auto -> newest complete in run_dir (None if there is none); else a path."""
    if resume == "never":
        return None
    if resume == "auto":
        return find_resumable(run_dir)
    path = Path(resume)
    ok, reason = is_complete(path) if path.is_dir() else (False, "not a folder")
    if not ok:
        raise CheckpointError(f"run.resume: {path} is not a usable checkpoint ({reason})")
    return path


# ----------------------------------------------------------------------------------------------------
# Save


def hf_folder_writer(model_config, tokenizer_dir: str):
    """A `save_hf(folder, named_weights)` that writes a plain HF model folder: safetensors (tied aliases
    dropped), config.json, generation config and tokenizer files copied from `tokenizer_dir`."""

    def save_hf(folder: Path, named_weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        tied = getattr(model_config, "tie_word_embeddings", False)
        tensors = {name: t.detach().to("cpu").contiguous().clone() for name, t in named_weights
                   if not (tied and name == "lm_head.weight")}
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        model_config.save_pretrained(folder)
        for source in Path(tokenizer_dir).iterdir():
            if source.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config",
                                       "vocab", "merges")):
                shutil.copy2(source, folder / source.name)

    return save_hf


def save_checkpoint(run_dir: Path, step: int, engine, trainer_state: dict[str, Any],
                    named_weights: Iterable[tuple[str, torch.Tensor]], save_hf: callable, keep_last: int) -> Path:
    """Collective: every rank calls it. Returns the published checkpoint folder.

    `named_weights` yields the policy's full tensors (gathered under ZeRO-3, LoRA merged); rank 0 writes
    them with `save_hf(folder, named_weights)`, the other ranks only take part in the gathering.
    """
    rank = dist.get_rank()
    root = run_dir / CHECKPOINTS
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a leftover of a save that was killed
        tmp.mkdir(parents=True)
    dist.barrier()
    engine.save_checkpoint(str(tmp), tag="engine", save_latest=False)
    _write_json_atomic(tmp / f"rng_rank{rank}.json", rng_state())
    if rank == 0:
        save_hf(tmp / HF_MODEL, named_weights)
    else:
        for _ in named_weights:  # take part in the collective gathers
            pass
    dist.barrier()
    if rank == 0:
        _write_json_atomic(tmp / TRAINER_STATE, trainer_state)
        _fsync_tree(tmp)
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        _write_json_atomic(tmp / MANIFEST, {"step": step, "files": files})
        if final.exists():  # a checkpoint of the same step from an interrupted earlier attempt
            shutil.rmtree(final)
        os.rename(tmp, final)
        (root / LATEST).with_suffix(".tmp").write_text(final.name)
        os.replace((root / LATEST).with_suffix(".tmp"), root / LATEST)
        for old in list_checkpoints(run_dir)[keep_last:]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


# ----------------------------------------------------------------------------------------------------
# Load


def _deepspeed_safe_globals() -> list:
    """The plain-data classes DeepSpeed pickles into its checkpoints (found by loading them here)."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address]


class _SafeLoad:
    """DeepSpeed's checkpoint engine, but unpickling only tensors and plain containers (weights_only=True)."""

    def __init__(self, inner):
        self.inner = inner

    def load(self, path: str, map_location=None):
        with torch.serialization.safe_globals(_deepspeed_safe_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def load_checkpoint(ckpt: Path, engine) -> dict[str, Any]:
    """Collective: restore the engine (weights, optimizer, scheduler) and this rank's RNG; returns trainer state."""
    engine.checkpoint_engine = _SafeLoad(engine.checkpoint_engine)
    try:
        load_path, _ = engine.load_checkpoint(str(ckpt), tag="engine")
    finally:
        engine.checkpoint_engine = engine.checkpoint_engine.inner
    if load_path is None:
        raise CheckpointError(f"{ckpt}: DeepSpeed could not load its engine state")
    rng_file = ckpt / f"rng_rank{dist.get_rank()}.json"
    if rng_file.is_file():  # absent when resuming with more ranks than the run had
        set_rng_state(json.loads(rng_file.read_text()))
    return json.loads((ckpt / TRAINER_STATE).read_text())


# ----------------------------------------------------------------------------------------------------
# Export


def export(run_dir: Path, out: Path, step: int | None = None) -> Path:
    """Copy a checkpoint's Hugging Face folder (safetensors, LoRA merged) to `out`."""
    if step is None:
        ckpt = find_resumable(run_dir)
        if ckpt is None:
            raise CheckpointError(f"{run_dir}: no complete checkpoint to export")
    else:
        ckpt = run_dir / CHECKPOINTS / f"step-{step:06d}"
        ok, reason = is_complete(ckpt) if ckpt.is_dir() else (False, "no such checkpoint")
        if not ok:
            raise CheckpointError(f"{ckpt}: cannot export ({reason})")
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"--out {out} exists and is not empty")
    shutil.copytree(ckpt / HF_MODEL, out, dirs_exist_ok=True)
    return out
