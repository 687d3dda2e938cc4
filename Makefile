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
# what make venv installs (and make pins resolves, and make test-latest upgrades)
EXTRAS := test,bench,lint,salt,cluster,api

.PHONY: venv test demo bench lint type clean pins test-latest postgres browser

venv: $(STAMP)

# setup.py and the C sources: the optional compiled modules are rebuilt in place when they change
$(STAMP): setup.cfg pyproject.toml setup.py raetsalt/_trains.c raetsalt/_udpio.c constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt \
		-e '.[$(EXTRAS)]'
	touch $(STAMP)

# the tests that compare with Salt itself (the oracle)
ORACLE_TESTS := tests/execution/test_args_oracle.py tests/execution/test_grains_oracle.py \
	tests/test_output_oracle.py tests/test_config_salt_keys.py tests/test_targeting_pillar.py \
	tests/saltbridge tests/cli/test_clients.py tests/remote/test_salt.py

pins:
	rm -rf .venv-pins
	$(PYTHON) -m venv .venv-pins
	.venv-pins/bin/python -m pip install -q --disable-pip-version-check \
		-e '.[$(EXTRAS)]'
	.venv-pins/bin/python .ci/pins.py freeze
	rm -rf .venv-pins

test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q --disable-pip-version-check --upgrade \
		-e '.[$(EXTRAS)]'
	.venv-latest/bin/python .ci/pins.py drift
	.venv-latest/bin/python -m pytest -q -p no:cacheprovider $(ORACLE_TESTS)

# The PostgreSQL job cache tests start their own server (tests/pg.py) and need its
# binaries: found on PATH or under /usr/lib/postgresql/*/bin, else installed here (root only).
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		|| { if [ "$$(id -u)" = 0 ]; then \
			DEBIAN_FRONTEND=noninteractive apt-get update -q && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
		else echo "PostgreSQL's server binaries are missing: run 'sudo apt-get install postgresql' (or make test as root)" >&2; exit 1; fi; }


# Chromium and its driver for the SaltGUI test (tests/api/test_saltgui.py), from Debian's
# packages, only when missing and only as root (the test is skipped without them)
browser:
	@if [ ! -x /usr/bin/chromedriver ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	fi

test: lint type postgres browser
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
