# The single entry point: a fresh clone needs only python3.
# the tests run on the Lambda runtime's Python (3.12) where the machine has one (PY312, found below), else python3
PYTHON ?= $(or $(PY312),python3)
VENV := .venv
BIN := $(VENV)/bin
SAM_VENV := .venv-sam
STAMP := $(VENV)/.installed

.PHONY: help demo smoke serve openapi test test-fast fuzz readers lint format bench validate clean invoke events build deploy

help:
	@echo "make demo      the CLI journey against the local stack (publish, rejection, installs), no AWS account"
	@echo "make smoke     the CLI journey against PACKYARD_ENDPOINT (+ PACKYARD_TOKEN), else a local stack; stops at a deviation"
	@echo "make serve     the local stack on 127.0.0.1 (API :8787, moto :4566), state kept in .packyard-local/data; Ctrl-C stops it"
	@echo "make openapi   regenerate docs/openapi.json from the handlers"
	@echo "make test      unit + integration (+ e2e) tests"
	@echo "make fuzz      longer campaigns: tar streams against four readers (TAR_EXAMPLES), schemathesis (FUZZ_EXAMPLES, FUZZ_SEED)"
	@echo "make bench     print benchmark figures"
	@echo "make lint      ruff + mypy"
	@echo "make validate  cfn-lint, sam validate --lint and checkov on template.yaml; Spectral (oas) on docs/openapi.json"
	@echo "make invoke    FN=verify [EVENT=events/sfn_verify.json]: one function, in-process, on a fresh local stack"
	@echo "make build     sam build (needs python3.12, the Lambda runtime); make deploy ENV=dev|prod: sam deploy"

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# aws-sam-cli keeps its own virtualenv, on the machine's python3 (its lock file was resolved there)
SAM_PYTHON ?= python3
$(SAM_VENV)/.installed: requirements-sam.lock
	$(SAM_PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-sam.lock
	touch $(SAM_VENV)/.installed

demo: $(STAMP)
	$(BIN)/python -m devstack.demo

# publish, a rejected upload, install (consent approved), update, rollback, uninstall, a refused call (exit 7): against
# PACKYARD_ENDPOINT with PACKYARD_TOKEN (a deployed stack), else a local stack it starts; exit 1 at the first deviation
smoke: $(STAMP)
	$(BIN)/python -m devstack.smoke

# API_PORT / AWS_PORT override the ports, e.g. make serve API_PORT=9000. The state (tables, objects, executions, keys)
# is kept across restarts in .packyard-local/data; DATA=DIR keeps it elsewhere, EPHEMERAL=1 keeps nothing.
API_PORT ?= 8787
AWS_PORT ?= 4566
serve: $(STAMP)
	$(BIN)/packyard local --api-port $(API_PORT) --aws-port $(AWS_PORT) \
	  $(if $(EPHEMERAL),--ephemeral,$(if $(DATA),--data $(DATA)))

openapi: $(STAMP)
	$(BIN)/python -m devstack.openapi --write

# The second readers of archives the differential tests hold the verifier against (tests/unit/test_tar_readers.py):
# GNU tar and libarchive's bsdtar, from Debian's packages. bsdtar is pinned to the libarchive the machine already has
# (its only dependency, same source package), else to bookworm's; without root the tests fail saying what is missing.
LIBARCHIVE_VERSION ?= $(or $(shell dpkg-query -W -f='$${Version}' libarchive13 2>/dev/null),3.6.2-1+deb12u5)
readers:
	@if command -v bsdtar >/dev/null && tar --version 2>/dev/null | grep -q 'GNU tar'; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make readers: GNU tar and bsdtar are needed (Debian: apt-get install tar libarchive-tools)" >&2; exit 0; fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  tar libarchive-tools=$(LIBARCHIVE_VERSION) >/dev/null

# openapi-python-client keeps its own virtualenv too (its pins differ from ours): tests/e2e/test_generated_client.py
# generates a client from docs/openapi.json with it and runs a publish-and-install journey with that client
CLIENT_VENV := .venv-openapi-client
CLIENT_LOCK := tools/openapi-python-client/requirements.lock
$(CLIENT_VENV)/.installed: $(CLIENT_LOCK)
	$(SAM_PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/pip install --quiet --disable-pip-version-check -r $(CLIENT_LOCK)
	touch $(CLIENT_VENV)/.installed

# the IAM test expands template.yaml with aws-sam-cli's translator, which lives in .venv-sam (its pins differ); the
# generated-client test needs the client generator's virtualenv
test: $(STAMP) $(SAM_VENV)/.installed $(CLIENT_VENV)/.installed readers
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# the fuzz test of make test (tests/e2e/test_fuzz.py), longer: schemathesis' coverage phase (boundary and negative
# cases) and FUZZ_EXAMPLES generated requests per operation, with the same checks; FUZZ_SEED=N for another sequence
FUZZ_EXAMPLES ?= 300
# and the differential tar campaign: TAR_EXAMPLES generated tar streams through the verifier and all four readers
TAR_EXAMPLES ?= 5000
fuzz: $(STAMP) readers
	PACKYARD_TAR_EXAMPLES=$(TAR_EXAMPLES) $(if $(FUZZ_SEED),PACKYARD_TAR_SEED=$(FUZZ_SEED)) \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_tar_readers.py -k generated
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_COVERAGE=1 $(if $(FUZZ_SEED),FUZZ_SEED=$(FUZZ_SEED)) \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/e2e/test_fuzz.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict shared/packyard functions packyard_cli devstack

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Every figure with its target beside it (issue 11); the local-stack one takes several minutes (1,000 publishes,
# 1,000 installs, a 60 s load); the capacity simulation prints the model of docs/scaling.md.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_verify.py
	$(BIN)/python benchmarks/bench_publish.py
	$(BIN)/python benchmarks/bench_files.py
	$(BIN)/python benchmarks/bench_sync.py
	$(BIN)/python benchmarks/bench_operations.py
	$(BIN)/python benchmarks/bench_operation_wait.py
	$(BIN)/python benchmarks/bench_cold_start.py
	$(BIN)/python benchmarks/bench_sweeps.py
	$(BIN)/python benchmarks/bench_persistence.py
	$(BIN)/python benchmarks/bench_local_stack.py
	$(BIN)/python benchmarks/simulate_capacity.py

# checkov keeps its own virtualenv too (its pins differ from ours); every check it skips carries its reason in
# template.yaml (Metadata: checkov: skip), and --skip-download keeps it offline
CHECKOV_VENV := .venv-checkov
$(CHECKOV_VENV)/.installed: requirements-checkov.lock
	$(SAM_PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-checkov.lock
	touch $(CHECKOV_VENV)/.installed

# Spectral, from the npm registry, pinned by tools/spectral/package-lock.json (npm ci installs exactly that tree; no
# install scripts run): Spectral's oas ruleset (.spectral.yaml) on docs/openapi.json, where a warning fails too
SPECTRAL_DIR := tools/spectral
SPECTRAL := $(SPECTRAL_DIR)/node_modules/.bin/spectral
$(SPECTRAL_DIR)/node_modules/.installed: $(SPECTRAL_DIR)/package.json $(SPECTRAL_DIR)/package-lock.json
	cd $(SPECTRAL_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $(SPECTRAL_DIR)/node_modules/.installed

validate: $(STAMP) $(SAM_VENV)/.installed $(CHECKOV_VENV)/.installed $(SPECTRAL_DIR)/node_modules/.installed
	$(BIN)/cfn-lint template.yaml
	$(SAM_VENV)/bin/sam validate --lint --region us-east-1
	$(CHECKOV_VENV)/bin/checkov --file template.yaml --framework cloudformation --quiet --compact --skip-download
	$(SPECTRAL) lint docs/openapi.json --ruleset .spectral.yaml --fail-severity=warn

# ---- one function, the Docker-free `sam local invoke` (packyard_cli/invoke.py); `make invoke` alone lists them
FN ?=
EVENT ?=
invoke: $(STAMP)
	@$(BIN)/python -m packyard_cli.invoke $(FN) $(EVENT)

# rewrite events/ (the sample event of every function) from the seed make invoke uses
events: $(STAMP)
	$(BIN)/python -m packyard_cli.invoke --write-events

# ---- SAM: build with the Lambda runtime's Python (python3.12), deploy with samconfig.toml's ENV (dev or prod)
ENV ?= dev
SAM_BUILD_FLAGS ?=
SAM_DEPLOY_FLAGS ?=
# the first python3.12 that runs: on PATH, else a pyenv or /usr/local install (a pyenv shim may exist but not run)
PY312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 \
	/opt/homebrew/bin/python3.12; do $$p -c '' >/dev/null 2>&1 && { command -v $$p; break; }; done)
build: $(SAM_VENV)/.installed
	@if [ -z "$(PY312)" ] && ! echo "$(SAM_BUILD_FLAGS)" | grep -q -- --use-container; then \
	  echo "make build: sam build needs Python 3.12 (template.yaml's Lambda runtime, python3.12) and found none." >&2; \
	  echo "  Install it: apt-get install python3.12 | brew install python@3.12 | pyenv install 3.12 | uv python install 3.12" >&2; \
	  echo "  or, where Docker runs: make build SAM_BUILD_FLAGS=--use-container" >&2; exit 1; fi
	PATH="$(dir $(PY312)):$$PATH" SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam build --config-env $(ENV) $(SAM_BUILD_FLAGS)
	@# Lambda's file system is read-only and sam build ships no bytecode: without .pyc every cold start compiles
	@# every module (ours and the layer's libraries). unchecked-hash: valid whatever times the zip keeps (issue 11).
	@if [ -n "$(PY312)" ]; then \
	  $(PY312) -m compileall -q -j 0 --invalidation-mode unchecked-hash .aws-sam/build >/dev/null \
	    || echo "make build: some files did not compile to bytecode; those compile at import, as before" >&2; \
	else echo "make build: no local Python 3.12 to compile bytecode with: the artifact ships source only" >&2; fi

# JWT_ISSUER / JWT_AUDIENCE: your identity provider (e.g. a Cognito user pool); or keep them in samconfig.toml.
# CREATE_USER_POOL=true instead: the stack's own Cognito user pool is the identity provider (MACHINE_TENANT: the
# tenant of its client-credentials tokens); README, "Sign in with the stack's own user pool"
JWT_ISSUER ?=
JWT_AUDIENCE ?=
CREATE_USER_POOL ?=
MACHINE_TENANT ?=
DEPLOY_OVERRIDES = $(strip $(if $(JWT_ISSUER),JwtIssuer=$(JWT_ISSUER) JwtAudience=$(JWT_AUDIENCE)) \
  $(if $(filter true,$(CREATE_USER_POOL)),CreateUserPool=true $(if $(MACHINE_TENANT),UserPoolMachineTenant=$(MACHINE_TENANT))))
deploy: build
	@if [ -z "$(DEPLOY_OVERRIDES)" ] && ! grep -A8 '^\[$(ENV).deploy.parameters\]' samconfig.toml | grep -q -e JwtIssuer -e CreateUserPool=true; then \
	  echo "make deploy: set JWT_ISSUER and JWT_AUDIENCE (the IdP whose tokens the API accepts), e.g." >&2; \
	  echo "  make deploy ENV=$(ENV) JWT_ISSUER=https://cognito-idp.<region>.amazonaws.com/<pool> JWT_AUDIENCE=<client id>" >&2; \
	  echo "  or let the stack create its own user pool: make deploy ENV=$(ENV) CREATE_USER_POOL=true MACHINE_TENANT=<tenant>" >&2; \
	  echo "  or add them to parameter_overrides in samconfig.toml [$(ENV).deploy.parameters]" >&2; exit 1; fi
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam deploy --config-env $(ENV) $(SAM_DEPLOY_FLAGS) \
	  $(if $(DEPLOY_OVERRIDES),--parameter-overrides Stage=$(ENV) $(DEPLOY_OVERRIDES))

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) $(CLIENT_VENV) $(SPECTRAL_DIR)/node_modules .pytest_cache .ruff_cache .mypy_cache .aws-sam .packyard-local
