# fleetchat: `make up` runs the service, `make test` passes the tests. Both set up .venv and build the web chat first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WEB_STAMP := web/dist/.built
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) web/index.html web/package.json \
	web/package-lock.json web/vite.config.ts web/tsconfig.json

.PHONY: up test bench chaos eval lint install web clean scan-infra lock test-latest lm-eval

# Every Python version comes from the lock (requirements/lock.txt: exact versions with hashes, Linux x86_64, CPython
# 3.11). `make lock` refreshes it from pyproject.toml's ranges; `make test-latest` tries the newest versions first.
LOCK := requirements/lock.txt
# pip checks every file against the lock's hashes and resolves nothing (the lock is complete, its excludes stay out);
# torch's CPU wheel comes from this machine's disk (pip's find-links), the rest from PyPI.
$(STAMP): $(LOCK) pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
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
	$(BIN)/lint-imports --no-cache
	cd web && npm test
	$(BIN)/pytest -q --durations=25

# Chaos under load (docs/chaos.md): a local fleet of its own (2 gateways behind HAProxy, 2 replicas, redis-server),
# aiperf through the balancer while a gateway and a worker are killed and the stores paused; report in
# bench-results/chaos. aiperf runs from a venv of its own, its versions from requirements/aiperf.txt (`make lock`).
AIPERF_VENV := .venv-aiperf
AIPERF_LOCK := requirements/aiperf.txt
AIPERF_STAMP := $(AIPERF_VENV)/.installed

$(AIPERF_STAMP): $(AIPERF_LOCK)
	test -x $(AIPERF_VENV)/bin/python || $(PY) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install -q --require-hashes --no-deps -r $(AIPERF_LOCK)
	touch $(AIPERF_STAMP)

# guidellm, vLLM's load generator (`make bench`), from its own lock; it requires torch: the CPU build, as in the lock.
GUIDELLM_VENV := .venv-guidellm
GUIDELLM_LOCK := requirements/guidellm.txt
GUIDELLM_STAMP := $(GUIDELLM_VENV)/.installed

$(GUIDELLM_STAMP): $(GUIDELLM_LOCK)
	test -x $(GUIDELLM_VENV)/bin/python || $(PY) -m venv $(GUIDELLM_VENV)
	$(GUIDELLM_VENV)/bin/pip install -q --require-hashes --no-deps -r $(GUIDELLM_LOCK)
	touch $(GUIDELLM_STAMP)

chaos: $(STAMP) $(WEB_STAMP) $(AIPERF_STAMP)
	$(BIN)/fleetchat chaos --aiperf $(AIPERF_VENV)/bin/aiperf

# lm-evaluation-harness against the local stack (docs/lm-eval.md): log-likelihoods through /v1/completions, generation
# through chat completions, on public data read from files; from its own venv and lock. CI runs tiny versions.
LM_EVAL_VENV := .venv-lmeval
LM_EVAL_LOCK := requirements/lm-eval.txt
LM_EVAL_STAMP := $(LM_EVAL_VENV)/.installed

$(LM_EVAL_STAMP): $(LM_EVAL_LOCK)
	test -x $(LM_EVAL_VENV)/bin/python || $(PY) -m venv $(LM_EVAL_VENV)
	$(LM_EVAL_VENV)/bin/pip install -q --require-hashes --no-deps -r $(LM_EVAL_LOCK)
	touch $(LM_EVAL_STAMP)

lm-eval: $(STAMP) $(WEB_STAMP) $(LM_EVAL_STAMP)
	$(BIN)/fleetchat lm-eval --lm-eval $(LM_EVAL_VENV)/bin/lm_eval

# The benchmark report (docs/benchmarks.md); the field's load generators run beside our client, unmodified: aiperf
# (goodput) and guidellm (its own default request), each from a venv of its own.
bench: $(STAMP) $(WEB_STAMP) $(AIPERF_STAMP) $(GUIDELLM_STAMP)
	$(BIN)/fleetchat bench --aiperf $(AIPERF_VENV)/bin/aiperf --guidellm $(GUIDELLM_VENV)/bin/guidellm

# The eval suites against the running local stack (`make up` in another shell); reports in .fleetchat/evals.
eval: $(STAMP)
	$(BIN)/fleetchat eval run

# checkov, the field's Terraform scanner, on infra/terraform: any failed check fails. In a venv of its own, since it
# pins many libraries the project also uses. --skip-download: nothing fetched from Prisma Cloud (CI may be offline);
# TF_CLI_CONFIG_FILE: checkov calls a terraform binary where one is installed, which warns without a CLI config.
# Its versions come from its own lock, requirements/checkov.txt (`make lock`).
CHECKOV_VENV := .venv-checkov
CHECKOV_LOCK := requirements/checkov.txt
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed

$(CHECKOV_STAMP): $(CHECKOV_LOCK)
	test -x $(CHECKOV_VENV)/bin/python || $(PY) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --require-hashes --no-deps -r $(CHECKOV_LOCK)
	touch $(CHECKOV_STAMP)

scan-infra: $(CHECKOV_STAMP)
	TF_CLI_CONFIG_FILE=/dev/null $(CHECKOV_VENV)/bin/checkov -d infra/terraform --compact --quiet --skip-download

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff format --check .

# The lock: uv resolves pyproject.toml's ranges (every extra) and requirements/local.in for the platform below, with
# hashes; requirements/gateway.txt (the Modal gateway image) is the gateway's share of it, requirements/vllm.txt the
# Modal GPU image's, requirements/checkov.txt the Terraform scanner's. TORCH_CPU_WHEELS: where torch's CPU wheel lies
# (requirements/constraints.txt).
TORCH_CPU_WHEELS ?= /opt/wheels
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28
LOCK_INPUTS := pyproject.toml requirements/local.in --all-extras -c requirements/constraints.txt \
	--excludes requirements/excludes.txt --find-links $(TORCH_CPU_WHEELS)
UV_COMPILE := $(BIN)/uv pip compile --quiet --generate-hashes --custom-compile-command "make lock"
# `make lock` keeps every pin its range still allows (a new or changed range moves only what it must);
# `make lock UPGRADE=1` moves everything to the newest versions the ranges allow.
UPGRADE_FLAG := $(if $(UPGRADE),--upgrade)

lock: $(STAMP)
	$(UV_COMPILE) $(UPGRADE_FLAG) $(LOCK_TARGET) $(LOCK_INPUTS) -o $(LOCK)
	$(UV_COMPILE) $(LOCK_TARGET) pyproject.toml -c $(LOCK) --excludes requirements/excludes.txt \
		--excludes requirements/gateway-excludes.txt -o requirements/gateway.txt
	$(UV_COMPILE) $(UPGRADE_FLAG) --python-version 3.12 --python-platform x86_64-manylinux_2_28 requirements/vllm.in \
		-o requirements/vllm.txt
	$(UV_COMPILE) $(UPGRADE_FLAG) $(LOCK_TARGET) requirements/checkov.in -o $(CHECKOV_LOCK)
	$(UV_COMPILE) $(UPGRADE_FLAG) $(LOCK_TARGET) requirements/aiperf.in -o $(AIPERF_LOCK)
	$(UV_COMPILE) $(UPGRADE_FLAG) $(LOCK_TARGET) requirements/lm-eval.in -o $(LM_EVAL_LOCK)
	$(UV_COMPILE) $(UPGRADE_FLAG) $(LOCK_TARGET) requirements/guidellm.in -c requirements/constraints.txt \
		--find-links $(TORCH_CPU_WHEELS) -o $(GUIDELLM_LOCK)

# Drift, before it bites: the newest versions pyproject.toml's ranges admit, in a scratch venv, through the whole suite.
# Prints which versions moved against the lock; the lock and .venv stay as they are.
LATEST := .venv-latest
test-latest: $(STAMP) $(WEB_STAMP)
	rm -rf $(LATEST) && $(PY) -m venv $(LATEST)
	$(UV_COMPILE) $(LOCK_TARGET) $(LOCK_INPUTS) -o $(LATEST)/lock.txt
	$(BIN)/python requirements/drift.py $(LOCK) $(LATEST)/lock.txt
	$(LATEST)/bin/pip install -q --require-hashes --no-deps -r $(LATEST)/lock.txt
	$(LATEST)/bin/pip install -q --no-deps --no-build-isolation -e .
	$(LATEST)/bin/ruff check .
	$(LATEST)/bin/lint-imports --no-cache
	$(LATEST)/bin/pytest -q

clean:
	rm -rf $(VENV) $(LATEST) $(CHECKOV_VENV) .fleetchat .pytest_cache bench-results web/node_modules web/dist
