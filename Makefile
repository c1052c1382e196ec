# The two commands of the README:
#   make serve   set up (a virtualenv in .venv) and run the service
#   make test    set up (service + test dependencies) and run the tests
# `make bench` measures Duet against the minimal relay and the scripted upstream, side by side, then how
# its cost grows with history, tools and open streams (see bench/bench.py, bench/growth.py).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: serve test bench

serve: $(VENV)/.serve-ready
	$(BIN)/duet serve

# The linter and the type checker first, then the tests (all configured in pyproject.toml): a finding
# fails in seconds (mypy's cache in .mypy_cache/ keeps a second run short).
test: $(VENV)/.test-ready
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

# A clean environment: no DUET_* of the caller's reaches the benchmarks (or the servers they start).
bench: $(VENV)/.serve-ready
	unset $$(env | sed -n 's/^\(DUET_[A-Za-z0-9_]*\)=.*/\1/p'); \
	$(BIN)/python bench/bench.py && $(BIN)/python bench/growth.py

$(VENV)/.serve-ready: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -e .
	touch $@

$(VENV)/.test-ready: $(VENV)/.serve-ready requirements-studio.txt
	$(PIP) install -q -c constraints.txt -e ".[test]" -r requirements-studio.txt
	# AutoGen Studio declares autogen < 0.6 but runs with 0.7.5: installed last, without its pins.
	$(PIP) install -q --no-deps autogenstudio==0.4.2.2
	# Debian's Redis (the shared state store), HAProxy (the replicas' load balancer), docker-compose
	# (`docker-compose config` checks docker-compose.yml; no engine runs) and Prometheus (its promtool
	# checks deploy/prometheus): the tests run them. kubectl (tests/deploy) comes with the machine image.
	scripts/ensure-packages redis-server=redis-server haproxy=haproxy docker-compose=docker-compose promtool=prometheus
	scripts/ensure-codex $(VENV)/node
	scripts/ensure-claude-code $(VENV)/claude-code
	scripts/ensure-ai-sdk $(VENV)/ai-sdk
	# The packaging test installs the built wheel beside openai-agents in a fresh venv, offline:
	# what that venv and the wheel's build need is fetched here (websockets is left free: openai-agents caps it below 17).
	grep -v '^websockets==' constraints.txt > $(VENV)/constraints-packaging.txt
	$(PIP) download -q -d $(VENV)/wheelhouse -c $(VENV)/constraints-packaging.txt . openai-agents "setuptools>=69"
	# mypy sees agents/, api/ and workbenches/ as the packages they install as (duet.agents, ...: package-dir
	# in pyproject.toml) through links beside the root package duet/ (mypy_path there).
	mkdir -p $(VENV)/mypy-path/duet
	for folder in agents api workbenches; do ln -sfn ../../../$$folder $(VENV)/mypy-path/duet/$$folder; done
	touch $@
