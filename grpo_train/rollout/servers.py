"""Rollout servers: the learner sends its prompts to vLLM servers (`vllm serve`) and pushes its weights into them.

    rollout:
      placement: servers
      servers: {count: 1}                              # the run starts one server beside the learner
      # servers: {urls: [http://node7:8000]}           # or uses servers already running (server_launch.server_command)

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
- `POST /pause?mode=keep`, `/resume`: around each weight transfer (`load_weights`).
- `GET /health`, `/version`, `/v1/models`, `/get_world_size`: the start-up checks (`check_server`), which refuse a
  server that is unreachable, runs another vLLM version or another model, has a shorter context, or lacks a route.
Starting, checking and stopping the server processes: rollout/server_launch.py.

Prompts go to the servers round-robin (prompt i to server i mod count), all at once, so each server batches them.
Every request and wait has a deadline (rollout.servers.timeout_s) and its error names the server's URL.

Servers the run starts (`server_launch.start_servers`): one process group each, a child of the learner that gets
SIGTERM when the learner dies (prctl PR_SET_PDEATHSIG, also on kill -9), stopped by `close()` at the end of the run
and by an atexit hook on an exception; their output goes to <run.output_dir>/rollout_server_<i>.log.

Several learner ranks (torchrun) share the servers: rank 0 starts them and sends the weights, the other ranks take
their part in each ZeRO-3 gather, every rank sends its own prompts (the prefix cache is then emptied at each
transfer, not per batch), and every rank waits for the end of rank 0's transfer.

A server lost mid-run (a request or transfer that fails or runs past its deadline): rollout.servers.on_failure
says whether it is brought back (restarted, or awaited at its URL) and given the learner's weights before its
requests go again, left out (its requests go to the others), or ends the run. Several learner ranks agree first:
each waits for its own requests, the ranks exchange the servers they found lost (`answers`; a transfer's, from rank
0), and all of them recover from the same losses together (rank 0 restarts a server and sends it the weights, every
rank takes its part in the gathers and sends its failed requests again).

Asynchronous rollouts (rollout.max_staleness k >= 1): rollout/server_pool.py keeps the groups in flight on the servers
through the learner's update; `load_weights` pauses them around the transfer (vLLM's /pause?mode=keep, /resume) and
the servers label each token with the weights' version.

Time accounting: `take_times` (server busy time, the learner's wait, the bytes transferred, servers lost), per step.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import subprocess
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import torch

from grpo_train.config import Config, ConfigError
from grpo_train.models import resolve_model
from grpo_train.rollout.records import Rollout, SamplingSpec, rollout_seed
from grpo_train.rollout.server_launch import (
    ServerError,
    await_health,
    call_server,
    check_server,
    learner_device,
    note,
    start_server,
    start_servers,
    stop_servers,
    wait_ready,
)
from grpo_train.rollout.vllm_args import sampling_fields

MAX_ATTEMPTS = 3  # a request sent again after its server was lost: at most this many times
MAX_REQUESTS_IN_FLIGHT = 4096  # per learner rank: one thread each (a rollout pool's (k + 1) x B x G completions)


def choice_logprobs(choice: dict) -> list[float]:
    """The sampler's log-prob of each token of one choice in the token route's answer (logprobs=0: the sampled
    token's only)."""
    return [c["logprob"] for c in choice["logprobs"]["content"]]


# ----------------------------------------------------------------------------------------------------
# The engine


@dataclass
class Sent:
    """A request in flight to a server: what `ServerEngine.answer` needs to send it again if the server is lost."""

    server: int
    recoveries: int  # the server's recoveries when it was sent (rollout.servers.on_failure)
    future: Future
    token_ids: list[int]
    spec: SamplingSpec
    seed: int
    request_id: str | None = None
    read_s: float | None = None  # the HTTP read deadline; None: rollout.servers.timeout_s

    @property
    def answered(self) -> bool:
        """Its answer is in (without waiting)."""
        return self.future.done() and self.future.exception() is None


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
        # Per server: this rank's requests in flight (their ids) and since when it has had any; busy_s, the time it
        # had some, since take_times(). A rollout pool's requests stay in flight across the learner's update.
        self.lock = threading.Lock()
        self.pending: list[set[str]] = [set() for _ in urls]
        self.busy_since: list[float | None] = [None] * len(urls)
        self.busy_s = [0.0] * len(urls)
        self.wait_s = 0.0  # time this rank waited on the servers (generate(), a rollout pool's phase)
        self.sent_bytes = 0  # weight bytes pushed into the servers (all of them)
        # A server lost mid-run (rollout.servers.on_failure; one learner process): `wait` brings it back (restart(i),
        # i -> its new process and URL, for the servers this run started; else its URL answering /health again) and
        # pushes it the last weights before any request; `others` leaves it out for the rest of the run.
        self.on_failure, self.restart = on_failure, restart
        self.alive = [True] * len(urls)
        # Per server, the times it was brought back or left out: a request sent before then knows to go again.
        self.recoveries = [0] * len(urls)
        self.weights = None  # the last weights pushed (transfer.LearnerSource), for a server brought back
        self.weight_bytes = 0  # theirs, in the servers' dtype: what one server receives
        self.lost = 0  # servers lost since take_times()
        self.requests_sent = 0  # request ids of their own for the requests without one
        # Threads are started as requests need them: a rollout pool keeps (k + 1) x B x G requests in flight.
        self.threads = ThreadPoolExecutor(max_workers=MAX_REQUESTS_IN_FLIGHT, thread_name_prefix="rollout-request")
        atexit.register(self.close)  # an exception ends the run without reaching close(): the servers go too

    def generate(self, prompt_token_ids: list[list[int]], spec: SamplingSpec) -> list[Rollout]:
        """spec.n completions per prompt, prompt-major, seeded as in VLLMEngine; this rank's prompt i goes to server
        (i * ranks + rank) mod count, so that the ranks' prompts spread over the servers. Collective with several
        learner ranks (`answers`): every rank calls it at the same points, with its own prompts (maybe none)."""
        if self.world == 1:  # a batch's output depends on (weights, prompts, spec), not on earlier batches
            # (several ranks: emptied around each transfer, load_weights); a server brought back starts empty
            self._recover(self._post_each("/reset_prefix_cache", "emptying the prefix cache"))
        start = time.perf_counter()
        sent = [self.submit(ids, spec, rollout_seed(spec.seed, i), index=i)
                for i, ids in enumerate(prompt_token_ids)]
        answers = self.answers(sent)
        self.wait_s += time.perf_counter() - start
        rollouts = []
        for i, answer in enumerate(answers):
            for choice in sorted(answer["choices"], key=lambda c: c["index"]):
                rollouts.append(Rollout(prompt_index=i, prompt_token_ids=list(prompt_token_ids[i]),
                                        completion_token_ids=choice["token_ids"], logprobs=choice_logprobs(choice),
                                        finish_reason=choice["finish_reason"],
                                        truncated=choice["finish_reason"] == "length"))
        return rollouts

    # Request-level API (generate, and the rollout pool over servers: rollout/server_pool.py)
    def submit(self, token_ids: list[int], spec: SamplingSpec, seed: int, index: int, request_id: str | None = None,
               read_s: float | None = None) -> Sent:
        """Send one request (spec.n completions of token_ids) to server (index * ranks + rank) mod the live servers;
        its answer comes with `answer`. `read_s`: the HTTP read deadline, if not rollout.servers.timeout_s (a pool's
        request may stay in flight over several steps)."""
        alive = [server for server, up in enumerate(self.alive) if up]
        server = alive[(index * self.world + self.rank) % len(alive)]
        if request_id is None:
            self.requests_sent += 1
            request_id = f"rank{self.rank}-{self.requests_sent}"
        sent = Sent(server, self.recoveries[server], None, list(token_ids), spec, seed, request_id, read_s)
        sent.future = self.threads.submit(self._generate_one, server, sent)
        return sent

    def answers(self, sents: list[Sent], deadline: float | None = None) -> list[dict]:
        """The answers (the token route's JSON) to these requests, in order. A request whose server was lost goes
        again, with its own seed, once the learner ranks have agreed on the loss and recovered from it (`_recover`:
        the server brought back or left out, rollout.servers.on_failure). `deadline` (time.monotonic()): a server
        that has not answered by then counts as lost (a rollout pool's phase; without it the HTTP read deadline
        bounds the wait).

        Collective with several learner ranks: every rank calls it at the same points (a step's rollout, the eval,
        the sync check, a rollout pool's phase), with its own requests (maybe none), and the ranks exchange the
        servers each found lost after each round of waiting, so that all of them recover from the same losses."""
        results: list[dict | None] = [None] * len(sents)
        for attempt in range(MAX_ATTEMPTS + 1):
            failed: dict[int, ServerError] = {}
            for i, sent in enumerate(sents):
                if results[i] is None:
                    try:
                        results[i] = self._result(sent, deadline)
                    except ServerError as err:
                        failed[i] = err
            # Lost since their requests were sent (a server recovered since then has nothing more to recover from)
            seen = {sents[i].server: str(err) for i, err in failed.items()
                    if sents[i].recoveries == self.recoveries[sents[i].server]}
            lost, failing = self._agree(seen, [str(err) for err in failed.values()][:1])
            if not failing:
                return results  # type: ignore[return-value]  # every request answered, on every rank
            if attempt == MAX_ATTEMPTS:
                raise ServerError(f"rollout servers: requests of learner rank(s) {sorted(failing)} failed "
                                  f"{MAX_ATTEMPTS + 1} times; the last error: {next(iter(failing.values()))}")
            self._recover(lost)
            for i in failed:
                self._resend(sents[i])
            if deadline is not None:
                deadline = time.monotonic() + self.timeout_s
        raise AssertionError("unreachable")

    def refresh(self, sent: Sent) -> None:
        """A request still in flight (a rollout pool's) whose server was recovered since it was sent: sent again, unless
        its answer came before the loss."""
        if sent.recoveries != self.recoveries[sent.server] and not sent.answered:
            self._resend(sent)

    def _result(self, sent: Sent, deadline: float | None) -> dict:
        if deadline is None:
            return sent.future.result()
        try:
            return sent.future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise ServerError(f"rollout server {self.urls[sent.server]}: request {sent.request_id} gave no "
                              f"answer within rollout.servers.timeout_s = {self.timeout_s:g} s of the learner's "
                              "wait") from None

    def _resend(self, sent: Sent) -> None:
        """The request again, to its server (brought back) or, if that one was left out, to another live one."""
        if not self.alive[sent.server]:
            alive = [i for i, up in enumerate(self.alive) if up]
            sent.server = alive[sent.server % len(alive)]
        sent.recoveries = self.recoveries[sent.server]
        sent.future = self.threads.submit(self._generate_one, sent.server, sent)

    def _generate_one(self, server: int, sent: Sent) -> dict:
        """The server's answer to one request (in a request thread); the server counts as busy meanwhile."""
        url = self.urls[server]
        body = {"token_ids": sent.token_ids, "sampling_params": sampling_fields(sent.spec, sent.seed),
                "request_id": sent.request_id}
        self._busy(server, sent.request_id, True)
        try:
            return call_server("POST", url, "/inference/v1/generate", sent.read_s or self.timeout_s,
                               f"generating {sent.spec.n} completion(s)", json=body).json()
        finally:
            self._busy(server, sent.request_id, False)

    def _busy(self, server: int, request_id: str, starts: bool) -> None:
        now = time.perf_counter()
        with self.lock:
            pending = self.pending[server]
            if starts:
                if not pending:
                    self.busy_since[server] = now
                pending.add(request_id)
            else:
                pending.discard(request_id)
                if not pending and self.busy_since[server] is not None:
                    self.busy_s[server] += now - self.busy_since[server]
                    self.busy_since[server] = None

    def _post_each(self, path: str, what: str, servers: Iterable[int] | None = None) -> dict[int, str]:
        """POST `path` to these servers (default: the live ones), one after the other; returns the errors of those
        that failed, by server."""
        failed = {}
        for server in (servers if servers is not None else range(len(self.urls))):
            if self.alive[server]:
                try:
                    call_server("POST", self.urls[server], path, self.timeout_s, what)
                except ServerError as err:
                    failed[server] = str(err)
        return failed

    def _agree(self, lost: dict[int, str], errors: list[str]) -> tuple[dict[int, str], dict[int, str]]:
        """Every learner rank's view (the servers it found lost, with their errors; one of its requests' errors, if
        any failed) -> the servers any rank found lost, and the ranks with failed requests (rank -> an error).
        Collective with several ranks (all_gather_object, within the process group's timeout)."""
        views = [(lost, errors)]
        if self.world > 1:
            views = [None] * self.world
            torch.distributed.all_gather_object(views, (lost, errors))
        union: dict[int, str] = {}
        for seen, _ in views:
            for server, error in seen.items():
                union.setdefault(server, error)
        return union, {rank: errs[0] for rank, (_, errs) in enumerate(views) if errs}

    def _recover(self, lost: dict[int, str]) -> None:
        """The servers lost (by index, with the error naming each; the same on every learner rank), each brought back
        with the learner's weights or left out (rollout.servers.on_failure); raises with the setting `stop` or when
        no server is left. Collective with several ranks: rank 0 restarts (or awaits) a server and sends it the
        weights, every rank takes its part in the gathers."""
        for server in sorted(lost):
            err = ServerError(lost[server])
            if self.on_failure == "stop":
                raise err
            self.lost += 1
            self.recoveries[server] += 1  # the requests sent before now go again (answers, refresh)
            if self.transfer is not None:
                self.transfer.forget(server)  # its group lost a member: a new one with the server back
            if self.on_failure == "others":
                self.alive[server] = False
                if not any(self.alive):
                    raise ServerError(f"{err}; no rollout server is left (rollout.servers.on_failure others)")
                note(f"{err}\n  -> rollout.servers.on_failure others: leaving {self.urls[server]} out for the rest "
                     "of the run; its requests go to the other servers")
                continue
            what = "restarting it" if self.restart is not None else (
                f"waiting up to rollout.servers.timeout_s = {self.timeout_s:g} s for it to answer again")
            note(f"{err}\n  -> rollout.servers.on_failure wait: {what}, then pushing it the learner's weights and "
                 "sending its requests again")
            self._bring_back(server)
            note(f"rollout server {self.urls[server]} is back with the learner's weights")

    def _bring_back(self, server: int) -> None:
        """Server `server` again, with the last weights pushed: restarted (a server this run started) or awaited at
        its URL (one started elsewhere, e.g. by Slurm, which restarts it). Rank 0 does it and tells the others the
        outcome (and the URL: a restarted server has a new port)."""
        error = ""
        if self.rank == 0:
            try:
                if self.restart is not None:
                    self.processes[server], self.urls[server] = self.restart(server, self.processes[server])
                elif not await_health(self.urls[server], self.timeout_s):
                    error = (f"rollout server {self.urls[server]} was lost and did not answer /health again within "
                             f"rollout.servers.timeout_s = {self.timeout_s:g} s")
            except (ServerError, ConfigError) as err:
                error = str(err)
        url, error = self._from_rank0((self.urls[server], error))
        self.urls[server] = url
        if error:
            raise ServerError(error)
        if self.weights is not None:
            failed = self._from_rank0(self._send({server}))  # every rank gathers, rank 0 sends
            if failed:
                raise ServerError(f"{failed[server]} (after it was brought back)")

    def _from_rank0(self, value):
        """Rank 0's `value`, on every learner rank (a broadcast with several)."""
        if self.world == 1:
            return value
        shared = [value]
        torch.distributed.broadcast_object_list(shared, src=0)
        return shared[0]

    def take_times(self) -> dict[str, float]:
        """Where the time went since the last call (the trainer's step): `perf/server_busy_s`, the mean over servers
        of the time they had this rank's requests in flight (a rollout pool's: also through the learner's update);
        `perf/learner_wait_s`, the time the learner waited on them for rollouts; `perf/transfer_bytes`, the weight
        bytes pushed into all servers. docs/metrics.md."""
        now = time.perf_counter()
        with self.lock:  # a server still busy: its time so far counts now, the rest at the next call
            for server, since in enumerate(self.busy_since):
                if since is not None:
                    self.busy_s[server] += now - since
                    self.busy_since[server] = now
            busy, self.busy_s = self.busy_s, [0.0] * len(self.urls)
        times = {"perf/server_busy_s": sum(busy) / len(self.urls), "perf/learner_wait_s": self.wait_s,
                 "perf/transfer_bytes": float(self.sent_bytes), "rollout/servers_lost": float(self.lost)}
        self.wait_s, self.sent_bytes, self.lost = 0.0, 0, 0
        return times

    def load_weights(self, named_tensors) -> None:
        """Push the learner's weights (grpo_train.hf_weights.PolicyWeights: re-iterable, with `metadata()` and
        `version`) into every server through vLLM's weight transfer (rollout/transfer.py); the servers keep running.
        Every rank calls it: rank 0 sends, the others take their part in each ZeRO-3 gather.

        Around the transfer rank 0 pauses each server with vLLM's `/pause?mode=keep` and resumes it after: requests
        in flight (a rollout pool's, any rank's) are frozen, not lost; the pause empties the server's caches, so a
        frozen request recomputes its keys and values under the new weights when it goes on (vLLM's
        reset_prefix_cache with reset_running_requests), and no prompt meets keys and values of the old weights.
        The servers label the tokens they sample from then on with the weights' version (vLLM's weight_versions)."""
        from grpo_train.rollout.transfer import LearnerSource

        if not hasattr(named_tensors, "metadata"):
            raise TypeError("ServerEngine.load_weights takes the learner's PolicyWeights (grpo_train/hf_weights.py): "
                            "the transfer declares names, dtypes and shapes before the tensors")
        self.weights = LearnerSource(named_tensors, self.dtype)
        self.weight_bytes = sum(m.dtype.itemsize * math.prod(m.shape) for m in self.weights.metadata())  # per server
        targets = {i for i, up in enumerate(self.alive) if up}
        lost = {} if self.rank else self._post_each("/pause?mode=keep", "pausing generation for the weight update")
        lost.update(self._send(targets - set(lost)))
        if self.rank == 0:
            for i, error in self._post_each("/resume", "resuming generation after the weight update",
                                            sorted(targets)).items():
                lost.setdefault(i, error)
        # The other ranks are done when their part of the gathers is; they wait for rank 0's transfer to end (a server
        # in the middle of its reload must not get their prompts: its layers are on the meta device) and learn from
        # it which servers were lost, to recover from them together.
        self._recover(self._from_rank0(lost))

    def _send(self, servers: set[int]) -> dict[int, str]:
        """The last weights into these servers, from one pass over them (transfer.ServersTransfer); returns the servers
        lost meanwhile, with errors naming them."""
        from grpo_train.rollout.transfer import ServersTransfer

        if self.transfer is None:
            self.transfer = ServersTransfer(self.urls, self.world_sizes, rank=self.rank, timeout_s=self.timeout_s)
        lost = self.transfer.send(self.weights, only=servers, version=str(self.weights.version))
        self.sent_bytes += self.weight_bytes * (len(servers) - len(lost))
        return lost

    def sleep(self) -> None:
        """Nothing to free: the servers have their own devices."""

    def close(self) -> None:
        """Release the transfer groups (a server started elsewhere can take another trainer), stop the servers this
        run started; a server started elsewhere is told to abort this rank's requests still in flight (a rollout
        pool's). Idempotent."""
        for server, url in enumerate(self.urls):
            with self.lock:
                ids = sorted(self.pending[server])
            if ids and self.alive[server] and not self.processes:
                with contextlib.suppress(ServerError):  # best effort: the run is ending
                    call_server("POST", url, "/abort_requests", 30.0, "aborting this run's requests",
                                json={"request_ids": ids})
        if self.transfer is not None:
            self.transfer.shutdown()
            if not self.processes and self.rank == 0:
                for url, up in zip(self.urls, self.alive, strict=True):
                    with contextlib.suppress(ServerError):  # best effort: the run is ending
                        if up:
                            call_server("POST", url, "/shutdown_weight_transfer_engine", 30.0,
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

    def restart(i: int, old: subprocess.Popen) -> tuple[subprocess.Popen, str]:
        """Server i again, after its process (group) is stopped: a new process on a new port, ready."""
        stop_servers([old])
        process, url, log = start_server(cfg, model_path, seed, on_gpu, i)
        try:
            wait_ready(process, url, log, time.monotonic() + s.timeout_s, s.timeout_s)
            check_server(url, cfg, model_path, started=True)
        except BaseException:
            stop_servers([process])
            raise
        return process, url

    return ServerEngine(urls, dtype=getattr(torch, cfg.model.dtype), world_sizes=world_sizes,
                        timeout_s=s.timeout_s, processes=processes, rank=rank, world=world,
                        on_failure=s.on_failure, restart=restart if processes else None)


def _rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1
