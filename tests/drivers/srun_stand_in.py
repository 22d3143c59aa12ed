"""A stand-in for Slurm's `srun` inside a job of several nodes, for the launch scripts' tests (tests/test_cluster.py):
it records each job step (its options, the nodes and tasks it places) and runs its tasks here, one process each, as
srun runs them on the nodes.

    SRUN_NODES="gpu-a01 gpu-a02" SRUN_LOG=steps.jsonl python tests/drivers/srun_stand_in.py --nodes=1 --ntasks=2 CMD

SRUN_NODES: the job's nodes (what `scontrol show hostnames` prints). Each step appends one JSON line to SRUN_LOG:
{"options": {name: value}, "command": [...], "tasks": [[node, local id], ...], "env": {HF_HOME, HF_HUB_OFFLINE as
the tasks get them}}. Placement, for the options the scripts use (any other option, or one not written --name=value,
is refused, so a script that changes how it calls srun changes its test): the --nodelist nodes first, the --exclude
nodes never, --nodes of them (default all); --ntasks spread in blocks over them, else --ntasks-per-node on each
(default 1); a step the job cannot hold is refused (exit 1), as srun refuses it. --export: ALL (the default, unless
SLURM_EXPORT_ENV says otherwise: `sbatch --export=NONE` sets it to NONE) passes the environment, NONE only the
SLURM_ variables, each name after them that variable too. Each task gets SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID
and SLURMD_NODENAME, in a process group of its own; SIGTERM, SIGINT and SIGUSR1 reach every task; with
--kill-on-bad-exit=1 a task that exits non-zero ends the others (SIGTERM). The step's status is the highest of its
tasks', 128 + the signal for a task a signal ended.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

KNOWN = {"nodes", "ntasks", "ntasks-per-node", "nodelist", "exclude", "gpus-per-task", "kill-on-bad-exit", "export"}


def refuse(message: str) -> None:
    print(f"srun: error: {message}", file=sys.stderr)
    sys.exit(1)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    options = {}
    while argv and argv[0].startswith("-"):
        name, eq, value = argv.pop(0).removeprefix("--").partition("=")
        if not eq or name not in KNOWN:
            refuse(f"the stand-in does not take --{name}{eq}{value}")
        options[name] = value
    if not argv:
        refuse("no command")
    return options, argv


def place(options: dict[str, str], job: list[str]) -> list[tuple[str, int]]:
    """(node, local id) of each task, in task order."""
    forced = [n for n in options.get("nodelist", "").split(",") if n]
    excluded = {n for n in options.get("exclude", "").split(",") if n}
    if set(forced) - set(job) or set(forced) & excluded:
        refuse(f"invalid node list {forced} (job: {job}, excluded: {sorted(excluded)})")
    candidates = forced + [n for n in job if n not in forced and n not in excluded]
    count = int(options.get("nodes", len(candidates)))
    if not len(forced) <= count <= len(candidates):
        refuse(f"{count} nodes requested, {len(candidates)} available (Requested node configuration is not available)")
    nodes = candidates[:count]
    if "ntasks" in options:
        base, extra = divmod(int(options["ntasks"]), count)
        if base == 0:
            refuse(f"{options['ntasks']} tasks on {count} nodes")
        per_node = [base + (i < extra) for i in range(count)]
    else:
        per_node = [int(options.get("ntasks-per-node", "1"))] * count
    return [(node, local) for node, n in zip(nodes, per_node, strict=True) for local in range(n)]


def task_env(options: dict[str, str]) -> dict[str, str]:
    export = options.get("export", os.environ.get("SLURM_EXPORT_ENV", "ALL")).split(",")
    env = dict(os.environ) if export[0] == "ALL" else {k: v for k, v in os.environ.items() if k.startswith("SLURM")}
    for item in export[1:] if export[0] in ("ALL", "NONE") else export:
        name, eq, value = item.partition("=")
        if eq:
            env[name] = value
        elif name in os.environ:
            env[name] = os.environ[name]
    return env


def main() -> int:
    options, command = parse(sys.argv[1:])
    job = os.environ["SRUN_NODES"].split()
    tasks = place(options, job)
    env = task_env(options)
    with open(os.environ["SRUN_LOG"], "a") as log:
        log.write(json.dumps({"options": options, "command": command, "tasks": tasks,
                              "env": {k: env.get(k) for k in ("HF_HOME", "HF_HUB_OFFLINE")}}) + "\n")
    processes = []
    for rank, (node, local) in enumerate(tasks):
        processes.append(subprocess.Popen(command, start_new_session=True, env={
            **env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(job.index(node)), "SLURMD_NODENAME": node}))

    def signal_tasks(signum: int, frame=None) -> None:
        for p in processes:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # ended since
                    os.killpg(p.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, signal_tasks)
    killed = False
    while any(p.poll() is None for p in processes):
        if (options.get("kill-on-bad-exit") == "1" and not killed
                and any(p.returncode not in (None, 0) for p in processes)):
            signal_tasks(signal.SIGTERM)
            killed = True
        time.sleep(0.02)
    return max(128 - p.returncode if p.returncode < 0 else p.returncode for p in processes)


if __name__ == "__main__":
    sys.exit(main())
