# probing-mcp: make test runs everything CI runs; make demo is the newcomer's first command.
GO     ?= go
PYTHON ?= python3
VENV   := .venv

.PHONY: build demo test eval bench bench-sql fuzz clean

build:
	$(GO) build -o bin/probing-mcp ./cmd/probing-mcp

demo: build
	./bin/probing-mcp demo

# The end-to-end tests drive the built binary with the official Python MCP
# client, installed into .venv from PyPI.
$(VENV)/.installed: mcp/testdata/e2e/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r mcp/testdata/e2e/requirements.txt
	touch $@

test: $(VENV)/.installed
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	  if [ -n "$$unformatted" ]; then echo "not gofmt-ed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	PROBING_E2E_PYTHON=$(CURDIR)/$(VENV)/bin/python PROBING_E2E_REQUIRED=1 $(GO) test -race -count=1 ./...
	$(PYTHON) -m pytest -q agent/python/tests

# The scored corpus (docs/EVALS.md): real jobs that hang, die or straggle
# with known answers, diagnosed through diagnose_hang by the official MCP
# client. TORCH_PYTHON=/path/to/python adds the torch (gloo) jobs;
# EVAL_ARGS passes more options (--only X, --markdown OUT, --json OUT).
TORCH_PYTHON ?=
eval: build $(VENV)/.installed
	$(VENV)/bin/python evals/score.py $(if $(TORCH_PYTHON),--python-torch $(TORCH_PYTHON),--torch-free) $(EVAL_ARGS)

# Decode + analyse synthetic dumps of 64..4096 ranks, side by side with
# torch's fr_trace when PYTHON can import torch. See docs/BENCHMARKS.md.
bench:
	evals/bench/fr_bench.sh

# MEMT writer rows/s, then SQL over rings against a native SQLite table
# holding the same rows (1M and 10M rows), then the two designs not taken.
# See docs/BENCHMARKS.md.
bench-sql:
	$(GO) test ./storage/memt -run '^$$' -bench Writer -benchtime 10000000x
	$(GO) test ./storage/sqlengine -run '^$$' -bench SQL -benchtime 3x -timeout 60m
	$(GO) test -tags sqlite_vtable ./storage/sqlengine -run '^$$' -bench GoVTab -benchtime 3x

fuzz:
	$(GO) test ./diag/pickle -run '^$$' -fuzz FuzzDecode -fuzztime 60s
	$(GO) test ./diag/flightrecorder -run '^$$' -fuzz FuzzDecode -fuzztime 60s
	$(GO) test ./storage/memt -run '^$$' -fuzz FuzzOpenScan -fuzztime 60s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzQueryCorruptRing -fuzztime 60s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzSplitStatements -fuzztime 30s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzQuerySQL -fuzztime 60s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzBoundedFunctions -fuzztime 60s
	$(GO) test ./procfacts -run '^$$' -fuzz FuzzParse -fuzztime 30s
	$(GO) test ./mcp -run '^$$' -fuzz FuzzInvalidRequestID -fuzztime 30s
	$(GO) test ./tools -run '^$$' -fuzz FuzzFilePolicyCheck -fuzztime 30s
	$(GO) test ./diag/stacks -run '^$$' -fuzz FuzzParseFaulthandler -fuzztime 30s
	$(GO) test ./skills -run '^$$' -fuzz FuzzParseSteps -fuzztime 30s
	$(GO) test ./skills -run '^$$' -fuzz FuzzParseRule -fuzztime 30s

clean:
	rm -rf bin $(VENV)
