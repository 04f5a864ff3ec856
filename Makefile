# Usher — make targets. `make run` starts the embedded default; `make test`
# runs the whole suite (PostgreSQL tests run when TEST_DATABASE_URL is set).

GO       ?= go
BIN      ?= bin/usher
PKGS     ?= ./...
BENCHTIME ?= 2s
# Calls per path in BenchmarkToolsCall (PostgreSQL: TEST_DATABASE_URL).
MCP_BENCHTIME ?= 1000x
# Flags of the out-of-process tools/call benchmark (bench/mcpbench), e.g.
# BENCH_MCP_FLAGS='-pairs 10000 -duration 30s -profile cpu.pprof', or, to measure
# a change against the binary before it in the same run, '-against OTHER_USHER'.
BENCH_MCP_FLAGS ?=
UPSTREAM_BIN ?= bin/echoupstream
PROXY_BIN ?= bin/passproxy
NETDELAY_BIN ?= bin/netdelay
# Flags of the Sessions UI benchmark (bench/uibench), e.g.
# BENCH_UI_FLAGS='-messages 20000 -runs 10 -width 390 -height 844'.
BENCH_UI_FLAGS ?=

.PHONY: all build run test test-short bench bench-mcp bench-ui lint fmt vet staticcheck clean e2e-deps

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/usher

run: build
	./$(BIN) serve

test: lint e2e-deps
	CGO_ENABLED=1 $(GO) test -race -count=1 $(PKGS)

# The end-to-end tests' Node.js tools (the MCP conformance suite, the MCP
# Inspector and the Node.js that runs them), pinned in e2e/package-lock.json,
# installed again only when it changes. Not `npm ci`: it refuses the lock
# because an optional, Windows-only dependency of vite is not in the registry;
# `npm install --no-save` installs the locked versions and leaves the lock
# alone. Without npm the end-to-end tests skip, except under CI: they fail.
E2E_DEPS := e2e/node_modules/.package-lock.json

e2e-deps: $(E2E_DEPS)

$(E2E_DEPS): e2e/package.json e2e/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd e2e && npm install --no-save --no-audit --no-fund; \
	else \
		echo "npm not found: the end-to-end tests will skip (and fail where CI is set)"; \
	fi

test-short:
	$(GO) test -count=1 $(PKGS)

# The out-of-process benchmark of an allowed tools/call: usher serve (on
# PostgreSQL when TEST_DATABASE_URL is set, else SQLite), a Go SDK echo
# upstream, the baseline (a transparent reverse proxy in front of that
# upstream) and the load client, four processes on loopback.
bench-mcp: build
	CGO_ENABLED=0 $(GO) build -trimpath -o $(UPSTREAM_BIN) ./bench/echoupstream
	CGO_ENABLED=0 $(GO) build -trimpath -o $(PROXY_BIN) ./bench/passproxy
	CGO_ENABLED=0 $(GO) build -trimpath -o $(NETDELAY_BIN) ./bench/netdelay
	$(GO) run ./bench/mcpbench -usher $(BIN) -upstream $(UPSTREAM_BIN) -proxy $(PROXY_BIN) -netdelay $(NETDELAY_BIN) $(BENCH_MCP_FLAGS)

# The Sessions UI on a conversation of 10,000 messages, in headless
# Chromium against usher serve (PostgreSQL with TEST_DATABASE_URL, else
# SQLite): the navigation until the last message is visible, and the scroll
# up until the first page of history is on the page.
bench-ui: build
	$(GO) run ./bench/uibench -usher $(BIN) $(BENCH_UI_FLAGS)

bench: bench-mcp bench-ui
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./broker/
	@[ -n "$$TEST_DATABASE_URL" ] || echo "TEST_DATABASE_URL is not set: BenchmarkToolsCall (PostgreSQL) skips"
	$(GO) test -run '^$$' -bench ToolsCall -benchtime $(MCP_BENCHTIME) -cpu 2 ./cmd/usher/
	$(GO) test -p 1 -run '^$$' -bench '^BenchmarkAssistant' -benchtime 1x -cpu 2 ./assistant/ ./cmd/usher/
	$(GO) test -run '^$$' -bench '^BenchmarkFanout' -benchtime 1x -cpu 2 ./cmd/usher/
	$(GO) test -run '^$$' -bench '^BenchmarkTokenEndpoint' -benchtime 500x -cpu 2 ./broker/oauth/

lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) tool staticcheck $(PKGS)

clean:
	rm -rf bin
