#!/usr/bin/env bash
# The offline install kit end to end on this machine (docs/gpu-and-clusters.md#offline-install-kit-a-gpu-node-without-network-or-a-cuda-image-without-vllm):
#   1. build a learner kit for this machine's Python (scripts/maint/build_kit.py);
#   2. make a fresh venv holding only the kit's assumed base packages (torch, transformers, ... at docker/cpu.lock's
#      versions, with their own dependencies, from the index): the stand-in for a CUDA image;
#   3. install grpo_train from the kit with no index and no pip configuration (`--no-index`, PIP_CONFIG_FILE=/dev/null);
#   4. train tiny-qwen2.5 (Qwen2.5's tokenizer, built offline) for 2 steps with the hf engine, from outside the
#      checkout (so the installed package runs, not this one).
# Prints PASS with the times, or FAIL naming the step; ~4-6 min on 2 cores (the base install is most of it).
#
#   scripts/maint/kit_offline_check.sh [WORKDIR]     # WORKDIR: a new folder (default: a fresh temporary one)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
work=${1:-$(mktemp -d -t grpo_kit_check.XXXXXX)}
if [[ -e $work && -n $(ls -A "$work" 2>/dev/null) ]]; then
  echo "kit_offline_check: $work is not empty; pass a new folder"; exit 2
fi
mkdir -p "$work"
fail() { echo "kit_offline_check: FAIL: $1 (logs in $work)"; exit 1; }
seconds() { echo $(( $(date +%s) - $1 )); }
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

t0=$(date +%s)
"$python" "$repo/scripts/maint/build_kit.py" --python "$version" --out "$work/kit" > "$work/build.log" 2>&1 \
  || fail "building the kit, see $work/build.log"
build_s=$(seconds "$t0")

t0=$(date +%s)
base=$("$python" -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('build_kit', '$repo/scripts/maint/build_kit.py')
kit = importlib.util.module_from_spec(spec); spec.loader.exec_module(kit)
pins = kit.read_pins(kit.REPO / 'docker' / 'cpu.lock')
print(' '.join(f'{n}=={pins[kit.canonical(n)]}' for n in kit.ASSUMED_BASE if kit.canonical(n) in pins and n != 'triton'))")
"$python" -m venv "$work/venv" && "$work/venv/bin/pip" install -q --disable-pip-version-check $base \
  > "$work/base.log" 2>&1 || fail "installing the base packages, see $work/base.log"
base_s=$(seconds "$t0")

t0=$(date +%s)
PIP_CONFIG_FILE=/dev/null "$work/venv/bin/pip" install --disable-pip-version-check --no-index \
  --find-links "$work/kit" grpo_train > "$work/install.log" 2>&1 || fail "the offline install, see $work/install.log"
install_s=$(seconds "$t0")

t0=$(date +%s)
(cd "$work" && GRPO_TRAIN_CACHE="$work/cache" "$work/venv/bin/grpo-train" --config "$repo/configs/tiny-cpu.yaml" \
  model.name_or_path=tiny-qwen2.5 rollout.engine=hf run.output_dir="$work/run" run.steps=2 run.eval_size=4 \
  > "$work/train.log" 2>&1) || fail "the tiny run from the kit, see $work/train.log"
train_s=$(seconds "$t0")
grep -q '"step": 2' "$work/run/metrics.jsonl" || fail "no step 2 in $work/run/metrics.jsonl"

echo "kit_offline_check: PASS: kit $(du -sm "$work/kit" | cut -f1) MiB built in ${build_s} s; base installed in" \
     "${base_s} s; grpo_train installed offline in ${install_s} s; 2 steps of tiny-qwen2.5 in ${train_s} s ($work)"
