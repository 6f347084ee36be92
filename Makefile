# `make demo` and `make test` each create .venv on first use and install Lamina into it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test pytest lit lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@echo "== 1. Parse and verify the seed example, then fuse LayerNorm + GeLU + Dropout (decisions on stderr)"
	$(BIN)/lamina-opt samples/layernorm_gelu_dropout.mlir -p fuse-elementwise --explain
	@echo "== 2. Run the small function and summarize its output"
	$(BIN)/lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout_small --seed 0 --print-outputs
	@echo "== 3. Run f32[8192,4096] as written and after fusion on the same inputs; compare; stats (kernels after vs reference)"
	$(BIN)/lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout --seed 0 -p fuse-elementwise --check --stats-json -

test: $(STAMP)
	$(BIN)/python -m pytest tests
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -v tests/filecheck

lint: $(STAMP)
	$(BIN)/ruff check ir passes backends tests benchmarks
	$(BIN)/pyright

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_foundation.py
	$(BIN)/python benchmarks/bench_fusion.py

clean:
	rm -rf $(VENV) *.egg-info build
