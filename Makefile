# Two commands set everything up on a machine with only Python 3.11+:
#   make demo   - master + minions on loopback, step by step
#   make test   - create .venv, install with test extras, run the suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench lint type clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench,salt]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m raetsalt.demo

bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(PY) -m pip install -q ruff
	$(VENV)/bin/ruff check raetsalt tests bench

type: $(STAMP)
	$(PY) -m pip install -q mypy
	$(VENV)/bin/mypy raetsalt

clean:
	rm -rf $(VENV) build *.egg-info
