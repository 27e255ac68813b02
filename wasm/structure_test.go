package wasm

import (
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
