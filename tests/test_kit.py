"""scripts/maint/build_kit.py against a fake package index in a tmp folder (no network): tiny generated wheels for a
fake grpo_train, DeepSpeed, their dependencies and a few base packages (torch, transformers, sympy, nvidia-*), each
with the Requires-Dist lines below. Checks which wheels land in the kit, MANIFEST.json, --max-mib and --out's guards.
Each builder run is ~3 pip calls on local files (a few seconds)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILDER = REPO / "scripts" / "maint" / "build_kit.py"

# name, version, Requires-Dist. Base packages (torch, transformers, sympy, filelock, nvidia-*) pull in
# cuda-bindings and httpx: those must stay out of the kit, as the image ships its base's dependencies.
INDEX = [
    ("torch", "2.13.0", ["nvidia-cublas", "cuda-bindings", "filelock"]),
    ("nvidia-cublas", "13.1.1.3", []),
    ("cuda-bindings", "13.4.4", []),
    ("filelock", "4.2.11", []),
    ("transformers", "5.19.0", ["httpx", "torch"]),
    ("httpx", "0.28.1", []),
    ("sympy", "1.14.0", []),
    ("deepspeed", "0.19.8", ["hjson", "ninja", "pydantic>=2", "torch"]),
    ("hjson", "3.1.0", []),
    ("ninja", "1.13.2", []),
    ("pydantic", "2.14.3", ["pydantic-core==2.50.4"]),
    ("pydantic-core", "2.50.4", []),  # the largest wheel: 1.5 MiB of random bytes
    ("rich", "13.0.0", ["markdown-it-py"]),
    ("rich", "15.0.0", ["markdown-it-py"]),  # newer, but the constraints pin 13.0.0
    ("markdown-it-py", "4.3.0", ["mdurl"]),
    ("mdurl", "0.1.2", []),
    ("math-verify", "0.9.0", ["latex2sympy2-extended", 'exceptiongroup; python_version < "3.12"']),
    ("latex2sympy2-extended", "1.11.0", ["sympy", "antlr4-python3-runtime"]),
    ("antlr4-python3-runtime", "4.13.2", []),
    # six: what only Python 3.12 needs (the builder runs on 3.11); exceptiongroup above: what only 3.11 needs.
    ("vllm", "0.32.0", ["torch==2.13.0", "xgrammar", 'six>=1.16; python_version > "3.11"']),
    ("six", "1.17.0", []),
    ("exceptiongroup", "1.3.0", []),
    ("xgrammar", "0.2.8", []),
    ("datasets", "5.2.0", []),
]
GRPO_TRAIN = ["torch>=2.0", "transformers", "deepspeed>=0.16", "rich>=13", "math-verify",
              'tomli; python_version < "3.11"', 'vllm; extra == "gpu"', 'datasets; extra == "gpu"',
              'datasets; extra == "hub"']
# The lock's pins: base ones (torch, with a local version) are dropped by the builder, else torch would not resolve.
CONSTRAINTS = "torch==9.9.9+cpu\nrich==13.0.0\ndeepspeed==0.19.8\nvllm==0.32.0\n"
LEARNER_KIT = {"grpo_train", "deepspeed", "hjson", "ninja", "pydantic", "pydantic_core", "rich", "markdown_it_py",
               "mdurl", "math_verify", "latex2sympy2_extended", "antlr4_python3_runtime"}


def make_wheel(folder: Path, name: str, version: str, requires: list[str], payload: int = 0) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    extras = sorted({r.split('extra == "')[1].rstrip('"') for r in requires if "extra ==" in r})
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Provides-Extra: {e}\n" for e in extras) + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{name.replace('-', '_')}/__init__.py": "",
    }
    if payload:
        files[f"{name.replace('-', '_')}/blob.bin"] = os.urandom(payload)
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{dist}.dist-info/RECORD"])
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for arcname, data in files.items():
            wheel.writestr(arcname, data)
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("index")
    (root / "wheels").mkdir()
    for name, version, requires in INDEX:
        make_wheel(root / "wheels", name, version, requires, payload=3 * 2**19 if name == "pydantic-core" else 0)
    (root / "own").mkdir()
    make_wheel(root / "own", "grpo_train", "0.1.0", GRPO_TRAIN)
    (root / "constraints.txt").write_text(CONSTRAINTS)
    return root


def build(index: Path, out: Path, *more: str) -> subprocess.CompletedProcess:
    # pip must see the fake index only: no config file, no PIP_* settings of this machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    command = [sys.executable, str(BUILDER), "--out", str(out), "--no-index", "--find-links", str(index / "wheels"),
               "--self-wheel", str(index / "own" / "grpo_train-0.1.0-py3-none-any.whl"),
               "--constraints", str(index / "constraints.txt"), *more]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def kit_names(out: Path) -> set[str]:
    return {p.name.split("-")[0] for p in out.glob("*.whl")}


def test_learner_kit_holds_the_closure_without_the_base(index, tmp_path):
    out = tmp_path / "kit"
    result = build(index, out)
    assert result.returncode == 0, result.stderr
    assert kit_names(out) == LEARNER_KIT  # no torch, nvidia, cuda-bindings, httpx, sympy, vllm, datasets, tomli,
    # exceptiongroup
    assert (out / "rich-13.0.0-py3-none-any.whl").is_file()  # the constraint's pin, not the newest

    manifest = json.loads((out / "MANIFEST.json").read_text())
    sizes = {f["name"]: f["bytes"] for f in manifest["files"]}
    assert sizes == {p.name: p.stat().st_size for p in out.glob("*.whl")}
    assert manifest["total_mib"] == round(sum(sizes.values()) / 2**20, 2)
    assert manifest["flavour"] == "learner" and manifest["target"]["python"] == "3.12"
    assert "torch" in manifest["base_assumed"]
    assert "pip install --no-index --find-links KIT 'grpo_train'" in (out / "INSTALL.txt").read_text()
    assert "pydantic_core-2.50.4-py3-none-any.whl" in result.stdout  # the table of files


def test_glibc_needed_is_the_newest_of_the_wheels_oldest_tags():
    spec = importlib.util.spec_from_file_location("build_kit", BUILDER)
    build_kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_kit)
    assert build_kit.glibc_needed(["a-1-py3-none-any.whl"]) == "any"
    assert build_kit.glibc_needed(["a-1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
                                   "b-1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
                                   "c-1-py3-none-any.whl"]) == "2.27"


def test_full_kit_adds_vllm_and_base_extends(index, tmp_path):
    out = tmp_path / "kit"
    result = build(index, out, "--flavour", "full", "--base", "rich")
    assert result.returncode == 0, result.stderr
    # six: vllm's requirement on Python > 3.11 only, resolved again when the builder runs on 3.11
    full = (LEARNER_KIT - {"rich", "markdown_it_py", "mdurl"}) | {"vllm", "xgrammar", "datasets", "six"}
    assert kit_names(out) == full
    assert "'grpo_train[gpu]'" in (out / "INSTALL.txt").read_text()


def test_max_mib_fails_naming_the_largest_file_and_force_keeps_user_files(index, tmp_path):
    out = tmp_path / "kit"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "stale-0.1-py3-none-any.whl").write_text("from an earlier kit")
    result = build(index, out, "--force", "--max-mib", "1")
    assert result.returncode == 1
    assert "over --max-mib 1" in result.stderr and "pydantic_core-2.50.4-py3-none-any.whl" in result.stderr
    assert (out / "notes.txt").read_text() == "mine"  # --force removes an earlier kit's files only
    assert not (out / "stale-0.1-py3-none-any.whl").exists()


def test_a_non_empty_out_is_refused(index, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = build(index, tmp_path)
    assert result.returncode == 1 and "is not empty" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
