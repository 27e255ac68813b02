# edgereg — see README.md. `make run` starts a node with working defaults;
# `make test` runs vet and the race-enabled test suite.
GO      ?= go
BIN     ?= bin/edgereg
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/edgereg/edgereg/node.Version=$(VERSION)

.PHONY: all build run test bench fuzz clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/edgereg

run: build
	./$(BIN) node

test:
	$(GO) vet ./...
	$(GO) test -race -timeout 15m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... | tee bench.txt

clean:
	rm -rf bin bench.txt
