# probing-mcp: make test runs everything CI runs; make demo is the newcomer's first command.
GO     ?= go
PYTHON ?= python3
VENV   := .venv
# go-nvml's cgo code uses NVML entry points its own headers mark deprecated;
# silence that one warning class (Go has no per-package C flags, so it
# applies to every cgo package; -O2 -g is Go's default, kept).
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: build demo test redteam eval eval-agent soak bench bench-sql fuzz gpu-check wheel wheel-ci clean

# The first build compiles SQLite (cgo): 2-4 minutes on 2 cores, with a
# line every 30 s; later builds take seconds.
build:
	@echo "building bin/probing-mcp (the first build compiles SQLite: 2-4 minutes; later ones are cached)"
	@scripts/with-progress "go build" $(GO) build -o bin/probing-mcp ./cmd/probing-mcp

demo: build
	./bin/probing-mcp demo

# The end-to-end tests drive the built binary with the official Python MCP
# client, and the agent's tests run under pytest: both are installed into
# .venv from PyPI, so nothing but python3 itself is needed.
$(VENV)/.installed: mcp/testdata/e2e/requirements.txt agent/python/tests/requirements.txt
	@echo "installing the Python MCP client and pytest into $(VENV) (from PyPI)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r mcp/testdata/e2e/requirements.txt -r agent/python/tests/requirements.txt
	touch $@

# The end-to-end tests also drive the binary with the official MCP
# Inspector's CLI, in the two releases people have (0.15 and 2.12), from npm
# (package.json, pinned by package-lock.json; no install scripts run).
node_modules/.installed: package.json package-lock.json
	@echo "installing the MCP Inspector CLI (0.15 and 2.12) into node_modules (from npm, about a minute)"
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# Every step runs whatever an earlier one said, so a Go failure never
# hides the agent's pytest suite (each failed step is named at the end);
# the target fails when any step failed. What the tests keep for a person
# to look at (the pictures' pages and screenshots) goes to test-artifacts/.
test: $(VENV)/.installed node_modules/.installed
	@failed=""; \
	  unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	  if [ -n "$$unformatted" ]; then echo "not gofmt-ed: $$unformatted"; failed="$$failed gofmt"; fi; \
	  echo "go vet"; \
	  scripts/with-progress "go vet" $(GO) vet ./... || failed="$$failed go-vet"; \
	  echo "go test -race ./... (the first run builds the race-instrumented tests: several minutes; each package prints ok as it ends)"; \
	  PROBING_TEST_ARTIFACTS=$(CURDIR)/test-artifacts PROBING_E2E_PYTHON=$(CURDIR)/$(VENV)/bin/python PROBING_E2E_REQUIRED=1 scripts/with-progress "go test" $(GO) test -race -count=1 ./... || failed="$$failed go-test"; \
	  echo "the agent's pytest suite"; \
	  scripts/with-progress pytest $(VENV)/bin/python -m pytest -q agent/python/tests pypi/tests || failed="$$failed pytest"; \
	  if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	  echo "make test: every step passed"

# PyPI (pypi/, docs/RELEASE.md). make wheel cross-compiles the
# manylinux_2_17 wheels for x86_64 and aarch64 (cgo through Zig's C
# toolchain, from PyPI) and the sdist into dist/, then checks each as pip
# and a user meet it (pypi/check.py: the tag against the binary, auditwheel,
# the aarch64 binary under qemu-user, a fresh venv, the sdist built offline).
# The first build compiles SQLite for each arch: about 2 minutes each.
WHEEL_VENV := .venv-wheel
$(WHEEL_VENV)/.installed: pypi/requirements.txt
	@echo "installing ziglang and auditwheel into $(WHEEL_VENV) (from PyPI)"
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install --quiet --disable-pip-version-check -r pypi/requirements.txt
	touch $@

wheel: $(WHEEL_VENV)/.installed
	rm -f dist/probing_mcp-*
	$(WHEEL_VENV)/bin/python pypi/probing_mcp_build.py --arch x86_64 --arch aarch64 --sdist --out dist
	$(WHEEL_VENV)/bin/python pypi/check.py --smoke --sdist dist/probing_mcp-$$(cat VERSION).tar.gz dist/probing_mcp-*.whl

# CI's share (.ci/run): this machine's wheel (x86_64 there) and the sdist, checked, each
# installed into a fresh venv and run (the demo and analyze included).
wheel-ci: $(WHEEL_VENV)/.installed
	rm -f dist/probing_mcp-*
	$(WHEEL_VENV)/bin/python pypi/probing_mcp_build.py --arch $$(uname -m) --sdist --out dist
	$(WHEEL_VENV)/bin/python pypi/check.py --smoke --sdist dist/probing_mcp-$$(cat VERSION).tar.gz dist/probing_mcp-*.whl

# Issue 23's red-team suite (redteam/): each attack on the whole job's
# trust, against the built binary as a hostile user would make it (two-user
# ones as uid 65534 when run as root), with the memory and time each must
# stay under, the heavy ones (a node's 250 MiB reply, 300 store slots of
# 1 MB) included; make test runs the fast ones.
redteam:
	$(GO) test -tags redteam -count=1 -v ./redteam/

# The scored corpus (docs/EVALS.md): real jobs that hang, die or straggle
# with known answers, diagnosed through diagnose_hang by the official MCP
# client. TORCH_PYTHON=/path/to/python adds the torch (gloo) jobs;
# EVAL_ARGS passes more options (--only X, --markdown OUT, --json OUT).
TORCH_PYTHON ?=
eval: build $(VENV)/.installed
	$(VENV)/bin/python evals/score.py $(if $(TORCH_PYTHON),--python-torch $(TORCH_PYTHON),--torch-free) $(EVAL_ARGS)

# The scripted agent harness (evals/agent.py, docs/EVALS.md): each case
# investigated as the server's guidance says, measured (calls and characters
# to the root cause, consistency), compared with the recorded baseline.
eval-agent: build $(VENV)/.installed
	$(VENV)/bin/python evals/score.py --agent --baseline evals/agent_baseline.json $(if $(TORCH_PYTHON),--python-torch $(TORCH_PYTHON),--torch-free) $(EVAL_ARGS)

# The watcher's soak (evals/soak.py): healthy, checkpointing and evaluating
# jobs watched 4 minutes each (20 in all with TORCH_PYTHON); any alert fails.
soak: build
	python3 evals/soak.py $(if $(TORCH_PYTHON),--python-torch $(TORCH_PYTHON),--torch-free) $(SOAK_ARGS)

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

# On a machine with an NVIDIA GPU (under two minutes): every NVML field,
# LD_BIND_NOW=1, the sampler's rings, and the idle/spinning/busy signatures
# (PYTHON with torch+CUDA for the last two). Exit 3: no GPU here.
gpu-check: build
	scripts/gpu-check bin/probing-mcp

fuzz:
	$(GO) test ./flightrecorder/pickle -run '^$$' -fuzz FuzzDecode -fuzztime 60s
	$(GO) test ./flightrecorder -run '^$$' -fuzz FuzzDecode -fuzztime 60s
	$(GO) test ./storage/memt -run '^$$' -fuzz FuzzOpenScan -fuzztime 60s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzQueryCorruptRing -fuzztime 60s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzSplitStatements -fuzztime 30s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzQuerySQL -fuzztime 60s
	$(GO) test ./storage/sqlengine -run '^$$' -fuzz FuzzBoundedFunctions -fuzztime 60s
	$(GO) test ./procfacts -run '^$$' -fuzz FuzzParse -fuzztime 30s
	$(GO) test ./mcp -run '^$$' -fuzz FuzzInvalidRequestID -fuzztime 30s
	$(GO) test ./tools -run '^$$' -fuzz FuzzFilePolicyCheck -fuzztime 30s
	$(GO) test ./stacks -run '^$$' -fuzz FuzzParseFaulthandler -fuzztime 30s
	$(GO) test ./skills -run '^$$' -fuzz FuzzParseSteps -fuzztime 30s
	$(GO) test ./skills -run '^$$' -fuzz FuzzParseRule -fuzztime 30s

clean:
	rm -rf bin $(VENV) node_modules dist $(WHEEL_VENV)
