"""Build an offline install kit: a folder of wheels that installs grpo_train on a machine with no network, on top
of a CUDA PyTorch image. Run it where PyPI is reachable, with the project's venv (DeepSpeed's wheel is
built here and its setup.py imports torch):

    .venv/bin/python scripts/maint/build_kit.py --out kit  # learner: rollouts with rollout.engine=hf
    .venv/bin/python scripts/maint/build_kit.py --flavour full --out kit-full  # + CUDA vLLM, the `gpu` extra
    .venv/bin/python scripts/maint/build_kit.py --python 3.11 --base pillow --out kit311

then, on the target (the kit's INSTALL.txt says the same):

    python3 -m venv --system-site-packages /opt/gt
    /opt/gt/bin/pip install --no-index --find-links kit grpo_train     # full: "grpo_train[gpu]"
    /opt/gt/bin/grpo-gpu-check

(or `python3 -m pip install ...` straight into the image's env where its python3 is itself a venv: a venv made
from a venv does not see the first one's packages).

The kit holds what grpo_train needs beyond ASSUMED_BASE (below) for the target's Python and platform:
1. grpo_train's own wheel, built from this checkout (or --self-wheel);
2. DeepSpeed: PyPI has only its sdist, so a pure-Python wheel is built with DS_BUILD_OPS=0 (its ops compile on
   first use on the target, as a CUDA image has nvcc / ninja); a wheel the index offers is taken instead;
3. the wheels of the rest of the requirement closure, resolved by pip for the target without downloading them
   (`pip install --dry-run --report`, PEP 658 metadata), the pins of docker/cpu.lock (learner) or
   docker/gpu.constraints (full) as constraints. The closure stops at base packages: their own dependencies are
   the image's. pip evaluates environment markers for the Python running it, not the target's, so the closure
   is taken with the target's markers, and what only the target needs (vllm: `six; python_version > "3.11"`)
   is added to the requirements and resolved again.
It writes MANIFEST.json and INSTALL.txt, prints the files with their sizes, and exits 1 naming the largest files
if the total exceeds --max-mib (64 for the learner kit). --index-url, --find-links and --no-index go to every pip
call (the tests build against a fake local index).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
# What a CUDA PyTorch image ships (pytorch/pytorch's, NGC's, the GPU machines' 'cuda' image): torch and its own
# dependencies, the Hugging Face core (transformers, tokenizers, hub, safetensors, accelerate, peft), and common
# utilities. The kit leaves these out; the image must have them at versions grpo_train accepts (pip says which
# one it lacks). Every name starting with "nvidia-" is base too. Extend with --base.
ASSUMED_BASE = (
    "torch", "triton", "transformers", "tokenizers", "huggingface-hub", "safetensors", "accelerate", "peft",
    "numpy", "pyyaml", "packaging", "filelock", "fsspec", "jinja2", "markupsafe", "networkx", "sympy", "mpmath",
    "typing-extensions", "requests", "urllib3", "idna", "certifi", "charset-normalizer", "tqdm", "regex", "psutil",
    "setuptools", "pip", "wheel",
)
FLAVOURS = {  # flavour -> (extras of grpo_train, pins used as constraints, default --max-mib)
    "learner": ((), REPO / "docker" / "cpu.lock", 64.0),
    "full": (("gpu",), REPO / "docker" / "gpu.constraints", None),
}
KIT_FILES = ("*.whl", "MANIFEST.json", "INSTALL.txt")  # what --force may remove from --out: an earlier kit
LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def platforms(max_glibc_minor: int = 35) -> list[str]:
    """Every manylinux tag from glibc 2.35 (Ubuntu 22.04, PyTorch's CUDA images; vllm's llguidance needs 2.31)
    down: pip does not expand a manylinux_2_X tag to the older ones."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(max_glibc_minor, 4, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def glibc_needed(wheels: list[str]) -> str:
    """The newest glibc one of the wheels needs (each needs the oldest of its manylinux tags)."""
    needed = (0, 0)
    for wheel in wheels:
        tags = [t for t in wheel.removesuffix(".whl").split("-")[-1].split(".") if t.startswith("manylinux")]
        glibcs = [LEGACY_GLIBC.get(t.split("_")[0]) or (int(t.split("_")[1]), int(t.split("_")[2])) for t in tags]
        needed = max(needed, min(glibcs)) if glibcs else needed
    return f"{needed[0]}.{needed[1]}" if needed > (0, 0) else "any"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_base(name: str, base: set[str]) -> bool:
    return canonical(name) in base or canonical(name).startswith("nvidia-")


def pip(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        sys.exit(f"build_kit: `pip {' '.join(args[:2])} ...` failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def index_args(args: argparse.Namespace) -> list[str]:
    out = ["--no-index"] if args.no_index else []
    out += ["--index-url", args.index_url] if args.index_url else []
    return out + [f"--find-links={link}" for link in args.find_links]


def target_args(args: argparse.Namespace) -> list[str]:
    return ["--only-binary=:all:", "--python-version", args.python, *[f"--platform={p}" for p in args.platform]]


def prepare_out(out: Path, force: bool) -> None:
    """Refuse a non-empty folder; with --force remove only the files of an earlier kit (KIT_FILES) from it."""
    if out.exists() and any(out.iterdir()):
        if not force:
            sys.exit(f"build_kit: {out} is not empty; choose another --out, or --force to replace the kit there "
                     f"(removes only {', '.join(KIT_FILES)})")
        for pattern in KIT_FILES:
            for path in out.glob(pattern):
                path.unlink()
    out.mkdir(parents=True, exist_ok=True)


def read_pins(path: Path) -> dict[str, str]:
    """name -> version of each `name==version` line (a local version such as 2.13.0+cpu is dropped)."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][\w.-]*)==([^\s#;+]+)\s*(#.*)?$", line.strip())
        if m:
            pins[canonical(m[1])] = m[2]
    return pins


def self_wheel(out: Path, given: Path | None) -> Path:
    """grpo_train's wheel, built from a copy of what it packages (setuptools' build/ in the checkout would keep
    a deleted module in every later wheel)."""
    if given:
        return Path(shutil.copy2(given, out))
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(REPO / "grpo_train", Path(tmp, "grpo_train"), ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, tmp)
        pip("wheel", "--no-deps", "--no-build-isolation", tmp, "-w", str(out))
    return next(out.glob("grpo_train-*.whl"))


def deepspeed_wheel(out: Path, version: str, args: argparse.Namespace) -> Path:
    """The index's wheel if it has one, else a pure-Python wheel built from the sdist (no ops compiled)."""
    spec = f"deepspeed=={version}"
    found = pip("download", "--no-deps", *target_args(args), *index_args(args), "-d", str(out), spec, check=False)
    if found.returncode != 0:
        print(f"{spec}: no wheel on the index; building a pure-Python one (DS_BUILD_OPS=0)", flush=True)
        pip("wheel", "--no-deps", "--no-build-isolation", "--no-binary=deepspeed", *index_args(args),
            "-w", str(out), spec, env={"DS_BUILD_OPS": "0"})
    wheel = next(out.glob(f"deepspeed-{version}-*.whl"))
    if not wheel.name.endswith("-py3-none-any.whl"):
        sys.exit(f"build_kit: {wheel.name} is not a pure-Python wheel; it would not install on the target")
    return wheel


def resolve(requirements: list[str], constraints: dict[str, str], out: Path, args: argparse.Namespace) -> dict:
    """pip's resolution for the target as its JSON report. pip reads each wheel's metadata from the index's
    PEP 658 file, or where the index has none (some mirrors) from HTTP range requests (fast-deps), so the
    closure of torch (~2.5 GB of CUDA wheels) is never downloaded; a whole wheel fetched anyway is reported."""
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp, "constraints.txt")
        pins.write_text("".join(f"{name}=={version}\n" for name, version in constraints.items()))
        report = Path(tmp, "report.json")
        log = pip("install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps", "--report", str(report),
                  *target_args(args), *index_args(args), f"--find-links={out}", "-c", str(pins), *requirements)
        fetched = re.findall(r"Downloading (\S+\.whl) \((.+?)\)", log.stdout)
        if fetched:
            print(f"resolving downloaded {len(fetched)} whole wheels: {fetched}")
        return json.loads(report.read_text())


def target_env(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def closure(report: dict, root: str, base: set[str], python: str) -> tuple[dict[str, str], list[str]]:
    """name -> version of what `root` needs on the target, not descending into base packages; and the
    requirements (markers dropped) that the target needs but pip, on another Python, did not resolve."""
    items = {canonical(i["metadata"]["name"]): i for i in report["install"]}
    env = target_env(python)
    root = canonical(root)
    extras_of = {root: set(items[root].get("requested_extras") or [])}  # the extras each package is needed with
    todo, missing = [root], []
    while todo:
        name = todo.pop()
        for line in items[name]["metadata"].get("requires_dist", []):
            req = Requirement(line)
            dep = canonical(req.name)
            if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in ["", *extras_of[name]]):
                continue
            if is_base(dep, base):
                continue
            if dep not in items:
                req.marker = None
                missing.append(str(req))
            elif dep not in extras_of or not req.extras <= extras_of[dep]:
                extras_of[dep] = extras_of.get(dep, set()) | req.extras
                todo.append(dep)
    return {name: items[name]["metadata"]["version"] for name in extras_of}, missing


def write_manifest(out: Path, args: argparse.Namespace, base: list[str], install: str) -> tuple[list, float]:
    files = sorted(((p.name, p.stat().st_size) for p in out.glob("*.whl")), key=lambda f: (-f[1], f[0]))
    total_mib = sum(size for _, size in files) / 2**20
    glibc = glibc_needed([name for name, _ in files])
    manifest = {
        "target": {"python": args.python, "glibc_min": glibc, "platforms": args.platform}, "flavour": args.flavour,
        "base_assumed": base, "install": install, "total_mib": round(total_mib, 2),
        "files": [{"name": name, "bytes": size} for name, size in files],
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return files, total_mib


def install_text(args: argparse.Namespace, spec: str, base: list[str], glibc: str) -> str:
    return (
        f"grpo_train offline install kit: flavour {args.flavour}, Linux x86_64, Python {args.python}, glibc {glibc} "
        f"or newer; built {datetime.date.today()}, its files listed in MANIFEST.json.\n"
        f"It assumes the image already has: {', '.join(base)}, nvidia-* (and their own dependencies).\n\n"
        f"Install with no network (KIT = this folder), in a venv that sees the image's torch:\n\n"
        f"  python3 -m venv --system-site-packages /opt/gt\n"
        f"  /opt/gt/bin/pip install --no-index --find-links KIT '{spec}'\n"
        f"  /opt/gt/bin/grpo-gpu-check\n\n"
        f"Where the image's python3 is itself a venv (python3 -c 'import sys; print(sys.prefix != sys.base_prefix)'\n"
        f"prints True), a venv made from it does not see its packages: install into it instead,\n"
        f"  python3 -m pip install --no-index --find-links KIT '{spec}' && grpo-gpu-check\n\n"
        + ("" if args.flavour == "full" else "Rollouts of this kit run with rollout.engine=hf (no vLLM in it).\n")
        + "If pip names a package it cannot find, the image lacks it or has a version grpo_train does not accept.\n")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavour", choices=sorted(FLAVOURS), default="learner",
                   help="learner: no vLLM (rollouts with the hf engine); full: + CUDA vllm (the gpu extra)")
    p.add_argument("--python", default="3.12", help="the target's Python (major.minor)")
    p.add_argument("--platform", nargs="+", default=platforms(), help="the target's wheel platform tags")
    p.add_argument("--out", type=Path, required=True, help="the kit folder (new or empty)")
    p.add_argument("--force", action="store_true", help="replace an earlier kit in --out (only its files)")
    p.add_argument("--max-mib", type=float, help="fail above this total (default: 64 learner, none full)")
    p.add_argument("--base", nargs="+", default=[], metavar="NAME", help="more packages the image has")
    p.add_argument("--constraints", type=Path, help="pins (default: docker/cpu.lock or docker/gpu.constraints)")
    p.add_argument("--self-wheel", type=Path, help="reuse this grpo_train wheel instead of building one")
    p.add_argument("--index-url", help="passed to pip")
    p.add_argument("--find-links", action="append", default=[], help="passed to pip (repeatable)")
    p.add_argument("--no-index", action="store_true", help="passed to pip")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    extras, default_constraints, default_max_mib = FLAVOURS[args.flavour]
    max_mib = args.max_mib if args.max_mib is not None else default_max_mib
    base = sorted({canonical(n) for n in (*ASSUMED_BASE, *args.base)})
    pins = read_pins(args.constraints or default_constraints)
    if "deepspeed" not in pins:
        sys.exit(f"build_kit: {args.constraints or default_constraints} pins no deepspeed version")
    out = args.out.resolve()
    prepare_out(out, args.force)

    own = self_wheel(out, args.self_wheel)
    deepspeed_wheel(out, pins["deepspeed"], args)
    # Base packages are not pinned: the image's versions are whatever it has, not the lock's (e.g. torch+cpu).
    constraints = {name: v for name, v in pins.items() if not is_base(name, set(base)) and name != "grpo-train"}
    requirement = f"{own}[{','.join(extras)}]" if extras else str(own)
    requirements = [requirement]
    for _ in range(5):
        needed, missing = closure(resolve(requirements, constraints, out, args), "grpo_train", set(base), args.python)
        new = sorted(set(missing) - set(requirements))
        if not new:
            break
        print(f"Python {args.python} also needs {new} (pip evaluated markers for this Python); resolving again")
        requirements += new
    if missing:
        sys.exit(f"build_kit: the closure for Python {args.python} does not close; still missing: {missing}")
    rest = sorted(f"{name}=={v}" for name, v in needed.items() if name not in ("grpo-train", "deepspeed"))
    if rest:
        pip("download", "--no-deps", *target_args(args), *index_args(args), "-d", str(out), *rest)

    spec = f"grpo_train[{','.join(extras)}]" if extras else "grpo_train"
    files, total_mib = write_manifest(out, args, base, f"pip install --no-index --find-links KIT '{spec}'")
    (out / "INSTALL.txt").write_text(install_text(args, spec, base, glibc_needed([name for name, _ in files])))
    for name, size in files:
        print(f"{size / 2**20:9.2f} MiB  {name}")
    print(f"{total_mib:9.2f} MiB  total, {len(files)} wheels in {out} (flavour {args.flavour}, Python {args.python})")
    if max_mib is not None and total_mib > max_mib:
        largest = ", ".join(f"{name} ({size / 2**20:.1f} MiB)" for name, size in files[:3])
        sys.exit(f"build_kit: the kit is {total_mib:.1f} MiB, over --max-mib {max_mib:g}; largest: {largest}")


if __name__ == "__main__":
    main()
