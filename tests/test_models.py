"""Embedded models: both load offline from the cache and generate; bad names fail clearly."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_train.models import SMOLLM2, TINY_QWEN2, ModelNotFoundError, resolve_model


def chat_ids(tokenizer, question: str) -> torch.Tensor:
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)
    return encoded["input_ids"]


def greedy(path: str, question: str, max_new_tokens: int = 24) -> str:
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = chat_ids(tokenizer, question)
    out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_smollm2_is_a_real_pretrained_model():
    path = resolve_model(SMOLLM2)
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    assert "quantization_config" not in config  # a plain fp32 model, loadable by vLLM and transformers
    assert (Path(path) / "model.safetensors").is_file()
    # Real weights answer sensibly; random ones would not.
    assert "Paris" in greedy(path, "What is the capital of France?")
    assert "5" in greedy(path, "What is 2 + 3?")


def test_smollm2_cache_is_reused():
    first = resolve_model(SMOLLM2)
    stamp = (Path(first) / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(SMOLLM2) == first
    assert (Path(first) / "model.safetensors").stat().st_mtime_ns == stamp


def test_tiny_qwen2_is_deterministic_and_generates(tmp_path):
    path = resolve_model(TINY_QWEN2)
    config = json.loads((Path(path) / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["hidden_size"] // config["num_attention_heads"] == 32
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = chat_ids(tokenizer, "hi")
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert out.shape[1] > ids.shape[1]
    # Rebuilding from the same seed gives the same weights.
    from grpo_train.models import _build_tiny_qwen2

    rebuilt = tmp_path / "tiny"
    rebuilt.mkdir()
    _build_tiny_qwen2(rebuilt)
    again = AutoModelForCausalLM.from_pretrained(rebuilt)
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_local_folder_and_bad_names(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model(str(folder)) == str(folder)
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="embedded name"):
        resolve_model("no-such-model")
    with pytest.raises(ModelNotFoundError, match="embedded name"):
        resolve_model(str(tmp_path / "missing_dir"))


def test_unreachable_hub_id_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError, match=r"run `hf download Qwen/Qwen2.5-0.5B-Instruct`, share the cache"):
        resolve_model("Qwen/Qwen2.5-0.5B-Instruct")
