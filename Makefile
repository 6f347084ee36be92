# `make demo` and `make test` each create .venv on first use and install Lamina into it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Lamina is installed in editable_mode=strict: build/ holds a tree of links to the sources, so
# edits show at once, and a new or removed module needs a reinstall: the list of modules is part
# of the stamp's prerequisites.
# the code folders, read from setup.py's CODE_FOLDERS (the one list of them; `make code-folders`
# prints it, and tests/test_packaging.py checks it against setup.py and pyright's include)
CODE := $(shell $(PYTHON) -c 'import ast; t = ast.parse(open("setup.py").read()); print(*next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CODE_FOLDERS"))')
ifeq ($(strip $(CODE)),)
$(error could not read CODE_FOLDERS from setup.py with $(PYTHON))
endif
MODULES := $(VENV)/.modules
# the extras `make` installs (one per line, so branches adding one merge without conflict)
EXTRAS := dev
EXTRAS += torch
EXTRAS += onnx
EXTRAS += jax
EXTRAS += compiled
EXTRAS += train
EXTRAS += hf
EXTRAS += iree
comma := ,
empty :=
space := $(empty) $(empty)

.PHONY: demo test test-long pytest lit lint imports bench clean code-folders FORCE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(MODULES): FORCE | $(BIN)/python
	@find $(CODE) -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null | sort > $@.new
	@cmp -s $@.new $@ && rm $@.new || mv $@.new $@

$(STAMP): $(BIN)/python pyproject.toml setup.py $(MODULES)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	@# setuptools reports where it put the link tree as an "Editable installation." warning:
	@# informational (build/ is documented above), so that one message is filtered out
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install -q -e '.[$(subst $(space),$(comma),$(strip $(EXTRAS)))]' \
		--config-settings editable_mode=strict
	touch $(STAMP)

demo: $(STAMP)
	@echo "== 1. Parse and verify the seed example, then fuse LayerNorm + GeLU + Dropout (decisions on stderr)"
	$(BIN)/lamina-opt samples/layernorm_gelu_dropout.mlir -p fuse-elementwise --explain
	@echo "== 2. Run the small function: a summary line per output, then its values"
	$(BIN)/lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout_small --seed 0 --print-outputs
	@echo "== 3. Run f32[8192,4096] as written and after fusion on the same inputs; compare; stats (kernels after vs reference)"
	$(BIN)/lamina-run samples/layernorm_gelu_dropout.mlir --entry ln_gelu_dropout --seed 0 -p fuse-elementwise --check --stats-json -

# pytest prints its progress percentages and, at the end, the slowest tests, so a slow test shows;
# it runs on JOBS worker processes (pytest-xdist, one per core here; `make test JOBS=1`: one process)
JOBS ?= 2
test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest tests -n $(JOBS) --durations=15
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/lit -v tests/filecheck

# `make test` in the long randomized Hypothesis profile: 20 x each test's examples, new draws
# each run, compiled-backend shapes at random (tests/conftest.py)
test-long: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(MAKE) test

imports: $(STAMP)
	$(BIN)/lint-imports

lint: $(STAMP)
	$(BIN)/ruff check setup.py $(CODE) tests benchmarks
	$(BIN)/pyright
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_foundation.py
	$(BIN)/python benchmarks/bench_fusion.py

code-folders:
	@echo $(CODE)

clean:
	rm -rf $(VENV) *.egg-info build
