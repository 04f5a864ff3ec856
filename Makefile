# Usher — make targets. `make run` starts the embedded default; `make test`
# runs the whole suite (PostgreSQL tests run when TEST_DATABASE_URL is set).

GO       ?= go
BIN      ?= bin/usher
PKGS     ?= ./...
BENCHTIME ?= 2s

.PHONY: all build run test test-short bench lint fmt vet staticcheck clean

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/usher

run: build
	./$(BIN) serve

test: lint
	CGO_ENABLED=1 $(GO) test -race -count=1 $(PKGS)

test-short:
	$(GO) test -count=1 $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./broker/

lint: fmt vet staticcheck

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) tool staticcheck $(PKGS)

clean:
	rm -rf bin
