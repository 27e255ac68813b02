package wire

import (
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzDupKeys checks the duplicate-key walk against the CBOR library's own
// check, which holds everywhere when it decodes into an empty interface:
// on every input the library decodes, both agree on whether a map holds a
// key twice.
func FuzzDupKeys(f *testing.F) {
	for _, h := range []string{
		"a2 01 01 02 02", "a2 01 01 01 02", "a2 01 01 1801 02", "a1 09 a2 6178 00 6178 01",
		"82 a1 01 01 a1 01 01", "a2 20 00 20 01", "a2 40 00 40 01", "a2 4100 00 6100 01",
		"a1 a1 01 01 00", "a2 a1 01 01 00 a1 01 01 00", "a2 f5 00 f5 01", "a2 f94000 00 f94000 01",
	} {
		b, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		libErr := decMode.Unmarshal(b, &v)
		if libErr != nil && !strings.Contains(libErr.Error(), "duplicate map key") {
			return // malformed otherwise: the walk only runs on what decodes
		}
		walkErr := checkDupKeys(b)
		if (libErr != nil) != (walkErr != nil) {
			t.Fatalf("%x: library says %v, walk says %v", b, libErr, walkErr)
		}
	})
}
