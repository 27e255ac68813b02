#!/usr/bin/env bash
# Rebuilds every policy module the project ships and every hostile test
# module, and records what each was built from.
#
#   policies/<name>/        (Go, package main)  -> testdata/wasm/<name>.wasm
#   policies/wat/<name>.wat (WebAssembly text)  -> testdata/wasm/<name>.wasm
#   testdata/wasm/hostile/<name>.wat            -> testdata/wasm/hostile/<name>.wasm
#   testdata/wasm/fixtures/<name>.wat           -> testdata/wasm/fixtures/<name>.wasm
#
# testdata/wasm/SOURCES.sha256 gets one line per module:
#   <sources hash> <module hash> <module path>
# where <sources hash> is the SHA-256 of `sha256sum` over the module's
# sources in byte order (for Go: policies/<name>/*.go and policies/sdk/*.go
# without tests; for WAT: the .wat file). wasm's tests recompute it and fail
# when a module is stale. Go builds are reproducible (-trimpath,
# -buildvcs=false); EDGEREG_CHECK_POLICY_BUILD=1 go test ./wasm also
# rebuilds into a temporary directory (OUT=...) and compares bytes.
#
# Needs: go (1.24 or later, for //go:wasmexport) and wat2wasm (Debian: wabt).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
WAT2WASM=${WAT2WASM:-wat2wasm}
OUT=${OUT:-testdata/wasm}
mkdir -p "$OUT/hostile" "$OUT/fixtures"

# srchash prints the sources hash of the files named on stdin.
srchash() {
	LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1
}

lines=()
record() { # sources-hash module-path-relative-to-OUT
	lines+=("$1 $(sha256sum "$OUT/$2" | cut -d' ' -f1) testdata/wasm/$2")
}

for dir in policies/*/; do
	name=$(basename "$dir")
	[ -f "$dir/main.go" ] || continue
	echo "go     $dir -> $OUT/$name.wasm"
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 "$GO" build -buildmode=c-shared -trimpath -buildvcs=false \
		-o "$OUT/$name.wasm" "./$dir"
	h=$(ls "$dir"*.go policies/sdk/*.go | grep -v '_test\.go$' | srchash)
	record "$h" "$name.wasm"
done

for src in policies/wat/*.wat; do
	name=$(basename "$src" .wat)
	echo "wat    $src -> $OUT/$name.wasm"
	"$WAT2WASM" "$src" -o "$OUT/$name.wasm"
	record "$(echo "$src" | srchash)" "$name.wasm"
done

for sub in hostile fixtures; do
	for src in testdata/wasm/$sub/*.wat; do
		name=$(basename "$src" .wat)
		"$WAT2WASM" "$src" -o "$OUT/$sub/$name.wasm"
		record "$(echo "$src" | srchash)" "$sub/$name.wasm"
	done
	echo "wat    testdata/wasm/$sub/*.wat -> $OUT/$sub/"
done

{
	echo "# Built by policies/build.sh with $("$GO" env GOVERSION) and $("$WAT2WASM" --version). Do not edit."
	printf '%s\n' "${lines[@]}" | LC_ALL=C sort -k3
} > "$OUT/SOURCES.sha256"
