# Two commands do all the setup on a fresh machine:
#   make demo   create .venv, install, synthesize chapter 1 of the bundled sample book into out/
#   make test   create .venv, install (with test extras), run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install clean bench-cpu

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,torch]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) cli.py run tests/data/alice-pg11.txt --chapters 1 -o out/

test: $(STAMP)
	$(PY) -m pytest -q -ra tests

bench-cpu: $(STAMP)
	$(PY) bench/cpu_vs_piper.py

clean:
	rm -rf out/ .pytest_cache
