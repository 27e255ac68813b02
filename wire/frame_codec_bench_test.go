package wire

import "testing"

// vectorCBOR returns the CBOR of the named vector; for a frame vector,
// without its length prefix, as DecodeFrame takes it.
func vectorCBOR(tb testing.TB, name string) []byte {
	tb.Helper()
	for _, lv := range loadVectors(tb) {
		if lv.name != name {
			continue
		}
		if isFrameVector(name) {
			return lv.cbor[FrameHeaderLen:]
		}
		return lv.cbor
	}
	tb.Fatalf("no vector %s", name)
	return nil
}

// BenchmarkDecodeFrame decodes the frames every route read passes: the
// request a node reads and the response a client reads.
func BenchmarkDecodeFrame(b *testing.B) {
	for _, bc := range []struct{ name, vector string }{
		{"get-routes-request", "frame-get-routes-request"},
		{"get-routes-request-many", "frame-get-routes-request-many"},
		{"routes-response", "frame-get-routes-response-fresh"},
		{"ping-request", "frame-ping-request"},
	} {
		data := vectorCBOR(b, bc.vector)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var f Frame
				if err := DecodeFrame(data, &f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckDupKeys walks the bodies a client decodes on every route
// read: a routes answer and the route inside it.
func BenchmarkCheckDupKeys(b *testing.B) {
	for _, bc := range []struct{ name, vector string }{
		{"routes-body", "routes-fresh"},
		{"route", "route"},
		{"register", "register"},
	} {
		data := vectorCBOR(b, bc.vector)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := checkDupKeys(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
