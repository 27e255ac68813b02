# edgereg — see README.md. `make run` starts a node with working defaults
# (`make run ARGS="--log-level debug"` passes flags); `make test` runs vet
# and the race-enabled test suite, then the tests with the real
# rocketmq-client-go (which races by itself) without -race, then the
# deployment module's tests; `make image` builds the OCI image.
GO      ?= go
BIN     ?= bin/edgereg
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/edgereg/edgereg/node.Version=$(VERSION) -X github.com/edgereg/edgereg/node.Commit=$(COMMIT)
ARGS    ?=
# The image: a static binary for linux on this machine's architecture,
# packed by cmd/edgereg/deploy/mkimage (no container daemon needed).
IMAGE      ?= bin/edgereg-image.tar
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# The deployment files' tests (Kubernetes API types, the image) live in
# their own module, so the main module does not depend on k8s.io/api.
DEPLOY  := cmd/edgereg/deploy

# FUZZ_EXECS bounds each fuzz target's run by executions rather than time:
# a count is reproducible and avoids go1.26's fuzz-coordinator deadline race.
FUZZ_EXECS ?= 300000x
# FUZZ_PKGS are the packages whose Fuzz targets `make fuzz` runs, each in
# turn (go test -fuzz takes one target of one package at a time): the wire
# codec, the RocketMQ remoting codec, the node's remoting handler, and the
# policy host's checks of a module's bytes.
FUZZ_PKGS  ?= ./wire ./wire/remoting ./node ./wasm

.PHONY: all build run test image bench fuzz policies policies-check clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/edgereg

run: build
	./$(BIN) node $(ARGS)

test:
	$(GO) vet ./...
	$(GO) test -race -timeout 15m ./...
	$(GO) test -tags rocketmq -count=1 -timeout 5m ./node/remotingtest ./node/gatewaytest
	cd $(DEPLOY) && $(GO) vet ./... && $(GO) test -timeout 10m ./...
	# Every benchmark once, so one that stops working fails the build.
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 10m ./...

image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/edgereg-linux-$(IMAGE_ARCH) ./cmd/edgereg
	cd $(DEPLOY) && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./mkimage --binary $(CURDIR)/bin/edgereg-linux-$(IMAGE_ARCH) \
		--version $(VERSION) --commit $(COMMIT) --arch $(IMAGE_ARCH) --out $(CURDIR)/$(IMAGE)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... > bench.txt; status=$$?; cat bench.txt; exit $$status

fuzz:
	@for pkg in $(FUZZ_PKGS); do \
		for target in $$($(GO) test $$pkg -list '^Fuzz' | grep '^Fuzz'); do \
			echo "== $$pkg $$target"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZ_EXECS) -parallel 1 || exit 1; \
		done; \
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
