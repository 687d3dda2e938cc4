# Two commands set everything up on a machine with only Python 3.11+:
#   make demo   - master + minions on loopback, step by step
#   make test   - create .venv, install with test extras, lint (ruff), type-check
#                 (mypy --strict) and run the suite; any finding fails it
# Every test, lint, type, bench and oracle tool is pinned in constraints.txt:
#   make pins        - resolve everything anew in a scratch venv and rewrite the pins
#   make test-latest - the oracle tests against the newest Salt and friends, with the drift
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench lint type clean pins test-latest browser

venv: $(STAMP)

# setup.py and the C source: the optional compiled kernel is rebuilt in place when they change
$(STAMP): setup.cfg pyproject.toml setup.py raetsalt/_trains.c constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt \
		-e '.[test,bench,lint,salt,api]'
	touch $(STAMP)

# the tests that compare with Salt itself (the oracle)
ORACLE_TESTS := tests/execution/test_args_oracle.py tests/execution/test_grains_oracle.py \
	tests/test_output_oracle.py tests/test_config_salt_keys.py tests/test_targeting_pillar.py \
	tests/saltbridge tests/cli/test_clients.py tests/remote/test_salt.py

pins:
	rm -rf .venv-pins
	$(PYTHON) -m venv .venv-pins
	.venv-pins/bin/python -m pip install -q --disable-pip-version-check \
		-e '.[test,bench,lint,salt,api]'
	.venv-pins/bin/python .ci/pins.py freeze
	rm -rf .venv-pins

test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q --disable-pip-version-check --upgrade \
		-e '.[test,salt]'
	.venv-latest/bin/python .ci/pins.py drift
	.venv-latest/bin/python -m pytest -q -p no:cacheprovider $(ORACLE_TESTS)

# Chromium and its driver for the SaltGUI test (tests/api/test_saltgui.py), from Debian's
# packages, only when missing and only as root (the test is skipped without them)
browser:
	@if [ ! -x /usr/bin/chromedriver ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	fi

test: lint type browser
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m raetsalt.demo

bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check raetsalt tests bench .ci

# strict mode and the per-module exceptions are in setup.cfg [mypy]
type: $(STAMP)
	$(VENV)/bin/mypy raetsalt

clean:
	rm -rf $(VENV) .venv-latest .venv-pins build *.egg-info
