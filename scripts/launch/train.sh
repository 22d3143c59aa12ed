#!/usr/bin/env bash
# Launch grpo_train under torchrun: one process per GPU, each with a colocated vLLM engine and a DeepSpeed
# learner. Launcher options come first; everything else (--config F, key=value overrides, --print-config)
# goes to `python -m grpo_train` unchanged.
#
#   scripts/launch/train.sh --nproc 8 --config configs/qwen2.5-math-7b-math.yaml run.seed=1  # one node
#   scripts/launch/train.sh --nnodes 2 --nproc 8 --rdzv-endpoint node0:29500 --config F      # on every node
#   scripts/launch/train.sh --dry-run --nproc 2 --config configs/tiny-cpu.yaml               # print, don't run
#
# Options (environment fallbacks in brackets):
#   --nproc N              processes on this node [NPROC_PER_NODE; default: visible GPUs, else 1]
#   --nnodes N             nodes [NNODES; default 1]
#   --rdzv-endpoint H:P    rendezvous host:port for more than one node [RDZV_ENDPOINT, else MASTER_ADDR:MASTER_PORT]
#   --rdzv-id ID           job id shared by all nodes [RDZV_ID, else SLURM_JOB_ID, else grpo_train]
#   --dry-run              check the config, then print the torchrun command instead of running it
# The interpreter is $PYTHON, else the repo's .venv/bin/python, else python3.
# Stop signals: torchrun forwards SIGTERM, SIGINT and SIGUSR1 (Slurm's time-limit warning in the sbatch scripts) to
# every rank, which stop at a checkpoint within run.preempt_grace_s, and waits $SHUTDOWN_TIMEOUT_S (default 900 s: set
# it above a larger run.preempt_grace_s) before it kills them. After a signal torchrun exits 1; the ranks' own codes
# (143, 138) are in its report (docs/gpu-and-clusters.md#preemption-and-the-time-limit).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nproc=${NPROC_PER_NODE:-}
nnodes=${NNODES:-1}
endpoint=${RDZV_ENDPOINT:-}
if [[ -z $endpoint && -n ${MASTER_ADDR:-} ]]; then endpoint="$MASTER_ADDR:${MASTER_PORT:-29500}"; fi
rdzv_id=${RDZV_ID:-${SLURM_JOB_ID:-grpo_train}}
dry_run=0
passthrough=()

need_value() { [[ $# -ge 2 && -n $2 ]] || { echo "train.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --nproc | --nproc_per_node | --nproc-per-node) need_value "$@"; nproc=$2; shift 2 ;;
    --nnodes) need_value "$@"; nnodes=$2; shift 2 ;;
    --rdzv-endpoint | --rdzv_endpoint) need_value "$@"; endpoint=$2; shift 2 ;;
    --rdzv-id | --rdzv_id) need_value "$@"; rdzv_id=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; passthrough+=("$@"); break ;;
    *) passthrough+=("$1"); shift ;;
  esac
done

has_config=0
for arg in "${passthrough[@]}"; do [[ $arg == --config || $arg == --config=* ]] && has_config=1; done
if [[ $has_config -eq 0 ]]; then
  echo "train.sh: --config FILE is required (see configs/)" >&2
  exit 2
fi
if [[ -z $nproc ]]; then
  # Count GPUs without importing torch; a CPU machine runs one process.
  nproc=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
  [[ $nproc -ge 1 ]] || nproc=1
fi
for value in "$nproc" "$nnodes"; do
  [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "train.sh: --nproc / --nnodes must be positive integers, got $value" >&2; exit 2; }
done

python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x $repo/.venv/bin/python ]]; then python=$repo/.venv/bin/python; else python=python3; fi
fi

cmd=("$python" -m torch.distributed.run --signals-to-handle "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
     --shutdown-timeout "${SHUTDOWN_TIMEOUT_S:-900}" --nnodes "$nnodes" --nproc_per_node "$nproc")
if [[ $nnodes -eq 1 ]]; then
  cmd+=(--standalone)  # a private rendezvous on a free local port
else
  if [[ -z $endpoint ]]; then
    echo "train.sh: --nnodes $nnodes needs --rdzv-endpoint HOST:PORT (or RDZV_ENDPOINT / MASTER_ADDR)" >&2
    exit 2
  fi
  cmd+=(--rdzv-backend c10d --rdzv-endpoint "$endpoint" --rdzv-id "$rdzv_id")
fi
cmd+=(-m grpo_train "${passthrough[@]}")

if [[ $dry_run -eq 1 ]]; then
  # The config check of --print-config (the file, every key and type, the ranges, the model's name; no model loaded,
  # well under a second): a bad config stops the dry run with its one-line error and exit 2, as it would the run.
  "$python" -m grpo_train --print-config "${passthrough[@]}" > /dev/null || exit
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
exec "${cmd[@]}"
