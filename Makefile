# edgereg — see README.md. `make run` starts a node with working defaults;
# `make test` runs vet and the race-enabled test suite, then the tests with the
# real rocketmq-client-go, which races by itself, without -race.
GO      ?= go
BIN     ?= bin/edgereg
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/edgereg/edgereg/node.Version=$(VERSION)

# FUZZ_EXECS bounds each fuzz target's run by executions rather than time:
# a count is reproducible and avoids go1.26's fuzz-coordinator deadline race.
FUZZ_EXECS ?= 300000x

.PHONY: all build run test bench fuzz policies policies-check clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/edgereg

run: build
	./$(BIN) node

test:
	$(GO) vet ./...
	$(GO) test -race -timeout 15m ./...
	$(GO) test -tags rocketmq -count=1 -timeout 5m ./node/remotingtest ./node/gatewaytest

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... | tee bench.txt

fuzz:
	@for target in $$($(GO) test ./wire -list '^Fuzz' | grep '^Fuzz'); do \
		echo "== $$target"; \
		$(GO) test ./wire -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZ_EXECS) -parallel 1 || exit 1; \
	done

# policies rebuilds every shipped policy module and hostile test module into
# testdata/wasm (needs wat2wasm, Debian package wabt); policies-check
# rebuilds them into a temporary directory and compares bytes.
policies:
	./policies/build.sh

policies-check:
	EDGEREG_CHECK_POLICY_BUILD=1 $(GO) test -run 'ShippedModules' ./wasm

clean:
	rm -rf bin bench.txt
