"""Reading a config: the YAML file and the `key=value` overrides as a plain tree (`read_tree`), where each value was
set (`Origin`, named in every error), and the typed dataclasses built from the tree (`build`), unknown keys refused
with the keys they may have meant. The checks of the values are in checks.py, the presets in presets.py and the
`auto` values in auto.py, beside this module."""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grpo_train.config.aliases import did_you_mean, suggest_keys
from grpo_train.config.schema import AlgorithmConfig, Config, ConfigError, RolloutConfig


def _group_size_auto_yaml(values: dict[str, Any]) -> dict[str, Any]:
    """algorithm.group_size: auto -> group_size_auto: true (G itself starts at its default)."""
    if values.get("group_size") != "auto":
        return values
    return {**{k: v for k, v in values.items() if k != "group_size"}, "group_size_auto": True}


def _max_staleness_auto_yaml(values: dict[str, Any]) -> dict[str, Any]:
    """rollout.max_staleness: auto -> max_staleness_auto: true, and max_staleness (the rollout pool's capacity) =
    max_staleness_max."""
    if values.get("max_staleness") != "auto":
        return values
    top = values.get("max_staleness_max", RolloutConfig.max_staleness_max)
    return {**values, "max_staleness": top, "max_staleness_auto": True}


@dataclass(frozen=True)
class Origin:
    """Where the config's values came from, so that an error names the file or the command-line override."""

    file: str = "<defaults>"
    overrides: tuple[tuple[str, str], ...] = ()  # (dotted key, the override text that set it)

    def of(self, key: str, problem: str = "") -> str:
        """The overrides that set `key` (or a section holding it, or a key under it) or a key the problem names
        ("must divide algorithm.prompts_per_step * ..."), else the file."""
        keys = [key, *_NAMED_KEY.findall(problem)]
        texts = [text for set_key, text in self.overrides
                 if any(k == set_key or k.startswith((set_key + ".", set_key + "["))
                        or set_key.startswith(k + ".") for k in keys)]
        return f"{self.file} (override {', '.join(map(repr, dict.fromkeys(texts)))})" if texts else self.file

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.of(key, problem)}: {key}: {problem}")


_NAMED_KEY = re.compile(r"\b(?:model|data|rollout|reward|algorithm|learner|run|ustat)\.\w+")


def _unknown_key(key: str, value: Any, known: list[str], origin: Origin) -> ConfigError:
    """The error for an unknown key, with the keys it may have meant. Under an unknown section each leaf gets its
    own (`actor_rollout_ref.rollout.n=8` arrives as actor_rollout_ref: {rollout: {n: 8}})."""
    paths = [f"{key}.{leaf}" for leaf in leaf_keys(value)] if isinstance(value, dict) and value else [key]
    hints = [(path, suggested) for path in paths if (suggested := suggest_keys(path))]
    if len(hints) == 1:
        key, problem = hints[0][0], did_you_mean(*hints[0])
    else:
        problem = "; ".join(f"{path}: {did_you_mean(path, suggested)}" for path, suggested in hints[:4])
    problem = f": {problem}" if problem else ""
    return ConfigError(f"{origin.of(key)}: unknown key {key!r}{problem} (known: {', '.join(sorted(known))})")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str, origin: Origin, doc: str = "") -> Any:
    """Check `value` (as YAML or an override produced it) against the annotation `tp`; `doc` is the field's."""
    source = origin.of(key)
    kind = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return build(tp, value, key, origin)
    if kind is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key}: expected a list, got {value!r}")
        return [_convert(v, item_tp, f"{key}[{i}]", origin, doc) for i, v in enumerate(value)]
    if kind is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    scalar = _convert_scalar(value, tp)
    if scalar is not None:
        return scalar
    # YAML reads yes/no/on/off/true/false as booleans: `run.resume=yes` arrives as True.
    hint = "; YAML reads yes/no/on/off/true/false as booleans, quote the word" if isinstance(value, bool) else ""
    allowed = f" ({doc})" if doc else ""
    raise ConfigError(f"{source}: {key}: expected {_type_name(tp)}{allowed}, got {value!r} "
                      f"({type(value).__name__}{hint})")


_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _convert_scalar(value: Any, tp: Any) -> Any:
    """`value` as a bool/int/float/str field holds it, or None when it does not fit `tp`."""
    if tp is bool and isinstance(value, bool):
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
        return float(value)  # PyYAML reads `1e-5` (no dot) as a string
    if tp is str and isinstance(value, str):
        return value
    return None


def build(cls: type, values: dict[str, Any], prefix: str, origin: Origin) -> Any:
    hints = typing.get_type_hints(cls)
    docs = {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}
    values = _group_size_auto_yaml(values) if cls is AlgorithmConfig else values
    values = _max_staleness_auto_yaml(values) if cls is RolloutConfig else values
    kwargs = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in docs:
            raise _unknown_key(key, value, list(docs), origin)
        kwargs[name] = _convert(value, hints[name], key, origin, docs[name])
    return cls(**kwargs)


def _parse_override(text: str) -> tuple[str, Any]:
    """`a.b=3` -> ("a.b", 3). The value is parsed as a YAML scalar/flow value (3, 0.1, true, [a, b])."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. algorithm.group_size=8")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {err}") from None
    return key.strip(), value


_INDEXED = re.compile(r"(\w+)\[(\d+)\]")  # functions[0]


def _default_list(key: str) -> list[Any] | None:
    """The default of the list field `key` (dotted, an entry of a list as [i]) as a plain tree; None if `key` names
    no list field."""
    tp: Any = Config
    default: Any = None
    for part in key.split("."):
        name = _INDEXED.sub(r"\1", part)
        fields = {f.name: f for f in dataclasses.fields(tp)} if dataclasses.is_dataclass(tp) else {}
        if name not in fields:
            return None
        f = fields[name]
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        tp = typing.get_type_hints(tp)[name]
        if part != name:  # into an entry of the list
            tp = typing.get_args(tp)[0] if typing.get_origin(tp) is list else None
    if not isinstance(default, list):
        return None
    return [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in default]


def set_dotted(tree: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set `key` in the plain tree: `a.b=v`, or an entry of a list `a.b[i].c=v` / `a.b[i]=v`. An index edits the
    list the tree holds (the file's), else the key's default list; past its end is an error naming its length."""
    parts = key.split(".")
    node: Any = tree
    for depth, part in enumerate(parts):
        indexed = _INDEXED.fullmatch(part)
        name = indexed[1] if indexed else part
        if not indexed:
            if depth == len(parts) - 1:
                node[part] = value
                return
            node = node.setdefault(part, {})
        else:
            listed, index = ".".join([*parts[:depth], name]), int(indexed[2])
            entries = node[name] if name in node else _default_list(listed)
            if not isinstance(entries, list):
                suggested = [(k, alias) for k, alias in suggest_keys(listed) if k != listed]
                hint = f"; {did_you_mean(listed, suggested)}" if suggested else ""
                raise ConfigError(f"{source}: {key}: {listed} is not a list{hint}")
            node[name] = entries
            if index >= len(entries):
                raise ConfigError(f"{source}: {key}: index {index} is out of range: {listed} has {len(entries)} "
                                  f"entr{'y' if len(entries) == 1 else 'ies'}; set the whole list to add one "
                                  f"({listed}=[...])")
            if depth == len(parts) - 1:
                entries[index] = value
                return
            node = entries[index]
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: {key}: {part!r} is not a section")


def read_tree(path: str | Path | None, overrides: list[str] | None = None) -> tuple[dict[str, Any], Origin]:
    """The YAML file (safe loading) with the `key=value` overrides applied, as a plain tree, and where each key
    was set."""
    tree: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{source}: config file not found")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as err:
            raise ConfigError(f"{source}: malformed YAML: {err}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: the top level must be a mapping of sections, got {type(loaded).__name__}")
        tree = loaded
    set_by_overrides = []
    for text in overrides or []:
        key, value = _parse_override(text)
        set_dotted(tree, key, value, f"{source} (override {text!r})")
        set_by_overrides.append((key, text))
    return tree, Origin(source, tuple(set_by_overrides))


def leaf_keys(tree: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for name, value in tree.items():
        key = f"{prefix}{name}"
        keys += leaf_keys(value, key + ".") if isinstance(value, dict) else [key]
    return keys
