package wire

import "testing"

// TestTypeKnown: Known holds for exactly the named types, whatever the
// number.
func TestTypeKnown(t *testing.T) {
	for typ := range Type(1 << 12) {
		_, named := typeNames[typ]
		if typ.Known() != named {
			t.Errorf("type %d: Known() = %v, named %v", typ, typ.Known(), named)
		}
	}
	if Type(65535).Known() {
		t.Error("type 65535 is known")
	}
}
