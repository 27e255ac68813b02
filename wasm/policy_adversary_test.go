package wasm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// watWith compiles WebAssembly text with extra wat2wasm flags (proposals
// such as --enable-threads); it skips the test without wat2wasm.
func watWith(t testing.TB, src string, flags ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("wat2wasm")
	if err != nil {
		t.Skip("no wat2wasm (Debian package wabt)")
	}
	dir := t.TempDir()
	cmd := exec.Command(path, append(flags, "-", "-o", dir+"/m.wasm")...)
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

// routeModule is a valid route filter answering the empty route; tag makes
// its bytes (and so its hash) differ from other modules'.
func routeModule(t testing.TB, tag string) []byte {
	return watWith(t, `(module `+abiPrelude+`
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007))
  (func (export "tag_`+tag+`")))`)
}

// TestDryRunOnSpentBudgetIsBusy: a module refused only because the node's
// instance budget is spent (every token held by other modules) is not at
// fault: Validate says busy (ErrBusy, retry later), not a refusal of the
// module (a *ValidationError, answered "bad request").
func TestDryRunOnSpentBudgetIsBusy(t *testing.T) {
	h := newHost(t, HostConfig{MaxInstances: 1})
	held := mustValidate(t, h, routeModule(t, "held")) // its dry-run instance holds the only token
	defer held.Close()
	m, err := h.Validate(context.Background(), routeModule(t, "other"))
	if m != nil {
		m.Close()
		t.Fatal("validated with no instance budget left")
	}
	var ve *ValidationError
	if errors.As(err, &ve) || !errors.Is(err, ErrBusy) {
		t.Fatalf("Validate with the budget spent = %v (a refusal: %v), want ErrBusy and no refusal", err, errors.As(err, &ve))
	}
	// Once the budget is back, the same bytes validate: the busy answer
	// was not remembered as a refusal.
	held.Close()
	m = mustValidate(t, h, routeModule(t, "other"))
	m.Close()
}

func mustValidate(t testing.TB, h *Host, b []byte) *Module {
	t.Helper()
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	return m
}
