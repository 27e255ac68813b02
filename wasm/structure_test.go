package wasm

import (
	"context"
	"strings"
	"testing"
)

// TestStructureOfShippedModules parses every shipped and test module: the
// parser must accept all of them (it is stricter than nothing, never
// stricter than wazero), and the figures it logs are what the default
// limits leave headroom over.
func TestStructureOfShippedModules(t *testing.T) {
	for _, name := range []string{"zone-affinity.wasm", "self-preservation.wasm", "jitter-threshold.wasm",
		"hostile/loop.wasm", "hostile/trap.wasm", "hostile/grow.wasm", "hostile/add-broker.wasm", "fixtures/empty-route.wasm"} {
		st, ve := checkStructure(testdata(t, name), Limits{})
		if ve != nil {
			t.Errorf("%s: %v", name, ve)
			continue
		}
		t.Logf("%s: %+v", name, st)
	}
}

// TestElementSegmentsParsed checks that the parser finds its way through
// every form of element segment (active, passive, declarative; function
// indexes or expressions; table 0 implicit or explicit) and counts their
// entries, which one limit bounds for all segments together.
func TestElementSegmentsParsed(t *testing.T) {
	b := wat(t, `(module `+abiPrelude+`
  (table $t 8 funcref)
  (func $f)
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007))
  (elem (i32.const 0) func $f $f)
  (elem func $f)
  (elem (table $t) (i32.const 2) func $f)
  (elem declare func $f)
  (elem (i32.const 3) funcref (ref.func $f) (ref.null func))
  (elem funcref (ref.null func) (ref.func $f) (ref.func $f))
  (elem (table $t) (offset (i32.const 5)) funcref (ref.func $f))
  (elem declare funcref (ref.func $f)))`)
	if b == nil {
		t.Skip("wat2wasm not installed")
	}
	st, ve := checkStructure(b, Limits{})
	if ve != nil {
		t.Fatal(ve)
	}
	if st.ElemSegments != 8 || st.ElemEntries != 12 {
		t.Errorf("%d element segments with %d entries, want 8 with 12", st.ElemSegments, st.ElemEntries)
	}
	if _, ve := checkStructure(b, Limits{ElemEntries: 11}); ve == nil || !strings.Contains(ve.Error(), "element entries") {
		t.Errorf("with a limit of 11 entries: %v, want a refusal naming element entries", ve)
	}
	h := newHost(t, HostConfig{})
	m, err := h.Validate(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}
