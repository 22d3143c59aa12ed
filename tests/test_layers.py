"""The package's imports flow one way (README's layout): config -> data/verifier/algorithms (pure) ->
rollout/learner -> trainer -> cli, with no cycle. Every module is placed in a layer below; a new module must be
placed too, so that where it sits is a decision, not an accident. Function-level (lazy) imports count as well."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "grpo_train"

LAYERS = {
    # 0: the config and what validating it needs
    "config": 0, "config.schema": 0, "config.aliases": 0, "config.yaml_io": 0, "config.presets": 0, "config.auto": 0,
    "config.checks": 0, "rewards.user_code": 0,
    # 1: pure pieces: problems, prompts, models, the verifier and rewards, loss math, estimators, files on disk
    "data": 1, "synthetic": 1, "prompts": 1, "models": 1, "memory": 1, "metrics": 1, "plot": 1, "algorithms": 1,
    "logprob_kernels": 1,
    "verifier": 1, "verifier.api": 1, "verifier.text": 1, "verifier.extract": 1, "verifier.hedge": 1,
    "verifier.boxes": 1, "verifier.form": 1, "verifier.units": 1, "verifier.compare": 1, "verifier.rules": 1,
    "verifier.commit": 1, "verifier.spelling": 1,
    "rewards": 1, "rewards.functions": 1,
    "ustat": 1, "ustat.estimators": 1, "ustat.bandit": 1, "ustat.staleness": 1, "distributed": 1, "checkpoint": 1,
    "hf_weights": 1, "micro_batches": 1,
    # 2: rollout and learner, and what runs beside them (the reward workers, rounds, eval, the metrics row, the monitor)
    "rollout": 2, "rollout.records": 2, "rollout.engines": 2, "rollout.async_pool": 2,
    "rollout.vllm_args": 2, "rollout.servers": 2, "rollout.server_launch": 2, "rollout.server_pool": 2,
    "rollout.transfer": 2, "rollout.weight_sync": 2, "rollout.step_cost": 2,
    "forward": 2, "update_batch": 2, "learner": 2, "flat_optimizer": 2, "rewards.workers": 2, "rewards.scoring": 2,
    "rewards.failures": 2,
    "evaluation": 2, "dynamic_sampling": 2, "rounds": 2, "metrics_row": 2, "ustat.sketch": 2, "ustat.monitor": 2,
    # 3: the trainer and the programs built on the layers below
    "trainer": 3, "pace": 3, "preemption": 3, "run_dir": 3, "ustat.advisor": 3, "gpu_check": 3, "gpu_profile": 3,
    # 4: the command line
    "cli": 4, "__main__": 4, "": 4,  # "" is the package's __init__
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere in it (top level or inside functions)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
                module = f"grpo_train.{module}" if module else "grpo_train"
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        for target in targets:
            if target == "grpo_train" or target.startswith("grpo_train."):
                short = target.removeprefix("grpo_train").removeprefix(".")
                if short and short in known and short != name:  # "from grpo_train import x" names x, not __init__
                    out.add(short)
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(path, name, set(found)) for name, path in found.items()}


def test_every_module_has_a_layer():
    assert set(modules()) - set(LAYERS) == set(), "place the new module in a layer of tests/test_layers.py"
    assert set(LAYERS) - set(modules()) == set(), "a module listed in LAYERS no longer exists"


def test_imports_flow_from_higher_layers_to_lower_ones():
    upward = [f"{name} (layer {LAYERS[name]}) imports {dep} (layer {LAYERS[dep]})"
              for name, deps in graph().items() for dep in sorted(deps) if LAYERS[dep] > LAYERS[name]]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    deps, state, cycles = graph(), {}, []

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for dep in sorted(deps[name]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[name] = "done"

    for name in sorted(deps):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


def test_the_checks_see_a_violation():
    """The graph is read from the source: a module that imports upward would be caught (the AST reader works)."""
    deps = graph()
    assert "learner" in deps["trainer"] and "config" in deps["learner"] and "rewards.user_code" in deps["config.checks"]
    assert "verifier.api" in deps["verifier"]  # a relative or package-level import inside a subpackage counts too
