# Two commands set everything up on a machine with only Python 3.11+:
#   make demo   - master + minions on loopback, step by step
#   make test   - create .venv, install with test extras, lint (ruff), type-check
#                 (mypy --strict) and run the suite; any finding fails it
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench lint type clean

venv: $(STAMP)

# setup.py and the C source: the optional compiled kernel is rebuilt in place when they change
$(STAMP): setup.cfg pyproject.toml setup.py raetsalt/_trains.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench,lint,salt]'
	touch $(STAMP)

test: lint type
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m raetsalt.demo

bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check raetsalt tests bench

# strict mode and the per-module exceptions are in setup.cfg [mypy]
type: $(STAMP)
	$(VENV)/bin/mypy raetsalt

clean:
	rm -rf $(VENV) build *.egg-info
