# Two commands for a newcomer: `make run` (the main job) and `make test` (the whole suite).
# Each creates .venv when missing and installs the pinned requirements into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-slow lint format bench compile-cuda clean

$(STAMP): requirements.txt setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

run: $(STAMP)
	$(PY) -m experiments.run_all --workdir runs/ladder --jobs 2

lint: $(TEST_STAMP)
	$(PY) -m ruff format --check jaxformer experiments tests colabs
	$(PY) -m ruff check jaxformer experiments tests colabs

format: $(TEST_STAMP)
	$(PY) -m ruff format jaxformer experiments tests colabs
	$(PY) -m ruff check --fix jaxformer experiments tests colabs

test: lint
	$(PY) -m pytest -n 2 --dist loadfile -q

test-slow: $(TEST_STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) -m experiments.bench all

# The transformer's accel training config compiled for 8 GPUs, on this CPU (no GPU needed):
# the CUDA wheels (requirements-gpu.txt, ~2.4 GB) go in GPU_VENV; GPU_TARGET_CONFIG is a
# GpuTargetConfigProto text file (XLA keeps them for H100 and others; an H100 SXM's is here).
GPU_VENV ?= .venv-gpu
GPU_TARGET_CONFIG ?= experiments/configs/h100_sxm.txtpb
GPU_TOPOLOGY ?= 1x1x8
compile-cuda:
	@test -f "$(GPU_TARGET_CONFIG)" || { echo "error: GPU_TARGET_CONFIG=$(GPU_TARGET_CONFIG): no such file"; exit 2; }
	test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q -r requirements.txt -r requirements-gpu.txt
	$(GPU_VENV)/bin/python -m pip install -q --no-deps -e .
	JAX_PLATFORMS=cpu $(GPU_VENV)/bin/python -m experiments.main \
	  --config=experiments/configs/default.py:rung=transformer,size=accel \
	  --config.mesh_shape='(1,8,1)' --workdir=runs/compile_cuda \
	  --compile_only=gpu:$(GPU_TARGET_CONFIG),topology=$(GPU_TOPOLOGY)

clean:
	rm -rf $(VENV) $(GPU_VENV) runs
