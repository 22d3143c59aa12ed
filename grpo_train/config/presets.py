"""Presets: a published recipe's coupled keys (schema.PRESETS), set in the plain tree under the keys the user set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_train.config.schema import PRESETS, ConfigError
from grpo_train.config.yaml_io import Origin, leaf_keys, read_tree, set_dotted


def apply_preset(tree: dict[str, Any], origin: Origin | None = None) -> tuple[list[str], list[str]]:
    """Set, in the plain tree, the keys of `algorithm.preset` that the tree does not set itself.

    Returns (keys taken from the preset, the preset's keys the tree set explicitly and keeps), both empty without
    a preset. The resolved config (saved as the run's config.yaml) then holds every value, so a saved config
    reloads to the same run whatever the preset table says later.
    """
    origin = origin or Origin()
    algorithm = tree.get("algorithm")
    name = algorithm.get("preset", "") if isinstance(algorithm, dict) else ""
    if not name:
        return [], []
    if name not in PRESETS:
        raise ConfigError(f"{origin.of('algorithm.preset')}: algorithm.preset: {name!r} is not one of "
                          f"{', '.join(PRESETS)}")
    explicit = set(leaf_keys(tree))
    taken = [key for key in PRESETS[name] if key not in explicit]
    for key in taken:
        set_dotted(tree, key, PRESETS[name][key], origin.file)
    return taken, [key for key in PRESETS[name] if key in explicit]


def preset_report(path: str | Path | None, overrides: list[str] | None = None) -> str:
    """Comment lines for --print-config: which keys the preset set and which explicit keys overrode it."""
    tree, origin = read_tree(path, overrides)
    taken, kept = apply_preset(tree, origin)
    if not taken and not kept:
        return ""
    name = tree["algorithm"]["preset"]
    lines = [f"# algorithm.preset {name}: from the preset: {', '.join(taken) or '(none)'}"]
    if kept:
        lines.append(f"# algorithm.preset {name}: set explicitly, kept over the preset: {', '.join(kept)}")
    return "\n".join(lines)
