# The single entry point: a fresh clone needs only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAM_VENV := .venv-sam
STAMP := $(VENV)/.installed

.PHONY: help demo serve openapi test test-fast lint format bench validate clean

help:
	@echo "make demo      the CLI journey against the local stack (publish, rejection, installs), no AWS account"
	@echo "make serve     the local stack on 127.0.0.1 (API :8787, moto :4566); Ctrl-C stops it"
	@echo "make openapi   regenerate docs/openapi.json from the handlers"
	@echo "make test      unit + integration (+ e2e) tests"
	@echo "make bench     print benchmark figures"
	@echo "make lint      ruff + mypy"
	@echo "make validate  cfn-lint and sam validate --lint on template.yaml"

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

$(SAM_VENV)/.installed: requirements-sam.lock
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-sam.lock
	touch $(SAM_VENV)/.installed

demo: $(STAMP)
	$(BIN)/python -m devstack.demo

# API_PORT / AWS_PORT override the ports, e.g. make serve API_PORT=9000
API_PORT ?= 8787
AWS_PORT ?= 4566
serve: $(STAMP)
	$(BIN)/packyard local --api-port $(API_PORT) --aws-port $(AWS_PORT)

openapi: $(STAMP)
	$(BIN)/python -m devstack.openapi --write

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict shared/packyard functions packyard_cli devstack

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_verify.py
	$(BIN)/python benchmarks/bench_publish.py
	$(BIN)/python benchmarks/bench_operations.py
	$(BIN)/python benchmarks/bench_cold_start.py

validate: $(STAMP) $(SAM_VENV)/.installed
	$(BIN)/cfn-lint template.yaml
	$(SAM_VENV)/bin/sam validate --lint --region us-east-1

clean:
	rm -rf $(VENV) $(SAM_VENV) .pytest_cache .ruff_cache .mypy_cache .aws-sam .packyard-local
