"""Command-line entry points: `grpo-train` and `grpo-eval`.

    grpo-train --config configs/tiny-cpu.yaml [key=value ...]        train (also `python -m grpo_train`)
    grpo-train --config configs/tiny-cpu.yaml --print-config          print the resolved config and exit
    grpo-train --config configs/tiny-cpu.yaml --print-config --explain   ... with each field's doc
    grpo-train export --run RUN_DIR [--step N] --out DIR              a plain HF model folder
    grpo-train plot RUN_DIR                                           redraw the training curves
    grpo-train advise-group-size --config F [--budget N]              the U-statistic group-size advisor
    grpo-eval --model smollm2-135m-instruct --data gsm8k --n 100      evaluate a model
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shlex
import shutil
import sys
from pathlib import Path

from grpo_train.config import TEMPLATES, ConfigError, field_docs, load_config, preset_report, to_yaml
from grpo_train.memory import DEFAULT_GPU_GIB, memory_report


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-train",
        description="GRPO training from a YAML config. Overrides are dotted key=value pairs, "
        "e.g. algorithm.group_size=16 run.output_dir=runs/x. Subcommands: export, plot, advise-group-size "
        "(each with --help).",
    )
    parser.add_argument("--config", required=True, help="YAML config file (see configs/)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--explain", action="store_true", help="print the resolved config with each field's doc, "
                        "and exit (implies --print-config)")
    parser.add_argument("--gpu-gib", type=float, metavar="GIB",
                        help=f"print the resolved config and the per-GPU memory estimate for GPUs of GIB GiB "
                        f"(e.g. {DEFAULT_GPU_GIB:g}), and exit (implies --print-config)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    # The `deepspeed` launcher passes --local_rank; LOCAL_RANK in the environment says the same.
    parser.add_argument("--local_rank", "--local-rank", type=int, help=argparse.SUPPRESS)
    return parser


def _print_config(cfg, explain: bool, gpu_gib: float | None, preset: str = "") -> None:
    text = to_yaml(cfg) + (preset + "\n" if preset else "")
    if explain:
        width = max(len(k) for k in field_docs())
        text += "\n# field docs\n" + "\n".join(f"# {k:<{width}}  {d}" for k, d in field_docs().items())
    if gpu_gib is None:
        text += f"\n# per-GPU memory estimate: add --gpu-gib GIB (e.g. --gpu-gib {DEFAULT_GPU_GIB:g})"
    else:
        # Under a launcher (torchrun sets WORLD_SIZE) the estimate is for that world size, else for 1-8 GPUs.
        world_size = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else None
        text += "\n" + memory_report(cfg, world_size=world_size, gpu_memory_gib=gpu_gib)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `--print-config | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _kind(err: Exception) -> str:
    """The prefix of a one-line error: the same "config error" as load_config's, else the exception's name."""
    kind = getattr(err, "kind", None)  # a ConfigError subclass may name itself (RewardFunctionError)
    return kind or ("config error" if isinstance(err, ConfigError) else type(err).__name__)


def check_before_start(cfg) -> None:
    """What a real start refuses in its first seconds, checked without building, loading or downloading a model,
    so that --print-config catches it too: the library log level, the model's name (a mistyped local path, an
    unknown embedded name) and, for a model on this machine, model.max_model_len against its context."""
    from grpo_train.metrics import library_log_level
    from grpo_train.models import check_context_length, check_model_name

    library_log_level(cfg.run.log_level)
    local = check_model_name(cfg.model.name_or_path)
    if local is not None:
        check_context_length(cfg.model.max_model_len, cfg.model.name_or_path, local)


# glibc's mallopt parameters (malloc.h) and the values a training process sets. mallopt takes a C int: a trim
# threshold of 16 GiB (as this once set) reached glibc as 0, trimming the heap down to its top pad on every free;
# -1 is mallopt(3)'s "disables trimming completely".
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -2, -3, -4
_NEVER_TRIM = -1
_HOST_MALLOC = {_M_MMAP_THRESHOLD: 32 * 2**20, _M_TRIM_THRESHOLD: _NEVER_TRIM, _M_TOP_PAD: 2**30}
_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_freed_host_memory(never_mmap: bool = False) -> bool:
    """Ask glibc to keep freed host memory for reuse instead of returning it to the kernel at once.

    By default glibc serves blocks above 128 KiB-32 MiB with fresh mmaps and trims the heap as soon as 128 KiB
    are free at its top, so on a CPU learner every micro-batch's activations and gradients page-fault their
    memory in again. Timing the SmolLM2 update of a 4 x 8 batch in bf16 on 2 cores, six updates in a process:
    4.7-5.3 s per update and 11-15 s of kernel time per run without this; with blocks up to 32 MiB from the heap,
    no trimming and the heap grown 1 GiB at a time, 4.1-4.5 s and 6-8 s. The process keeps its peak
    memory until it ends instead of handing it back between micro-batches. It must run before torch allocates:
    set after the imports it made no difference. Leaves glibc alone where the user set any MALLOC_* tuning
    variable, and on anything but Linux/glibc. Returns whether it was applied.

    never_mmap: blocks above 32 MiB from the heap too (M_MMAP_MAX 0), for a process whose large tensors are
    allocated and freed every step: `make bench`'s plain PyTorch step, whose [rows, columns, vocabulary] logits
    and their gradients page-faulted ~2 million pages a step in again (16 rows of SmolLM2 in bf16 on a 2-core
    EPYC: 14-16 s a step against 12.0-12.5 s with them kept; scripts/bench/plain_yardstick.py). The trainer's
    update allocates nothing that large (its head runs a few rows at a time) and ran the same with it.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or any(v in os.environ for v in _MALLOC_ENV):
        return False
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    settings = {**_HOST_MALLOC, **({_M_MMAP_MAX: 0} if never_mmap else {})}
    assert all(-2**31 <= value < 2**31 for value in settings.values()), "mallopt takes a C int"
    return all(libc.mallopt(param, value) == 1 for param, value in settings.items())


def _config_or_none(args: argparse.Namespace, program: str):
    """load_config(args.config, args.overrides), or None after one line on stderr naming the problem."""
    try:
        return load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"{program}: config error: {err}", file=sys.stderr)
        return None


def train_main(argv: list[str] | None = None) -> int:
    keep_freed_host_memory()  # first: before torch is imported and allocates
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    args = _train_parser().parse_args(argv)
    cfg = _config_or_none(args, "grpo-train")
    if cfg is None:
        return 2
    if args.print_config or args.explain or args.gpu_gib is not None:
        if args.gpu_gib is not None and args.gpu_gib <= 0:
            print(f"grpo-train: --gpu-gib: {args.gpu_gib:g} must be a GPU's memory in GiB (> 0)", file=sys.stderr)
            return 2
        try:
            check_before_start(cfg)
        except (ConfigError, FileNotFoundError) as err:
            print(f"grpo-train: config error: {err}", file=sys.stderr)
            return 2
        _print_config(cfg, args.explain, args.gpu_gib, preset_report(args.config, args.overrides))
        return 0
    from grpo_train.metrics import configure_library_logs

    try:
        configure_library_logs(cfg.run.log_level)  # before vLLM and DeepSpeed are imported
    except ConfigError as err:
        print(f"grpo-train: config error: {err}", file=sys.stderr)
        return 2
    from grpo_train.checkpoint import CheckpointError
    from grpo_train.data import DataError
    from grpo_train.models import ModelNotFoundError
    from grpo_train.preemption import Preempted, StopSignals
    from grpo_train.prompts import PromptTooLongError
    from grpo_train.rollout.server_launch import ServerError
    from grpo_train.run_dir import RunDirError, remove_if_left_empty
    from grpo_train.trainer import train

    existed = Path(cfg.run.output_dir).exists()
    # SIGTERM / SIGUSR1 (preemption, a time limit): a stop at a checkpoint within run.preempt_grace_s
    stop = StopSignals(cfg.run.preempt_grace_s, lambda how, note: interrupt_line(cfg, args, how, note))
    try:
        run_dir = train(cfg, stop)
    except (KeyboardInterrupt, Preempted) as err:
        # Ctrl-C (at once), or a stop signal (at a checkpoint): one line instead of the tracebacks of every library
        # it went through
        stop.close()  # the watchdog off before the line is printed (the finally runs after it)
        remove_if_left_empty(Path(cfg.run.output_dir), existed)
        how, note = (err.how, err.note) if isinstance(err, Preempted) else ("interrupted", "")
        if os.environ.get("RANK", "0") == "0":
            print(f"grpo-train: {interrupt_line(cfg, args, how, note)}", file=sys.stderr, flush=True)
        # 128 + the signal, as a shell reports a command the signal stopped: 130 for Ctrl-C, 143 SIGTERM, 138 SIGUSR1
        return err.exit_code if isinstance(err, Preempted) else 130
    except (ConfigError, RunDirError, DataError, PromptTooLongError, ModelNotFoundError, CheckpointError,
            ServerError) as err:
        # Bad input, or a rollout server that failed or stalled: one line naming it, no traceback; no empty run folder
        # left behind.
        remove_if_left_empty(Path(cfg.run.output_dir), existed)
        print(f"grpo-train: {_kind(err)}: {err}", file=sys.stderr)
        return 2
    finally:
        stop.close()
    print(f"grpo-train: run finished; outputs in {run_dir}")
    return 0


def interrupt_line(cfg, args: argparse.Namespace, how: str = "interrupted", note: str = "") -> str:
    """`HOW after step N[NOTE]; last complete checkpoint: PATH; resume with: COMMAND`. HOW is `interrupted` (Ctrl-C)
    or `stopped by SIGTERM` (grpo_train/preemption.py), N the last step metrics.jsonl logged, COMMAND this command
    again with run.resume=auto (or, while the run folder holds no checkpoint, the user's own run.resume=PATH),
    run.overwrite dropped: it cannot go with a resume."""
    from grpo_train.checkpoint import find_resumable
    from grpo_train.metrics import METRICS_FILE, read_jsonl

    run_dir = Path(cfg.run.output_dir)
    step = max((row["step"] for row in read_jsonl(run_dir / METRICS_FILE) if "step" in row), default=0)
    last = find_resumable(run_dir, warn=False)
    kept = [o for o in args.overrides if o.partition("=")[0].strip() not in ("run.resume", "run.overwrite")]
    kept.append(f"run.resume={'auto' if last or cfg.run.resume in ('never', 'auto') else cfg.run.resume}")
    if cfg.run.overwrite:  # set in the config file
        kept.append("run.overwrite=false")
    command = f"{_program()} {shlex.join(['--config', args.config, *kept])}"
    return f"{how} after step {step}{note}; last complete checkpoint: {last or 'none'}; resume with: {command}"


def _program() -> str:
    """How this process was started, as a shell would start it again: grpo-train (by name when that is the one on
    PATH), python -m grpo_train, or under a launcher (torchrun, scripts/launch/train.sh) a placeholder for it."""
    if "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return "<the same launcher command> -m grpo_train"
    if Path(sys.argv[0]).name == "grpo-train":
        return "grpo-train" if shutil.which("grpo-train") == sys.argv[0] else shlex.quote(sys.argv[0])
    return shlex.join([sys.executable, "-m", "grpo_train"])


def _eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-eval",
        description="Evaluate a model with vLLM on GSM8K, MATH-500, the synthetic arithmetic set or a local "
        "jsonl/parquet file: greedy accuracy, pass@k / mean@k (--k), breakdowns, every completion.")
    parser.add_argument("--config", help="a training config: its model, data (source, template, shots, synthetic "
                        "ranges), max_tokens and max_model_len are the defaults, so a run is evaluated on the "
                        "held-out set it was trained for; the flags below override them")
    parser.add_argument("--model",
                        help="embedded name (smollm2-135m-instruct, tiny-qwen2), HF folder, a run folder or "
                        "checkpoint of grpo-train (its exported weights; without --config, the run's config.yaml is "
                        "the config), or a hub id (default: the config's)")
    parser.add_argument("--data", help="synthetic, gsm8k, math, a .jsonl / .parquet / .csv file, a dataset "
                        "folder or a hub id (default: synthetic)")
    parser.add_argument("--n", type=int, help="problems to evaluate (0 = all; default: the config's run.eval_size, "
                        "else 200)")
    parser.add_argument("--k", type=int, default=1, help="samples per problem for pass@k / mean@k (1 = greedy only)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature for --k > 1")
    parser.add_argument("--template", choices=TEMPLATES, help="prompt template (default: chat)")
    parser.add_argument("--num-shots", type=int, help="worked examples of the fewshot template (default: 3)")
    parser.add_argument("--max-tokens", type=int, help="completion length cap (default: 512)")
    parser.add_argument("--max-model-len", type=int, help="prompt + completion cap, in tokens (default: 2048)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--out", help="output folder (default: runs/eval-<model>-<data>)")
    return parser


def eval_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["plot"]:
        return _plot_main(argv[1:])
    parser = _eval_parser()
    args = parser.parse_args(argv)
    if args.model is None and args.config is None:
        parser.error("give --model, --config, or both")
    if args.n is not None and args.n < 0:
        parser.error(f"--n: {args.n} must be >= 0 (0 = every problem)")
    if args.k < 1:
        parser.error(f"--k: {args.k} must be >= 1")
    from grpo_train.metrics import configure_library_logs

    configure_library_logs("warning")  # before vLLM is imported; GRPO_TRAIN_LOG_LEVEL shows more
    from grpo_train.checkpoint import CheckpointError
    from grpo_train.data import DataError
    from grpo_train.evaluation import evaluate_model
    from grpo_train.models import ModelNotFoundError

    try:
        summary, out = evaluate_model(args)
    except (ConfigError, DataError, ModelNotFoundError, CheckpointError) as err:
        print(f"grpo-eval: {_kind(err)}: {err}", file=sys.stderr)
        return 2
    shown = {k: v for k, v in summary.items() if not k.startswith("by_")}
    print(json.dumps(shown, indent=1))
    for name, failure in summary.get("fn_first_failure", {}).items():
        print(f"grpo-eval: warning: reward function {name}: {failure} (scored 0; counted in fn/{name}/"
              f"{failure.partition(':')[0]})", file=sys.stderr)
    print(f"grpo-eval: accuracy {summary['accuracy']:.4f} on {summary['n']} problems; files in {out}")
    return 0


def _plot_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-train plot", description="Redraw a run's curves from metrics.jsonl.")
    parser.add_argument("run_dir", help="the run folder (run.output_dir)")
    parser.add_argument("--out", help="PNG path (default RUN_DIR/curves.png)")
    return parser


def _plot_main(argv: list[str]) -> int:
    args = _plot_parser().parse_args(argv)
    from grpo_train.plot import plot_run

    try:
        print(plot_run(args.run_dir, args.out))
    except FileNotFoundError as err:
        print(f"grpo-train plot: {err}", file=sys.stderr)
        return 2
    return 0


def _export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-train export", description="Write a checkpoint as a plain Hugging "
                                     "Face model folder (safetensors, LoRA merged) that transformers and vLLM load.")
    parser.add_argument("--run", required=True, help="the run folder")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the newest complete one)")
    parser.add_argument("--out", required=True, help="output folder (must not exist or be empty)")
    return parser


def _export_main(argv: list[str]) -> int:
    args = _export_parser().parse_args(argv)
    from grpo_train.checkpoint import CheckpointError, export

    try:
        out = export(Path(args.run), Path(args.out), args.step)
    except (CheckpointError, OSError) as err:  # OSError: --out cannot be written (permissions, disk full)
        print(f"grpo-train export: {_kind(err)}: {err}", file=sys.stderr)
        return 2
    print(f"grpo-train export: wrote {out}")
    return 0


def _advise_main(argv: list[str]) -> int:
    from grpo_train.ustat.advisor import main

    return main(argv)


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-train serve-rollout", description="Run one rollout server for a run's config: vLLM's API server "
        "with the settings, routes and weight transfer a run with rollout.placement servers expects. Start it on a "
        "rollout node, then give the learner its URL in rollout.servers.urls (docs/gpu-and-clusters.md).")
    parser.add_argument("--config", required=True, help="the run's YAML config")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, as for training")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: every interface)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--print", action="store_true", help="print the command and its environment, do not run")
    return parser


def _serve_main(argv: list[str]) -> int:
    args = _serve_parser().parse_args(argv)
    cfg = _config_or_none(args, "grpo-train serve-rollout")
    if cfg is None:
        return 2
    import torch

    from grpo_train.models import ModelNotFoundError, resolve_model
    from grpo_train.rollout.server_launch import server_command, server_env

    try:
        model_path = resolve_model(cfg.model.name_or_path)
    except ModelNotFoundError as err:
        print(f"grpo-train serve-rollout: {err}", file=sys.stderr)
        return 2
    cmd = server_command(cfg, model_path, args.port, cfg.run.seed, torch.cuda.is_available(), host=args.host)
    env = server_env([])  # the node's CUDA_VISIBLE_DEVICES as it is
    if args.print:
        added = {k: env[k] for k in sorted(env) if os.environ.get(k) != env[k]}
        print(shlex.join([f"{k}={v}" for k, v in added.items()] + cmd))
        return 0
    print(f"grpo-train serve-rollout: starting vLLM's API server for {model_path} on {args.host}:{args.port} (a "
          "minute or more to load a real model); its log follows on this output", flush=True)
    os.execve(cmd[0], cmd, env)  # the server replaces this process: its signals and exit status are the server's


SUBCOMMANDS = {"export": _export_main, "plot": _plot_main, "advise-group-size": _advise_main,
               "serve-rollout": _serve_main}


if __name__ == "__main__":
    sys.exit(train_main())
