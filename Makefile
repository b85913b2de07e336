# The single entry point: a fresh clone needs only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAM_VENV := .venv-sam
STAMP := $(VENV)/.installed

.PHONY: help demo serve test test-fast lint format bench validate clean

help:
	@echo "make demo      publish a package and show a rejection, locally on moto (no AWS account)"
	@echo "make test      unit + integration (+ e2e) tests"
	@echo "make bench     print benchmark figures"
	@echo "make lint      ruff + mypy"
	@echo "make validate  cfn-lint and sam validate --lint on template.yaml"

$(STAMP): requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	touch $(STAMP)

$(SAM_VENV)/.installed: requirements-sam.lock
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-sam.lock
	touch $(SAM_VENV)/.installed

demo: $(STAMP)
	$(BIN)/python -m devstack.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy shared/packyard

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_verify.py
	$(BIN)/python benchmarks/bench_publish.py

validate: $(STAMP) $(SAM_VENV)/.installed
	$(BIN)/cfn-lint template.yaml
	$(SAM_VENV)/bin/sam validate --lint --region us-east-1

clean:
	rm -rf $(VENV) $(SAM_VENV) .pytest_cache .ruff_cache .mypy_cache .aws-sam
