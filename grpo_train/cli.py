"""Command-line entry points: `grpo-train` and `grpo-eval`.

    grpo-train --config configs/tiny-cpu.yaml [key=value ...]        train (also `python -m grpo_train`)
    grpo-train --config configs/tiny-cpu.yaml --print-config          print the resolved config and exit
    grpo-train --config configs/tiny-cpu.yaml --print-config --explain   ... with each field's doc
    grpo-eval --model smollm2-135m-instruct --data gsm8k ...           evaluate a model
"""

from __future__ import annotations

import argparse
import sys

from grpo_train.config import ConfigError, field_docs, load_config, to_yaml


def _train_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-train",
        description="GRPO training from a YAML config. Overrides are dotted key=value pairs, "
        "e.g. algorithm.group_size=16 run.output_dir=runs/x.",
    )
    parser.add_argument("--config", required=True, help="YAML config file (see configs/)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--explain", action="store_true", help="with --print-config: add each field's doc")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    return parser


def _print_config(cfg, explain: bool) -> None:
    text = to_yaml(cfg)
    if explain:
        width = max(len(k) for k in field_docs())
        text += "\n# field docs\n" + "\n".join(f"# {k:<{width}}  {d}" for k, d in field_docs().items())
    print(text)


def train_main(argv: list[str] | None = None) -> int:
    args = _train_parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"grpo-train: config error: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        _print_config(cfg, args.explain)
        return 0
    print("grpo-train: training is not implemented yet (see the learner/loop issue)", file=sys.stderr)
    return 3


def eval_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo-eval", description="Evaluate a model on GSM8K, MATH-500 or "
                                     "the synthetic arithmetic set with vLLM (greedy accuracy, pass@k).")
    parser.add_argument("--model", required=True, help="embedded name, HF folder, run checkpoint or hub id")
    parser.add_argument("--data", default="synthetic", help="synthetic, gsm8k, math, or a local .jsonl file")
    parser.parse_args(argv)
    print("grpo-eval: not implemented yet (see the demo/eval issue)", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(train_main())
