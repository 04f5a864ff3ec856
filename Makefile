# Usher — make targets. `make run` starts the embedded default; `make test`
# runs the whole suite (PostgreSQL tests run when TEST_DATABASE_URL is set;
# under CI, where .ci/run sets it, they must).

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
COLLECTOR_BIN ?= bin/collector
# Flags of the audit search benchmark (bench/auditbench), e.g.
# BENCH_AUDIT_FLAGS='-rounds 1000 -profile audit.pprof -profile-query tool'.
BENCH_AUDIT_FLAGS ?=
# Flags of the Sessions UI benchmark (bench/uibench), e.g.
# BENCH_UI_FLAGS='-messages 20000 -runs 10 -width 390 -height 844'.
BENCH_UI_FLAGS ?=

# Every test package runs with this -timeout, and must end within
# TEST_BUDGET of it (a share): a package near its limit fails on a busy
# machine, so the report after the tests (internal/testreport) fails the
# run when one is over. It also lists the slowest packages and tests, and
# what was skipped and why, one line per reason.
TEST_TIMEOUT ?= 20m
TEST_BUDGET ?= 0.4
# The race detector's flags. -race also turns on the compiler's checks of
# unsafe pointer conversions (-d=checkptr) in every package; in the
# SQLite driver, C translated into Go that converts pointers on every
# statement, they took a third of the CPU of the suites that run the
# embedded database, and they check code that is not Usher's. The race
# detector still instruments it.
RACE := -race -gcflags='modernc.org/...=-d=checkptr=0'
# The run's events (go test -json), which the report reads.
TEST_EVENTS ?= bin/test-events.json
# The programs the process-level tests run (internal/testenv), built once
# before the tests: usher, the benchmark's upstream, proxy, relay and
# collector, and the MCP fixtures.
TESTBIN ?= bin/test
TESTBIN_PKGS := ./cmd/usher ./bench/echoupstream ./bench/passproxy ./bench/netdelay ./bench/collector \
	./mcpserver/testdata/fixture github.com/modelcontextprotocol/go-sdk/conformance/everything-server
# gotestsum prints a line as each package ends, and the failures; the report
# follows, with the skips told once per reason.
GOTESTSUM := $(GO) tool gotestsum --format pkgname --format-hide-empty-pkg --hide-summary=skipped --jsonfile $(TEST_EVENTS)
REPORT := $(GO) run ./internal/testreport -timeout $(TEST_TIMEOUT) -budget $(TEST_BUDGET) $(TEST_EVENTS)
# The Helm chart's tests (deploy/helm, a module of its own so that Helm's
# dependencies stay out of the binary's), with the same flags, the same
# prebuilt programs and a report of their own. Helm (the module's pinned
# tool, which the tests run) is built first, so that its build does not
# count in the tests' time.
CHART_EVENTS ?= bin/test-events-chart.json
CHART_TEST := $(GO) tool gotestsum --format pkgname --format-hide-empty-pkg --hide-summary=skipped --jsonfile $(CHART_EVENTS) \
	--raw-command -- $(GO) test -C deploy/helm -json $(RACE) -count=1 -timeout $(TEST_TIMEOUT) ./...
CHART_REPORT := $(GO) run ./internal/testreport -timeout $(TEST_TIMEOUT) -budget $(TEST_BUDGET) $(CHART_EVENTS)

.PHONY: all build run test test-short testbin bench bench-mcp bench-audit bench-ui lint fmt vet staticcheck tidy clean e2e-deps \
	image sbom image-ref image-test

all: lint test build

# The release version stamped into the binary (internal/buildinfo): the
# nearest v* tag, as git describe says it; none (devel) without one. The
# commit and its time are stamped by the go command from the checkout.
VERSION ?= $(shell git describe --tags --match 'v*' 2>/dev/null)
LDFLAGS := -X github.com/usherhq/usher/internal/buildinfo.version=$(VERSION)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/usher

run: build
	./$(BIN) serve

# The OCI image (deploy/image/Containerfile; docs/image.md), built with
# buildah from `make build`'s binary into buildah's local storage as
# $(IMAGE):$(IMAGE_TAG). No registry is needed: the image has no base and no
# RUN step. buildah's storage driver is its own setting (STORAGE_DRIVER=vfs
# where overlay is not available).
IMAGE ?= usher
# The version the binary reports: the release tag (VERSION), else the Go
# pseudo-version of the commit it was built from, else (devel).
IMAGE_VERSION = $(or $(VERSION),$(shell $(GO) version -m $(BIN) | awk '$$1 == "mod" { print $$3 }'))
# The image's tag: IMAGE_VERSION, spelled as a tag may be ("+dirty" becomes
# "-dirty", "(devel)" "devel"). Never latest.
lparen := (
rparen := )
IMAGE_TAG ?= $(subst +,-,$(subst $(lparen),,$(subst $(rparen),,$(IMAGE_VERSION))))
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_SOURCE ?= https://github.com/usherhq/usher
# The build context: the binary, its SBOM, LICENSE and NOTICE, the CA
# bundle and the empty data directory.
IMAGE_CONTEXT ?= bin/image
# The binary's CycloneDX SBOM, also in the image at
# /usr/share/doc/usher/sbom.cdx.json.
SBOM ?= bin/usher.cdx.json

image: build sbom
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/data
	cp $(BIN) $(IMAGE_CONTEXT)/usher
	cp $(SBOM) $(IMAGE_CONTEXT)/sbom.cdx.json
	cp LICENSE NOTICE $(IMAGE_CONTEXT)/
	$(GO) run ./deploy/image/cabundle > $(IMAGE_CONTEXT)/ca-certificates.crt
	buildah build --format oci --layers=false -f deploy/image/Containerfile -t $(IMAGE):$(IMAGE_TAG) \
		--build-arg VERSION='$(IMAGE_VERSION)' --build-arg REVISION='$(REVISION)' \
		--build-arg SOURCE='$(IMAGE_SOURCE)' --build-arg CREATED="$$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
		$(IMAGE_CONTEXT)
	@echo "built $(IMAGE):$(IMAGE_TAG); SBOM $(SBOM)"

# The SBOM of the binary (CycloneDX JSON, by the cyclonedx-gomod Go tool):
# its modules with their hashes and detected licences, and the Go standard
# library. GOPROXY=off: every module is in the module cache since the
# build, and the proxy does not serve Usher's own module at a local
# version (its licence is in LICENSE).
sbom: build
	GOPROXY=off "$$($(GO) tool -n cyclonedx-gomod)" bin -json -licenses -std \
		-version '$(IMAGE_VERSION)' -output $(SBOM) $(BIN)

# The name and tag `make image` gives the image (.ci/run reads it).
image-ref:
	@echo '$(IMAGE):$(IMAGE_TAG)'

# The image smoke test (deploy/image): the built image, mounted with
# buildah, its usher run under chroot as the image's user against
# PostgreSQL (TEST_DATABASE_URL). Needs root.
image-test:
	USHER_TEST_IMAGE='$(IMAGE):$(IMAGE_TAG)' $(GO) test -count=1 ./deploy/image/

# The whole suite with the race detector (which needs gcc), after lint.
# go test's own vet checks are off here (-vet=off): lint has run all of
# vet's on the same packages. The chart's module, which lint does not
# cover, keeps them.
test: lint e2e-deps testbin
	@status=0; CGO_ENABLED=1 USHER_TEST_BIN=$(abspath $(TESTBIN)) $(GOTESTSUM) -- \
		$(RACE) -vet=off -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) || status=$$?; \
	$(REPORT) || status=1; \
	$(GO) tool -C deploy/helm -n helm >/dev/null && \
	CGO_ENABLED=1 USHER_TEST_BIN=$(abspath $(TESTBIN)) $(CHART_TEST) || status=$$?; \
	$(CHART_REPORT) || status=1; exit $$status

testbin:
	@mkdir -p $(TESTBIN) $(dir $(TEST_EVENTS))
	CGO_ENABLED=0 $(GO) build -trimpath -o $(TESTBIN)/ $(TESTBIN_PKGS)

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

# The suite without the race detector and lint: what a machine with only
# Go runs. What it cannot run here (PostgreSQL, Chromium, Node.js) skips,
# one line per reason in the report.
test-short: testbin
	@status=0; USHER_TEST_BIN=$(abspath $(TESTBIN)) $(GOTESTSUM) -- \
		-count=1 -timeout $(TEST_TIMEOUT) $(PKGS) || status=$$?; \
	$(REPORT) || status=1; exit $$status

# The out-of-process benchmark of an allowed tools/call: usher serve (on
# PostgreSQL when TEST_DATABASE_URL is set, else SQLite), a Go SDK echo
# upstream, the baseline (a transparent reverse proxy in front of that
# upstream) and the load client, each a process on loopback; beside the
# plain Usher, the same binary with an audit webhook sink and with tracing
# on, both delivering to a receiver process (bench/collector), in the same
# rounds.
bench-mcp: build
	CGO_ENABLED=0 $(GO) build -trimpath -o $(UPSTREAM_BIN) ./bench/echoupstream
	CGO_ENABLED=0 $(GO) build -trimpath -o $(PROXY_BIN) ./bench/passproxy
	CGO_ENABLED=0 $(GO) build -trimpath -o $(NETDELAY_BIN) ./bench/netdelay
	CGO_ENABLED=0 $(GO) build -trimpath -o $(COLLECTOR_BIN) ./bench/collector
	$(GO) run ./bench/mcpbench -usher $(BIN) -upstream $(UPSTREAM_BIN) -proxy $(PROXY_BIN) -netdelay $(NETDELAY_BIN) -collector $(COLLECTOR_BIN) $(BENCH_MCP_FLAGS)

# A reviewer's GET /api/audit with a filter on a log of 1,000,000 records,
# through usher serve over loopback HTTP, against the store's SELECT alone
# in the same run: PostgreSQL only (TEST_DATABASE_URL); without it the
# program says it skips.
bench-audit: build
	$(GO) run ./bench/auditbench -usher $(BIN) $(BENCH_AUDIT_FLAGS)

# The Sessions UI on a conversation of 10,000 messages, in headless
# Chromium against usher serve (PostgreSQL with TEST_DATABASE_URL, else
# SQLite): the navigation until the last message is visible, and the scroll
# up until the first page of history is on the page.
bench-ui: build
	$(GO) run ./bench/uibench -usher $(BIN) $(BENCH_UI_FLAGS)

bench: bench-mcp bench-audit bench-ui
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./broker/
	@[ -n "$$TEST_DATABASE_URL" ] || echo "TEST_DATABASE_URL is not set: BenchmarkToolsCall (PostgreSQL) skips"
	$(GO) test -run '^$$' -bench ToolsCall -benchtime $(MCP_BENCHTIME) -cpu 2 ./cmd/usher/
	$(GO) test -p 1 -run '^$$' -bench '^BenchmarkAssistant' -benchtime 1x -cpu 2 ./assistant/ ./cmd/usher/
	$(GO) test -run '^$$' -bench '^BenchmarkFanout' -benchtime 1x -cpu 2 ./cmd/usher/
	$(GO) test -run '^$$' -bench '^BenchmarkTokenEndpoint' -benchtime 500x -cpu 2 ./broker/oauth/

lint: fmt vet staticcheck tidy

# Both modules' go.mod and go.sum are tidy: the chart's module
# (deploy/helm) requires this one through a replace, so a change to this
# one's requirements needs `go mod tidy` there too.
tidy:
	$(GO) mod tidy -diff
	$(GO) -C deploy/helm mod tidy -diff

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# vet and staticcheck load the packages' dependencies as `make build` and
# `make testbin` compile them (CGO_ENABLED=0, -trimpath), so that the three
# share one compilation of the dependencies in the build cache rather than
# two: on a machine whose cache is empty, as CI's is, that is minutes.
LINT_ENV := CGO_ENABLED=0 GOFLAGS='$(strip $(GOFLAGS) -trimpath)'

vet:
	$(LINT_ENV) $(GO) vet $(PKGS)

staticcheck:
	$(LINT_ENV) $(GO) tool staticcheck $(PKGS)

clean:
	rm -rf bin
