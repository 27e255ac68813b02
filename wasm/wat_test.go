package wasm

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Small modules for refusal tests, compiled at test time. wat2wasm (Debian
// package wabt) is needed only for these; without it they are skipped, and
// the committed hostile modules still cover each refusal reason.

const abiPrelude = `
  (memory (export "memory") 1)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "edgereg_free") (param i32 i32))
  (data (i32.const 64) "\a1\01\a2\01\80\02\80")`

const (
	badDryRun = `(module ` + abiPrelude + `
  (data (i32.const 128) "\a1\01\a2\01\80\02\81\a3\01\61c\02\61x\04\a0")
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000008000000010)))`
	noHook       = `(module ` + abiPrelude + `)`
	badSignature = `(module ` + abiPrelude + `
  (func (export "edgereg_route_filter") (param i32 i32) (result i32) (i32.const 0)))`
	envImport = `(module (import "env" "now" (func (result i64))) ` + abiPrelude + `
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007)))`
)

// wat compiles WebAssembly text, or returns nil without wat2wasm.
func wat(t testing.TB, src string) []byte {
	t.Helper()
	path, err := exec.LookPath("wat2wasm")
	if err != nil {
		return nil
	}
	dir := t.TempDir()
	cmd := exec.Command(path, "-", "-o", dir+"/m.wasm")
	cmd.Stdin = strings.NewReader(src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, out)
	}
	b, err := os.ReadFile(dir + "/m.wasm")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
