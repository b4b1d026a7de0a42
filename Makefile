# Two commands do all the setup on a fresh machine:
#   make demo   create .venv, install what a CPU run needs (no torch), synthesize chapter 1 of the
#               bundled sample book into out/
#   make test   create .venv, install with the test and torch extras, run the whole test suite in
#               parallel processes (pytest-xdist; tests/conftest.py says how a test is kept in one)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
#: The demo's install: the CPU run's packages only (the torch extra, with CUDA and Triton, is GBs).
DEMO_STAMP := $(VENV)/.installed-cpu

.PHONY: demo test install clean bench-cpu

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,torch]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	@echo "demo: chapter 1 of Alice in Wonderland, about 10 minutes of audio, on the CPU (ONNX Runtime):"
	@echo "      a minute or two on 2 free cores, longer on fewer or busy ones; progress is shown as it goes"
	$(PY) cli.py run tests/data/alice-pg11.txt --chapters 1 -o out/

#: pytest-xdist processes for `make test` (auto: one per CPU core); `make test TEST_WORKERS=0` runs serially
TEST_WORKERS ?= auto

test: $(STAMP)
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests

bench-cpu: $(STAMP)
	$(PY) bench/cpu_vs_piper.py

clean:
	rm -rf out/ .pytest_cache
