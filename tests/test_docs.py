"""The docs stay true to the code: docs/configuration.md is what scripts/maint/config_docs.py generates, and every
command in a ```bash block of README.md and docs/*.md runs in a cheap form, so that a renamed flag, key, config
file, script option or make target fails here rather than for a user. No model loads; the whole file takes
seconds.

Convention for writers: a ```bash block holds commands a reader may run, and each is checked. Output, a
session with its output (`$ cmd` then what it prints), pseudo-commands with placeholders (`--config F`,
`RUN_DIR`) and anything that must not be checked go in ```text or ```console blocks. ```sh / ```shell blocks
are refused, so that nothing runnable escapes the check by its label.

How each kind of command is checked (the `VAR=value` prefixes of a command are dropped; `&&`, `||`, `;` and `|`
separate commands; `.venv/bin/` prefixes are dropped):
- `grpo-train --config F [overrides] [flags]`, `python -m grpo_train ...`: run in-process with `--print-config`
  appended (the config loads, validates and imports the user's reward functions; nothing else starts);
- `grpo-train export|plot|advise-group-size ...`: parsed by the subcommand's own parser (advise-group-size:
  and its config loaded);
- `grpo-eval ...`: parsed by its parser, then its config built with `grpo_train.evaluation.eval_config`;
- `grpo-gpu-check ...`: parsed by its parser, the `--items` named checked;
- `python scripts/KIND/X.py ...`: parsed by the script's `parser()`; a `--config` and dotted overrides are loaded;
- `python examples/.../X.py`: the file exists; `python -m pytest FILES`: the files exist; `python -m MODULE`:
  the module is importable;
- `make X`: the Makefile has the target;
- `scripts/launch/train.sh ...`: its `--dry-run`, then what it passes to grpo_train gets the config check;
  `scripts/launch/gpu_smoke.sh [overrides]`: executable, and the overrides load over configs/tiny-cpu.yaml;
- `torchrun ...` / `accelerate launch ...`: parsed by torch's / accelerate's launcher parser; with
  `-m grpo_train` the config check, with a script the file exists;
- `docker run ... grpo_train:TAG [args]`: the args get the config check (or, with `--entrypoint
  scripts/launch/train.sh`, the train.sh check); the image tags are those `make docker` / `make docker-cpu` build;
- `hf download REPO [flags]`: parsed by the pinned huggingface_hub's own CLI parser (a click command, as
  `hf download --help` shows it); nothing downloads;
- skipped: other `docker` commands, `sbatch`, `pip` / `.venv/bin/pip`, `python3.11 -m venv`, `cd`, `mkdir`,
  `export` (they need a cluster, a registry or a network, or change only the shell).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SKIPPED = {"docker", "sbatch", "pip", "pip3", "cd", "mkdir", "export", "python3.11"}
SEPARATORS = {"&&", "||", ";", "|"}
REGENERATE = ".venv/bin/python scripts/maint/config_docs.py"


# ----------------------------------------------------------------------------------------------------
# docs/configuration.md


def _config_docs():
    spec = importlib.util.spec_from_file_location("_docs_config_docs", REPO / "scripts" / "maint" / "config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_generated_from_the_dataclasses():
    page = REPO / "docs" / "configuration.md"
    assert page.is_file() and page.read_text() == _config_docs().render(), (
        f"docs/configuration.md is stale: regenerate it with `{REGENERATE}` and commit it")


def test_verifier_rule_list_is_generated_from_the_rules():
    script = REPO / "scripts" / "maint" / "verifier_docs.py"
    spec = importlib.util.spec_from_file_location("_docs_verifier_docs", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (REPO / "docs" / "verifier.md").read_text()
    assert page == module.render(page), (
        "docs/verifier.md's rule list is stale: regenerate it with `.venv/bin/python scripts/maint/verifier_docs.py`")
    from grpo_train.verifier.rules import RULE_NAMES

    assert all(f"| `{name}` |" in page for name in RULE_NAMES)


def test_configuration_page_lists_every_key_preset_and_alias():
    from grpo_train.config import ALIASES, PRESETS, field_docs

    page = (REPO / "docs" / "configuration.md").read_text()
    missing = [key for key in field_docs() if f"`{key}`" not in page]
    assert not missing, missing
    assert all(f"`{name}`" in page for name in PRESETS)
    assert all(f"| {a.trainer} | `{a.name}` | `{a.key}` |" in page for a in ALIASES)


# ----------------------------------------------------------------------------------------------------
# Finding the commands


def bash_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number of the fence, text) of every ```bash block."""
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"\s*```\s*(\w*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        assert fence.group(1) not in ("sh", "shell", "zsh"), (
            f"{path.name}:{i + 1}: a ```{fence.group(1)} block; use ```bash (checked) or ```console (not checked)")
        if fence.group(1) == "bash":
            blocks.append((i + 1, "\n".join(lines[i + 1:end])))
        i = end + 1
    return blocks


def split_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell text: continuations joined, comments dropped, split at && || ; |."""
    commands = []
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        current: list[str] = []
        for word in lexer:
            if word in SEPARATORS:
                commands.append(current)
                current = []
            else:
                current.append(word)
        commands.append(current)
    return [c for c in commands if c]


def normalise(words: list[str]) -> list[str]:
    """Without `VAR=value` prefixes; `.venv/bin/grpo-train` -> `grpo-train`; python3 -> python."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words = words[1:]
    if not words:
        return words
    program = words[0].removeprefix(".venv/bin/")
    if program in ("python", "python3"):
        program = "python"
    return [program, *words[1:]]


def _collect() -> list[tuple[str, list[str]]]:
    found = []
    for doc in DOCS:
        for line, block in bash_blocks(doc):
            found += [(f"{doc.relative_to(REPO)}:{line}", normalise(words)) for words in split_commands(block)]
    return found


COMMANDS = _collect()


# ----------------------------------------------------------------------------------------------------
# Checking one command


def check_train(args: list[str], capsys) -> None:
    """`grpo-train ARGS` as a config check: --print-config appended, nothing trains."""
    from grpo_train.cli import SUBCOMMANDS, train_main

    if args[:1] and args[0] in SUBCOMMANDS:
        return check_subcommand(args[0], args[1:])
    write_example_data(args)
    # A model folder an earlier command of the docs writes under runs/ (`grpo-train export ... --out runs/X`) is not
    # there: the config's own model stands in (with runs/ present the missing path would be an error, rightly).
    args = [a for a in args
            if not (a.startswith("model.name_or_path=runs/") and not (REPO / a.split("=", 1)[1]).exists())]
    capsys.readouterr()
    code = train_main([*args, "--print-config"])
    err = capsys.readouterr().err
    assert code == 0, f"grpo-train {shlex.join(args)} --print-config failed: {err}"


def write_example_data(args: list[str]) -> None:
    """An example's config reads the data its make_data.py writes (its docs run that first): write it once
    (examples/*/data/ is git-ignored), so that the config check sees what a user's run would see."""
    if "--config" not in args:
        return
    folder = REPO / Path(args[args.index("--config") + 1]).parent
    if folder.parent == REPO / "examples" and (folder / "make_data.py").is_file() and not (folder / "data").is_dir():
        subprocess.run([sys.executable, str(folder / "make_data.py")], check=True, capture_output=True, timeout=300)


def check_subcommand(name: str, args: list[str]) -> None:
    from grpo_train import cli
    from grpo_train.config import load_config
    from grpo_train.ustat import advisor

    if name == "export":
        cli._export_parser().parse_args(args)
    elif name == "plot":
        cli._plot_parser().parse_args(args)
    else:
        parsed = advisor._parser().parse_args(args)
        load_config(parsed.config, parsed.overrides)


def check_eval(args: list[str]) -> None:
    from grpo_train import cli
    from grpo_train.evaluation import eval_config

    parsed = cli._eval_parser().parse_args(args)
    assert parsed.model or parsed.config, "grpo-eval needs --model or --config"
    eval_config(parsed)


def load_script(path: Path):
    name = f"_docs_script_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


def check_python(args: list[str], capsys) -> None:
    from grpo_train.config import load_config

    if args[:1] == ["-m"]:
        module, rest = args[1], args[2:]
        if module == "grpo_train":
            return check_train(rest, capsys)
        if module == "grpo_train.ustat.advisor":
            return check_subcommand("advise-group-size", rest)
        if module == "pytest":
            files = [a.split("::")[0] for a in rest if not a.startswith("-")]
            assert files and all((REPO / f).is_file() for f in files), f"pytest {rest}: no such test file"
            return None
        assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"
        return None
    path = REPO / args[0]
    assert path.is_file(), f"{args[0]}: no such file"
    if Path(args[0]).parts[0] != "scripts":
        return None  # an example's own script: it exists
    module = load_script(path)
    assert hasattr(module, "parser"), f"{args[0]} has no parser() for this test to read its arguments with"
    parsed = module.parser().parse_args(args[1:])
    if getattr(parsed, "overrides", None) or getattr(parsed, "config", None):
        load_config(getattr(parsed, "config", None), getattr(parsed, "overrides", None) or [])
    return None


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def check_train_sh(args: list[str], capsys) -> None:
    """scripts/launch/train.sh's own --dry-run, then the config check of what it hands to grpo_train."""
    result = subprocess.run(["scripts/launch/train.sh", "--dry-run", *args], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert result.returncode == 0, f"scripts/launch/train.sh --dry-run {shlex.join(args)}: {result.stderr}"
    launched = shlex.split(result.stdout)
    start = next(i for i in range(len(launched)) if launched[i:i + 2] == ["-m", "grpo_train"])
    check_train(launched[start + 2:], capsys)


def check_launcher(program: str, args: list[str], capsys) -> None:
    """torchrun / accelerate launch: the launcher's own parser, then what it starts."""
    if program == "torchrun":
        from torch.distributed.run import get_args_parser

        parsed = get_args_parser().parse_args(args)
    else:
        from accelerate.commands.launch import launch_command_parser

        assert args[:1] == ["launch"], f"accelerate {args[:1]}: only `accelerate launch` is checked"
        parsed = launch_command_parser().parse_args(args[1:])
        assert not parsed.config_file or (REPO / parsed.config_file).is_file(), parsed.config_file
    if parsed.module:
        assert parsed.training_script == "grpo_train", f"-m {parsed.training_script}: not grpo_train"
        return check_train(parsed.training_script_args, capsys)
    assert (REPO / parsed.training_script).is_file(), f"{parsed.training_script}: no such file"
    return None


def image_tags() -> set[str]:
    return set(re.findall(r"docker build -f \S+ -t (\S+) \.", (REPO / "Makefile").read_text()))


def check_docker(args: list[str], capsys) -> None:
    """`docker run ... grpo_train:TAG ARGS`: ARGS as the image's entrypoint (grpo-train) gets them."""
    image = next((i for i, w in enumerate(args) if w.startswith("grpo_train:")), None)
    if args[:1] != ["run"] or image is None:
        return None  # docker build, pull, ...: skipped
    assert args[image] in image_tags(), f"{args[image]}: no `make docker*` target builds this image"
    options, rest = args[:image], args[image + 1:]
    entrypoint = options[options.index("--entrypoint") + 1] if "--entrypoint" in options else "grpo-train"
    if entrypoint == "scripts/launch/train.sh":
        return check_train_sh(rest, capsys)
    if entrypoint == "grpo-train" and rest:
        return check_train(rest, capsys)
    assert (REPO / entrypoint).is_file() or entrypoint == "grpo-train", f"--entrypoint {entrypoint}: no such file"
    return None


def hf_download(args: list[str]) -> dict:
    """`hf download ARGS` parsed by huggingface_hub's own CLI (the click app behind `hf`): its parameters, or
    click's UsageError for a flag, choice or argument the pinned version does not take. Nothing runs."""
    import click
    from huggingface_hub.cli.hf import app

    assert args[:1] == ["download"], f"hf {args[:1]}: only `hf download` is checked"
    context = click.Context(app, info_name="hf")
    name, command, rest = app.resolve_command(context, args)
    return command.make_context(name, rest, parent=context).params


def check(words: list[str], capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the docs' paths are relative to the repository
    program, args = words[0], words[1:]
    if program == "grpo-train":
        check_train(args, capsys)
    elif program == "grpo-eval":
        check_eval(args)
    elif program == "python":
        check_python(args, capsys)
    elif program == "make":
        missing = [t for t in args if not t.startswith("-") and "=" not in t and t not in make_targets()]
        assert not missing, f"make {missing}: no such target in the Makefile"
    elif program == "grpo-gpu-check":
        from grpo_train import gpu_check

        parsed = gpu_check._parser().parse_args(args)
        unknown = set(parsed.items.split(",")) - set(gpu_check.ITEMS)
        assert not unknown, f"grpo-gpu-check --items: {sorted(unknown)} are not items"
    elif program == "scripts/launch/train.sh":
        check_train_sh(args, capsys)
    elif program == "scripts/launch/gpu_smoke.sh":
        assert (REPO / program).stat().st_mode & 0o111, f"{program} is not executable"
        check_train(["--config", "configs/tiny-cpu.yaml", *args], capsys)
    elif program in ("torchrun", "accelerate"):
        check_launcher(program, args, capsys)
    elif program == "docker":
        check_docker(args, capsys)
    elif program == "hf":
        hf_download(args)
    elif program.removeprefix(".venv/bin/") not in SKIPPED:
        pytest.fail(f"no check for `{shlex.join(words)}`: teach tests/test_docs.py its cheap form, or put it in "
                    "a ```console block")


@pytest.mark.parametrize(("where", "words"), COMMANDS, ids=[f"{w}:{c[0]}" for w, c in COMMANDS])
def test_documented_command_runs(where, words, capsys, monkeypatch):
    if any(w.startswith("../shared/") for w in words) and not (REPO.parent / "shared" / "data").is_dir():
        pytest.skip("needs ../shared/data")
    try:
        check(words, capsys, monkeypatch)
    except SystemExit as exit_:  # argparse refused an argument: its message is in stderr
        pytest.fail(f"{where}: `{shlex.join(words)}`: the parser refused it ({exit_.code}): "
                    f"{capsys.readouterr().err.strip()}")
    except Exception as err:  # a config error, a missing file, ...
        pytest.fail(f"{where}: `{shlex.join(words)}`: {type(err).__name__}: {err}")


def test_the_docs_hold_commands_of_every_kind():
    # The parser above is only worth something if it finds the commands: a fence renamed by mistake would
    # silently check nothing.
    programs = {words[0] for _, words in COMMANDS}
    assert {"grpo-train", "grpo-eval", "python", "make", "scripts/launch/train.sh", "docker"} <= programs, programs


def test_hf_download_is_checked_by_the_cli_parser():
    import click

    assert hf_download(["download", "openai/gsm8k", "--repo-type", "dataset"])["repo_type"] == "dataset"
    for wrong in (["download", "org/name", "--no-such-flag"], ["download", "org/name", "--repo-type", "corpus"]):
        with pytest.raises(click.UsageError, match="No such option|is not one of"):
            hf_download(wrong)


def test_the_cluster_page_downloads_every_hub_repository_the_configs_load():
    """docs/gpu-and-clusters.md has an `hf download` for each model a config names by hub id and each dataset
    behind data.source gsm8k / math, with the right repository type."""
    import yaml

    from grpo_train.data import HUB_DATASETS

    models = {(yaml.safe_load(path.read_text()).get("model") or {}).get("name_or_path", "")
              for path in (REPO / "configs").glob("*.yaml")}
    wanted = {(m, "model") for m in models if "/" in m and not (REPO / m).exists()}
    wanted |= {(hub_id, "dataset") for hub_id, _, _ in HUB_DATASETS.values()}
    documented = set()
    for where, words in COMMANDS:
        if where.startswith("docs/gpu-and-clusters.md") and words[:2] == ["hf", "download"]:
            params = hf_download(words[1:])
            documented.add((params["repo_id"], params["repo_type"] or "model"))
    assert wanted <= documented, sorted(wanted - documented)


def test_split_commands_and_normalise():
    text = "PIP_X=1 make install && .venv/bin/grpo-train --config 'a b.yaml' x=1  # note\n" \
           "python3 -m grpo_train \\\n    --config c.yaml; echo done | cat"
    assert [normalise(c) for c in split_commands(text)] == [
        ["make", "install"], ["grpo-train", "--config", "a b.yaml", "x=1"],
        ["python", "-m", "grpo_train", "--config", "c.yaml"], ["echo", "done"], ["cat"]]


# ----------------------------------------------------------------------------------------------------
# Links between the pages

def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose(path: Path) -> str:
    """The Markdown outside fenced code blocks."""
    return re.sub(r"^\s*```.*?^\s*```", "", path.read_text(), flags=re.M | re.S)


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", prose(path), re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_reach_a_file_and_a_heading(doc):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(doc)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.name}")
    assert not broken, f"{doc.name}: {broken}"


LAYOUT_NAME = re.compile(r"\w+(?:\.py|/)")  # a module or a folder, as the layout's first column names them
LAYOUT_FILE = re.compile(r"(?<![\w/.])\w+\.py\b")  # a module named in a description (not a path like tests/x.py)


def readme_layout_paths(readme: str) -> set[str]:
    """The paths under grpo_train/ that README.md's layout names, relative to it ("rollout/", "rollout/engines.py").

    The package's block runs from its `grpo_train/` line to the next unindented one. A line indented 2 names
    modules or a folder of the package, one indented 4 modules of the folder above it, in its first column (the names
    before the description); a module named in a description (`aliases.py: ...`) belongs to the line's folder, a
    deeper-indented line continues the one above it."""
    block = readme.split("## Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    start = next(i for i, line in enumerate(block) if line.startswith("grpo_train/"))
    paths: set[str] = set()
    folder = scope = ""
    for line in block[start + 1:]:
        if not line.startswith(" "):
            break
        indent = len(line) - len(line.lstrip())
        words = line.split()
        names = list(itertools.takewhile(LAYOUT_NAME.fullmatch, words))
        if indent == 2:
            folder = scope = next((name for name in names if name.endswith("/")), "")
        elif indent == 4:
            scope = folder
        names = [scope + name if name.endswith(".py") else name for name in names]
        paths.update(names)
        paths.update(scope + name for name in LAYOUT_FILE.findall(" ".join(words[len(names):])))
    return paths


def package_paths() -> set[str]:
    """grpo_train's modules and subpackages (a subpackage's __init__.py goes by its folder's name)."""
    package = REPO / "grpo_train"
    modules = {p.relative_to(package).as_posix() for p in package.glob("*.py")}
    for init in package.glob("*/__init__.py"):
        modules.add(init.parent.name + "/")
        modules.update(f"{init.parent.name}/{p.name}" for p in init.parent.glob("*.py") if p.name != "__init__.py")
    return modules


def layout_mismatch(readme: str) -> tuple[list[str], list[str]]:
    """(modules the layout does not name, names in it that are no module), relative to grpo_train/."""
    named, actual = readme_layout_paths(readme), package_paths()
    return sorted(actual - named), sorted(named - actual)


def test_the_readme_layout_names_every_module_and_nothing_else():
    missing, stale = layout_mismatch((REPO / "README.md").read_text())
    assert not missing, f"README.md's layout does not name grpo_train/ {missing}"
    assert not stale, f"README.md's layout names grpo_train/ {stale}, which do not exist (renamed or removed?)"


def test_the_layout_check_finds_stale_and_missing_names():
    readme = (REPO / "README.md").read_text()
    stale = readme.replace("  trainer.py        ", "  trainer.py step.py", 1).replace(
        "    extract.py", "    config_schema.py extract.py", 1).replace("aliases.py: TRL's", "alias.py: TRL's", 1)
    assert stale != readme
    assert layout_mismatch(stale) == (["config/aliases.py"], ["config/alias.py", "step.py",
                                                              "verifier/config_schema.py"])
