"""Atomic checkpoints, resume, and export to a plain Hugging Face folder.

Layout of `run_dir/checkpoints/`:

    step-000010/
        engine/                 DeepSpeed's own files (model, optimizer, scheduler; sharded per rank)
        hf_model/               the policy as safetensors + config + tokenizer (LoRA merged): `export` copies it
        trainer_state.json      step, data-sampler position, counters, the resolved config
        rng_rank{r}.json        python / numpy / torch (and CUDA) RNG states of rank r
        MANIFEST.json           every file's size, written last: a checkpoint without it, or whose files
                                disagree with it, is incomplete and skipped on resume
    latest                      the name of the newest complete checkpoint, replaced atomically

Saving. A checkpoint is written into `.tmp-step-N/`, flushed to disk, renamed to `step-N/` when complete,
then `latest` is replaced; so a kill at any moment leaves the previous checkpoints intact, and a `.tmp-*`
leftover is removed by the next save. Checkpoints are deleted by first renaming them to `.trash-*`, so a
half-deleted one is never mistaken for a checkpoint. After publishing step N the save keeps the newest
`keep_last` checkpoints up to N and deletes any of a step after N: those belong to a branch the run
abandoned when it resumed from an older checkpoint (their metrics rows were dropped on that resume). An
OSError (disk full, quota, permissions) or out-of-memory error during a save removes the temporary folder
and raises CheckpointError naming the checkpoint a resume would use.

Resume looks at `step-*` folders newest first (`latest` is for people and scripts) and takes the first
whose files match its manifest; each one skipped is named in a warning. The manifest records sizes, not
checksums: it catches missing, truncated and half-written files; a same-size corruption is caught when
loading fails, which raises CheckpointError naming the checkpoint (pass an older one as `run.resume`).

What runs code when a checkpoint is loaded: nothing. Trainer state and RNG states are JSON, weights for
export are safetensors. DeepSpeed's own files are torch pickles; `load_checkpoint` swaps the engine's
checkpoint engine for `_SafeLoad`, which unpickles with `torch.load(weights_only=True)` (tensors and plain
containers) plus three allowlisted plain-data DeepSpeed classes: `LossScaler` (the loss-scale settings,
attributes only), `ZeroStageEnum` (an int enum) and `fragment_address` (a dataclass of two ints). These
are every non-tensor class found in the checkpoints of ZeRO stages 0-3, fp32 and bf16, with and without
LoRA (DeepSpeed 0.19.8; `torch.serialization.get_unsafe_globals_in_checkpoint`). Everything
`engine.load_checkpoint` reads for those (model states, ZeRO optimizer partitions, MoE expert files) goes
through that checkpoint engine. DeepSpeed paths we do not use still call `torch.load(weights_only=False)`
directly: universal checkpoints (`load_universal_checkpoint`, `checkpoint/universal_checkpoint.py`,
`zero/stage3.py` `load_hp_checkpoint_state*`), the offline converters (`checkpoint/ds_to_universal.py`,
`utils/zero_to_fp32.py`, also copied into each checkpoint as `zero_to_fp32.py`), and the decoupled / fast
checkpoint engines. Do not run those on a checkpoint you did not write.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist

from grpo_train.config import Config, to_dict

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MANIFEST = "MANIFEST.json"
TRAINER_STATE = "trainer_state.json"
HF_MODEL = "hf_model"
TMP_PREFIX = ".tmp-"  # a save in progress (or killed)
TRASH_PREFIX = ".trash-"  # a checkpoint being deleted


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was asked for, or a checkpoint that could not be written or read."""


# ----------------------------------------------------------------------------------------------------
# Small file helpers


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_json_atomic(path: Path, data: Any) -> None:
    _write_atomic(path, json.dumps(data))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file (and the folder entries) so a rename never publishes half-written data."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        _fsync_dir(folder)


def _discard(folder: Path) -> None:
    """Delete a folder so that no kill can leave it half-deleted under its own name."""
    trash = folder.with_name(TRASH_PREFIX + folder.name)
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def step_of(path: Path) -> int:
    return int(path.name.split("-")[-1])


def _free_space(folder: Path) -> str:
    """"12.3 GB free on <folder>", so that a full disk reads as one."""
    try:
        return f"{shutil.disk_usage(folder).free / 1e9:.1f} GB free on {folder}"
    except OSError:
        return f"free space on {folder} unknown"


def _reason(err: BaseException) -> str:
    """One line out of an exception's message (torch's weights_only refusal spans a paragraph)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
    line = next((x for x in lines if "GLOBAL" in x), lines[0])
    return line[:300]


# ----------------------------------------------------------------------------------------------------
# RNG state as JSON


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():  # dropout on GPU (e.g. LoRA dropout) draws from the device generator
        state["cuda"] = torch.cuda.get_rng_state().tolist()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.tensor(state["cuda"], dtype=torch.uint8))


# ----------------------------------------------------------------------------------------------------
# The trainer's part of a checkpoint


class Stateful(Protocol):
    """What saves its state in a checkpoint: the prompt sampler, the U-statistic monitor, the rollout pool."""

    def state_dict(self) -> dict: ...


def trainer_state(step: int, sampler: Stateful, cfg: Config, monitor: Stateful | None = None,
                  pool: Stateful | None = None, pace: Stateful | None = None) -> dict:
    """The trainer's part of a checkpoint (the learner adds its own counters): the step, the data position, the
    resolved config; with the monitor, its window and G, so a resumed run makes the same group_size auto choices;
    with the rollout pool, every rank's groups in flight (collective), so a resumed run goes on with them; with
    rollout.max_staleness auto, the k in force and the windows behind its choices (grpo_train/pace.py)."""
    return checkpoint_state(step, sampler.state_dict(), cfg, monitor.state_dict() if monitor is not None else None,
                            pool.state_dict() if pool is not None else None,
                            pace.state_dict() if pace is not None else None)


def checkpoint_state(step: int, sampler: dict, cfg: Config, ustat: dict | None, pool: dict | None,
                     pace: dict | None = None) -> dict:
    """`trainer_state` from the parts' states (also those taken earlier: grpo_train/preemption.py's StepStart);
    collective with a pool's state (this rank's)."""
    return {"step": step, "sampler": sampler, "config": to_dict(cfg), **({"ustat": ustat} if ustat is not None else {}),
            **({"pools": pool_states(pool)} if pool is not None else {}),
            **({"pace": pace} if pace is not None else {})}


def pool_states(state: dict) -> list[dict]:
    """Every rank's pool state (`state`: this rank's), rank-major (a checkpoint keeps them all in trainer_state.json).
    Collective."""
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


# ----------------------------------------------------------------------------------------------------
# Validation and discovery


def is_complete(ckpt: Path) -> tuple[bool, str]:
    """(ok, reason): the manifest exists and every file it lists has its recorded size."""
    manifest_path = ckpt / MANIFEST
    if not manifest_path.is_file():
        return False, "no MANIFEST.json (the save did not finish)"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False, "MANIFEST.json is not valid JSON"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or TRAINER_STATE not in files:
        return False, "MANIFEST.json has no list of files"
    for rel, size in files.items():
        path = ckpt / rel
        if not path.is_file():
            return False, f"{rel} is missing"
        if path.stat().st_size != size:
            return False, f"{rel} has {path.stat().st_size} bytes, the manifest says {size}"
    try:
        json.loads((ckpt / TRAINER_STATE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False, f"{TRAINER_STATE} is unreadable"
    return True, ""


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Published checkpoints (not temporary folders), newest first."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-")), key=step_of, reverse=True)


def find_resumable(run_dir: Path, warn: bool = True) -> Path | None:
    """The newest complete checkpoint; each incomplete or corrupt newer one is named in a warning."""
    for ckpt in list_checkpoints(run_dir):
        ok, reason = is_complete(ckpt)
        if ok:
            return ckpt
        if warn:
            warnings.warn(f"skipping checkpoint {ckpt}: {reason}", stacklevel=2)
    return None


def saved_step(ckpt: Path) -> int:
    """The step a complete checkpoint was saved at (its trainer state: no DeepSpeed, no model)."""
    return int(json.loads((ckpt / TRAINER_STATE).read_text())["step"])


def pool_state(ckpt: Path, state: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    """This rank's rollout pool (rollout.max_staleness >= 1) from a checkpoint's trainer state; an empty pool when
    the checkpoint is a synchronous run's (it had nothing in flight)."""
    pools = state.get("pools")
    if pools is None:
        return {"admitted": 0, "groups": []}
    if len(pools) != world:
        raise CheckpointError(f"{ckpt}: its groups in flight (rollout.max_staleness) are those of {len(pools)} ranks "
                              f"and this run has {world}: resume an asynchronous run on as many ranks")
    return pools[rank]


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
                    named_weights: Iterable[tuple[str, torch.Tensor]],
                    save_hf: Callable[[Path, Iterable[tuple[str, torch.Tensor]]], None], keep_last: int) -> Path:
    """Collective: every rank calls it. Returns the published checkpoint folder.

    `named_weights` yields the policy's full tensors (gathered under ZeRO-3, LoRA merged); rank 0 writes
    them with `save_hf(folder, named_weights)`, the other ranks only take part in the gathering.
    Raises CheckpointError when the disk is full (or any OSError / out-of-memory error occurs): the
    temporary folder is removed and the checkpoints already published stay as they were.
    """
    rank = dist.get_rank()
    root = run_dir / CHECKPOINTS
    final = root / f"step-{step:06d}"
    tmp = root / f"{TMP_PREFIX}step-{step:06d}"
    try:
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            for leftover in [*root.glob(TMP_PREFIX + "*"), *root.glob(TRASH_PREFIX + "*")]:
                shutil.rmtree(leftover, ignore_errors=True)  # of a save or a deletion that was killed
            tmp.mkdir()
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
            _publish(tmp, final)
            _prune(run_dir, step, keep_last)
    # torch's file writer reports a refused write (disk full, file size limit) as a RuntimeError, not an OSError.
    except (OSError, RuntimeError, MemoryError, torch.OutOfMemoryError) as err:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # give the space back; nothing published refers to it
        usable = find_resumable(run_dir, warn=False)
        raise CheckpointError(f"saving {final.name} failed ({type(err).__name__}: {_reason(err)}; "
                              f"{_free_space(root)}); a resume would use {usable or 'no checkpoint'}") from err
    dist.barrier()
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished folder into place, then point `latest` at it."""
    if final.exists():  # the same step from an attempt that resumed from an older checkpoint
        _discard(final)
    os.rename(tmp, final)
    _fsync_dir(final.parent)
    _write_atomic(final.parent / LATEST, final.name)


def _prune(run_dir: Path, step: int, keep_last: int) -> None:
    """Keep the newest `keep_last` checkpoints up to `step`; drop those of an abandoned later branch."""
    published = list_checkpoints(run_dir)
    abandoned = [c for c in published if step_of(c) > step]
    kept_or_old = [c for c in published if step_of(c) <= step]
    for ckpt in abandoned + kept_or_old[keep_last:]:
        _discard(ckpt)


# ----------------------------------------------------------------------------------------------------
# Load


def _deepspeed_safe_globals() -> list:
    """The plain-data classes DeepSpeed pickles into its checkpoints (see the module docstring)."""
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
    """Collective: restore the engine (weights, optimizer, scheduler) and this rank's RNG; returns trainer state.

    Raises CheckpointError naming `ckpt` when a file is corrupt, holds a class outside the allowlist (it is
    refused, never run), or does not fit the model.
    """
    engine.checkpoint_engine = _SafeLoad(engine.checkpoint_engine)
    try:
        load_path, _ = engine.load_checkpoint(str(ckpt), tag="engine")
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{ckpt}: refused to unpickle DeepSpeed state ({_reason(err)})") from None
    except (RuntimeError, EOFError, OSError, KeyError, ValueError, AssertionError) as err:
        raise CheckpointError(f"{ckpt}: DeepSpeed could not load its state "
                              f"({type(err).__name__}: {_reason(err)})") from None
    finally:
        engine.checkpoint_engine = engine.checkpoint_engine.inner
    if load_path is None:
        raise CheckpointError(f"{ckpt}: DeepSpeed could not load its engine state")
    rng_file = ckpt / f"rng_rank{dist.get_rank()}.json"
    if rng_file.is_file():  # absent when resuming with more ranks than the run had
        try:
            set_rng_state(json.loads(rng_file.read_text()))
        except (json.JSONDecodeError, KeyError, ValueError, TypeError) as err:
            raise CheckpointError(f"{rng_file}: unreadable RNG state ({_reason(err)})") from None
    return json.loads((ckpt / TRAINER_STATE).read_text())


# ----------------------------------------------------------------------------------------------------
# Export


def export(run_dir: Path, out: Path, step: int | None = None) -> Path:
    """Copy a checkpoint's Hugging Face folder (safetensors, LoRA merged) to `out`, atomically."""
    if step is None:
        ckpt = find_resumable(run_dir)
        if ckpt is None:
            raise CheckpointError(f"{run_dir}: no complete checkpoint to export")
    else:
        ckpt = run_dir / CHECKPOINTS / f"step-{step:06d}"
        available = ", ".join(str(step_of(c)) for c in reversed(list_checkpoints(run_dir))) or "none"
        ok, reason = is_complete(ckpt) if ckpt.is_dir() else (False, f"no such checkpoint; steps: {available}")
        if not ok:
            raise CheckpointError(f"{ckpt}: cannot export ({reason})")
    out = out.absolute()  # `--out .` has no name to build the temporary folder's from
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckpointError(f"--out {out} exists and is not an empty folder")
    tmp = out.with_name(f"{TMP_PREFIX}{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    # copyfile, not copy2: safetensors writes its files owner-only (0600); an export gets the usual mode.
    shutil.copytree(ckpt / HF_MODEL, tmp, copy_function=shutil.copyfile)
    if out.exists():
        out.rmdir()
    os.rename(tmp, out)
    return out
