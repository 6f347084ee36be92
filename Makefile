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
	$(BIN)/lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout_small --seed 0 --print-outputs
	$(BIN)/lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout --seed 0 --stats-json /dev/stdout

test: $(STAMP)
	$(BIN)/python -m pytest tests
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -v tests/filecheck

lint: $(STAMP)
	$(BIN)/ruff check ir passes backends tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_foundation.py

clean:
	rm -rf $(VENV) *.egg-info build
