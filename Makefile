# Two commands do all the set-up on a fresh machine:
#   make serve   - create .venv, install, seed the demo lakehouse if empty, serve on 127.0.0.1:5439
#   make test    - install test dependencies and system packages, run unit + model + e2e tests
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DATA_DIR ?= .icegres
HOST ?= 127.0.0.1
PORT ?= 5439
PYTEST_ARGS ?=

.PHONY: serve test test-unit test-e2e seed lint bench bench-gate clean install flightsql-protos model-deep bytecode tools

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml $(VENV)/.installed
	$(PIP) install -q -e '.[test,bench]'
	touch $@

install: $(VENV)/.installed

# Compiled bytecode for our own (editable) package, as pip writes it for an installed one. Where
# PYTHONDONTWRITEBYTECODE is set, every `icegres` process would otherwise recompile each module it
# imports: ~0.2 s of CPU per server start (and per test subprocess). Only changed files are
# recompiled; a stale .pyc is ignored by Python, never run.
bytecode: $(VENV)/.installed
	$(PY) -m compileall -q icegres

seed: $(VENV)/.installed bytecode
	$(VENV)/bin/icegres seed --data-dir $(DATA_DIR)

serve: seed
	exec $(VENV)/bin/icegres serve --data-dir $(DATA_DIR) --host $(HOST) --port $(PORT)

test: $(VENV)/.test-installed bytecode
	bash infra/system-deps.sh
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS)

test-unit: $(VENV)/.test-installed
	$(PY) -m pytest -p no:cacheprovider -m "unit or model" $(PYTEST_ARGS)

test-e2e: $(VENV)/.test-installed
	bash infra/system-deps.sh
	$(PY) -m pytest -p no:cacheprovider -m e2e $(PYTEST_ARGS)

# The model tests of every machine with MODEL_BUDGET times CI's Hypothesis examples and seeded
# walks (tests/model/README.md): minutes, not seconds, so no per-test timeout (one machine's
# Hypothesis run alone can outlast the 300 s of pyproject.toml).
MODEL_BUDGET ?= 25
model-deep: $(VENV)/.test-installed
	ICEGRES_MODEL_BUDGET=$(MODEL_BUDGET) \
		$(PY) -m pytest -p no:cacheprovider --timeout=0 -m model tests/model $(PYTEST_ARGS)

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check icegres tests bench

bench: $(VENV)/.test-installed bytecode
	$(PY) -m bench $(BENCH_ARGS)

# The newest results' ratios against bench/baselines.json (exit 1 on a regression beyond the
# tolerance there). Not part of `make test`: this machine is too noisy to gate CI on speed.
bench-gate: $(VENV)/.test-installed
	$(PY) -m bench --check

# The Flight / Flight SQL protobuf modules are generated and committed; run this after editing
# icegres/protocol/flightsql/proto/*.proto (grpcio-tools comes with the test extra).
FLIGHT_PROTO := icegres/protocol/flightsql/proto
flightsql-protos: $(VENV)/.test-installed
	$(PY) -m grpc_tools.protoc -I $(FLIGHT_PROTO) --python_out=icegres/protocol/flightsql \
		--pyi_out=icegres/protocol/flightsql $(sort $(wildcard $(FLIGHT_PROTO)/*.proto))

# Client tools the e2e tests drive, each in a venv of its own under .tools/ (pinned by
# infra/tools/NAME.txt). The tests install them themselves; this is for using them by hand:
# .tools/pgcli/bin/pgcli -h 127.0.0.1 -p 5439 icegres, .tools/dbt/bin/dbt --version
tools:
	bash infra/tool-venv.sh pgcli
	bash infra/tool-venv.sh dbt

clean:
	rm -rf $(VENV) $(DATA_DIR) .tools
