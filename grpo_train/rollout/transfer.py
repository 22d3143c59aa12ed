"""Weight transfer from the learner to vLLM rollout servers, through the weight-transfer engines vLLM ships.

vLLM 0.32 (read in vllm/distributed/weight_transfer/base.py, factory.py, nccl_engine.py, clients.py and
vllm/entrypoints/rl/online/api_router.py): a server started with `--weight-transfer-config '{"backend": B}'`
builds a worker-side `WeightTransferEngine` for backend B next to its model. The trainer drives it over HTTP
(`/init_weight_transfer_engine` once; `/start_weight_update`, `/update_weights`, `/finish_weight_update` per
update, vLLM's `HTTPVLLMWeightSyncClient`) while a trainer-side engine streams the tensors over a side channel,
in the order, dtypes and shapes it declared in `/update_weights`; the worker loads them with the model's
`load_weights` inside vLLM's layerwise reload (each layer's weight processing re-runs once all its tensors came),
the same path as the colocated engine's `reload_weights`. Nothing restarts.

- GPU: backend `nccl`, vLLM's `NCCLWeightTransferEngine` and `NCCLTrainerWeightTransferEngine` as shipped.
- CPU: NCCL is CUDA only, and vLLM's other backends (CUDA IPC, RDMA) are too. Backend `gloo` here is the same two
  classes with the NCCL communicator replaced by a torch.distributed gloo group over TCP (vLLM's stateless group
  helper), unpacked, with a deadline on every collective: `init_transfer_engine`, `receive_weights` and the
  trainer's `trainer_init`, `_broadcast` differ, everything else (the handshake, the metadata check, the layerwise
  reload) is vLLM's. It is registered with vLLM's own `WeightTransferEngineFactory`; a server registers it by
  importing this module, which `--worker-extension-cls grpo_train.rollout.transfer.GlooTransfer` makes its worker
  do before it builds the engine, whatever the process layout (fork or spawn).

One rank sends: the learner's rank 0 (every rank iterates the weights, a collective under ZeRO-3). One transfer
group per server (world: the sender and the server's tensor-parallel workers), all fed from one pass over the
weights (`ServersTransfer`): a server lost mid-transfer is left out alone, the others receive every tensor.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

import requests
import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource
from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    NCCLWeightTransferEngine,
    NCCLWeightTransferInitInfo,
    NCCLWeightTransferUpdateInfo,
)

from grpo_train.distributed import free_port

# ----------------------------------------------------------------------------------------------------
# The CPU backend: vLLM's NCCL engines over a gloo group


def _gloo_group(host: str, port: int, rank: int, world_size: int, timeout_s: float,
                listen_socket: socket.socket | None = None):
    """A gloo process group outside the global torch.distributed state (the learner's world and the server's own
    stay untouched). Every collective on it fails after timeout_s.

    Rank 0 (the learner's sender) hosts the group's TCP store on listen_socket, bound beforehand. Without it,
    vLLM's helper goes through torch's tcp:// rendezvous, which under torchrun (TORCHELASTIC_USE_AGENT_STORE=True)
    makes every rank a client of a store it expects torchrun's agent to host: nobody hosts it, the server's
    workers time out reaching it, and a learner with several ranks hangs."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    return stateless_init_torch_distributed_process_group(host, port, rank, world_size, backend="gloo",
                                                          listen_socket=listen_socket,
                                                          timeout=timedelta(seconds=timeout_s))


def listening_socket(address: str) -> socket.socket:
    """A TCP socket bound to a free port of address and listening: the transfer group's store, its port known
    before the server is told it (no window for another process to take the port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen()
    return sock


@dataclass(kw_only=True)
class GlooInitInfo(NCCLWeightTransferInitInfo):
    """The worker's side of the handshake: NCCL's fields (master address and port, rank offset, world size) and the
    deadline of every collective."""

    timeout_s: float = 600.0


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """The server side on CPU: receives each tensor by a gloo broadcast from the sender, one at a time, and loads it
    into the model inside vLLM's layerwise reload (start/finish_weight_update are NCCL's)."""

    init_info_cls = GlooInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        p = self.parallel_config
        rank = init_info.rank_offset + p.data_parallel_index * p.world_size + p.rank  # NCCL's rank rule
        self.model_update_group = _gloo_group(init_info.master_address, init_info.master_port, rank,
                                              init_info.world_size, init_info.timeout_s)

    def update_weights(self, update_info: dict) -> None:
        self.receive_weights(self.parse_update_info(update_info))  # no device to synchronise with

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.model_update_group is None:
            raise RuntimeError("gloo weight transfer: /update_weights before /init_weight_transfer_engine")
        for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes,
                                           strict=True):
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name))
            self.model_update_group.broadcast(weight, 0).wait()
            self.model.load_weights([(name, weight)])

    def shutdown(self) -> None:
        if self.model_update_group is not None:
            self.model_update_group.shutdown()
            self.model_update_group = None


@dataclass
class GlooTrainerInitInfo(NCCLTrainerInitInfo):
    backend: ClassVar[str] = "gloo"
    packed: bool = False  # one broadcast per tensor: gloo has no CUDA streams to overlap packing with
    timeout_s: float = 600.0
    listen_socket: socket.socket | None = None  # the sender's store (listening_socket), bound to master_port


class GlooTrainerWeightTransferEngine(NCCLTrainerWeightTransferEngine):
    """The learner side on CPU: NCCL's `send_weights` (start, update_weights beside the broadcasts, finish) over a
    gloo group."""

    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client, source=None):
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, packed=False)
        if not engine.is_sender:
            return engine
        worker_info = dict(master_address=init_info.master_address, master_port=init_info.master_port,
                           rank_offset=1, world_size=init_info.world_size, timeout_s=init_info.timeout_s)
        # The server's workers block in the rendezvous inside /init_weight_transfer_engine: both sides join together.
        with ThreadPoolExecutor(max_workers=1) as exe:
            future = exe.submit(client.init_weight_transfer_engine, worker_info)
            engine.model_update_group = _gloo_group(init_info.master_address, init_info.master_port, 0,
                                                    init_info.world_size, init_info.timeout_s,
                                                    listen_socket=init_info.listen_socket)
            future.result()
        return engine

    def _broadcast(self, source: WeightSource, meta: list[ParamMeta]) -> None:
        if not self.is_sender:
            for _ in source:  # the other ranks' part of each ZeRO-3 gather
                pass
            return
        for _name, tensor in self._checked_iter(source, meta):
            self.model_update_group.broadcast(tensor.contiguous(), 0).wait()

    def shutdown(self) -> None:
        if self.model_update_group is not None:
            self.model_update_group.shutdown()
            self.model_update_group = None


class GlooTransfer:
    """`--worker-extension-cls grpo_train.rollout.transfer.GlooTransfer`: no methods; vLLM imports it in the server's
    worker before building the weight-transfer engine, and importing this module registers backend `gloo`."""


def register_gloo() -> None:
    """Make backend `gloo` known to vLLM's factories in this process (idempotent)."""
    if "gloo" not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine("gloo", GlooWeightTransferEngine)
    if "gloo" not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine("gloo", GlooTrainerWeightTransferEngine)


register_gloo()

# ----------------------------------------------------------------------------------------------------
# The learner's side: its weights as vLLM's WeightSource, one transfer engine per server


def transfer_backend() -> str:
    """nccl where the learner has CUDA, else gloo; the server must be started with the same (servers.py)."""
    return "nccl" if torch.cuda.is_available() else "gloo"


class LearnerSource(WeightSource):
    """The learner's weights (grpo_train.hf_weights.PolicyWeights: re-iterable, with `metadata()`) as vLLM's
    `WeightSource`, floating-point tensors cast to the server's dtype (the bytes sent are the bytes it keeps)."""

    def __init__(self, weights, dtype: torch.dtype) -> None:
        self.weights = weights
        self.dtype = dtype
        self.version = getattr(weights, "version", 0)  # the GRPO updates they have had

    def _wire(self, dtype: torch.dtype) -> torch.dtype:
        return self.dtype if dtype.is_floating_point else dtype

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(name, self._wire(dtype), shape) for name, dtype, shape in self.weights.metadata()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.weights:
            yield name, tensor.to(self._wire(tensor.dtype))


class TransferError(RuntimeError):
    """A weight transfer that failed or stalled; the message names the server (servers.py makes it a ServerError)."""


class ServerClient(HTTPVLLMWeightSyncClient):
    """vLLM's HTTP client for the weight-sync routes, its errors naming the server and the route."""

    def _post(self, path: str, json: dict | None = None) -> None:
        try:
            super()._post(path, json)
        except requests.RequestException as err:
            raise TransferError(f"rollout server {self.base_url}: POST /{path} failed (deadline "
                               f"rollout.servers.timeout_s = {self.timeout:g} s): {err}") from None


def learner_address(url_host: str) -> str:
    """This machine's address as the server at url_host reaches it (the interface that routes there)."""
    if url_host in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((url_host, 9))  # UDP: no packet is sent
        return probe.getsockname()[0]


def open_transfer(url: str, server_world_size: int, rank: int, timeout_s: float):
    """vLLM's trainer-side engine for one server, after the rendezvous with its workers (on rank 0; the other ranks
    only iterate the weights at each send)."""
    from urllib.parse import urlparse

    address = learner_address(urlparse(url).hostname or "127.0.0.1")
    world_size = 1 + server_world_size
    if transfer_backend() == "nccl":  # vLLM's StatelessProcessGroup: rank 0 hosts its store whatever the launcher
        info = NCCLTrainerInitInfo(master_address=address, master_port=free_port(), world_size=world_size, rank=rank)
    else:
        sock = listening_socket(address) if rank == 0 else None
        info = GlooTrainerInitInfo(master_address=address, master_port=sock.getsockname()[1] if sock else 0,
                                   world_size=world_size, rank=rank, timeout_s=timeout_s, listen_socket=sock)
    # NCCL's trainer_init wants a source up front; the learner's weights are set before each send (ServersTransfer).
    return WeightTransferTrainerFactory.trainer_init(info, client=ServerClient(url, timeout=timeout_s),
                                                     source=LearnerSource([], torch.float32))


# ----------------------------------------------------------------------------------------------------
# Every server from one pass over the weights


class _Sent:
    """A broadcast that GroupFanOut already waited for (gloo's engine waits on what broadcast returns)."""

    def wait(self) -> None:
        pass


class GroupFanOut:
    """The servers' transfer groups behind one group's `broadcast`: each tensor goes into every server's group in
    turn, so the learner iterates (under ZeRO-3: gathers) its weights once for all servers, while each server keeps a
    group of its own. A group that fails is named in `skip`'s errors and left out; the others go on."""

    def __init__(self, groups: list, urls: list[str], skip: dict[int, str]) -> None:
        self.groups, self.urls, self.skip = groups, urls, skip

    def broadcast(self, tensor: torch.Tensor, src: int = 0, **kwargs) -> _Sent:
        for i, group in enumerate(self.groups):
            if i in self.skip:
                continue
            try:
                work = group.broadcast(tensor, src, **kwargs)
                if hasattr(work, "wait"):  # gloo; NCCL enqueues on the stream
                    work.wait()
            except RuntimeError as err:  # the peer is gone, or the group's deadline passed
                self.skip[i] = f"rollout server {self.urls[i]}: weight transfer failed: {err}"
        return _Sent()


class ServersClient:
    """vLLM's weight-sync client protocol (the calls a trainer engine makes) over several servers as one unit, as
    vLLM's RayVLLMWeightSyncClient drives several actors: each call goes to every server not in `skip`, at once, and
    waits for all of them. A server whose call fails is added to `skip` with its error; the others go on, so one
    lost server neither stops nor strands the rest mid-update."""

    def __init__(self, clients: list[ServerClient], skip: dict[int, str]) -> None:
        self.clients, self.skip = clients, skip
        self.weight_version: str | None = None  # the label finish_weight_update gives the weights being sent

    def _each(self, call) -> None:
        targets = [i for i in range(len(self.clients)) if i not in self.skip]
        with ThreadPoolExecutor(max_workers=max(1, len(targets))) as exe:
            futures = [(i, exe.submit(call, self.clients[i])) for i in targets]
        for i, future in futures:
            if future.exception() is not None:
                self.skip.setdefault(i, str(future.exception()))

    def start_weight_update(self) -> None:
        self._each(lambda c: c.start_weight_update())

    def update_weights(self, update_info) -> None:
        self._each(lambda c: c.update_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        # vLLM's send_weights gives no version; the servers then label every token they sample with ours.
        version = weight_version if weight_version is not None else self.weight_version
        self._each(lambda c: c.finish_weight_update(version))

    def shutdown_weight_transfer_engine(self) -> None:
        self._each(lambda c: c.shutdown_weight_transfer_engine())


class ServersTransfer(NCCLTrainerWeightTransferEngine):
    """The learner's weights into every server from one pass over them: vLLM's trainer engine (`send_weights`:
    start, update_weights beside the broadcasts, finish), whose client is `ServersClient` and whose group is
    `GroupFanOut` over the servers' own engines (`open_transfer`: vLLM's handshake with each). `send(source, only)`
    returns the servers lost during the send, by index, with their errors; the others have the weights."""

    def __init__(self, urls: list[str], world_sizes: list[int], rank: int, timeout_s: float) -> None:
        self.urls, self.world_sizes, self.rank, self.timeout_s = urls, world_sizes, rank, timeout_s
        self.gloo = transfer_backend() == "gloo"
        self.members: list = [None] * len(urls)  # each server's engine (vLLM's; ours on CPU), None until opened
        self.skip: dict[int, str] = {}  # servers this send leaves out: lost (with the error) or not its target
        super().__init__(client=ServersClient([], self.skip), source=None, is_sender=rank == 0,
                         packed=not self.gloo)
        self.model_update_group = GroupFanOut([], urls, self.skip)

    def forget(self, i: int) -> None:
        """Server i's group is gone (the server was lost): the next send to it opens a new one."""
        if self.members[i] is not None:
            with contextlib.suppress(Exception):  # nothing to release on the lost server's side
                self.members[i].shutdown()
            self.members[i] = None

    def send(self, source: WeightSource, only: set[int] | None = None, version: str | None = None) -> dict[int, str]:
        """`version`: the label the servers give the tokens sampled with these weights (vLLM's weight_versions)."""
        self.client.weight_version = version
        targets = set(range(len(self.urls))) if only is None else only
        self.skip.clear()
        self.skip.update({i: "" for i in range(len(self.urls)) if i not in targets})
        for i in sorted(targets):
            if self.members[i] is None:
                try:  # the rendezvous with server i's workers
                    self.members[i] = open_transfer(self.urls[i], self.world_sizes[i], self.rank, self.timeout_s)
                except Exception as err:  # noqa: BLE001 - a server that cannot join: named, the others go on
                    self.skip[i] = f"rollout server {self.urls[i]}: weight transfer could not start: {err}"
        self.client.clients = [m.client if m is not None else None for m in self.members]
        self.model_update_group.groups = [m.model_update_group if m is not None else None for m in self.members]
        self.source = source
        if self.is_sender and all(i in self.skip for i in targets):
            for _ in source:  # no server to send to; the other ranks' gathers (ZeRO-3) still need ours
                pass
            return {i: self.skip[i] for i in targets}
        self.send_weights()
        return {i: error for i, error in self.skip.items() if i in targets}

    def _broadcast(self, source: WeightSource, meta: list[ParamMeta]) -> None:
        if self.gloo:  # one broadcast per tensor, waited for (no CUDA stream)
            GlooTrainerWeightTransferEngine._broadcast(self, source, meta)
        else:
            super()._broadcast(source, meta)

    def shutdown(self) -> None:
        for i in range(len(self.members)):
            self.forget(i)
