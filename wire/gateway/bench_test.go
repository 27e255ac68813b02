package gateway_test

import (
	"context"
	"testing"

	"github.com/edgereg/edgereg/wire/remoting"
)

// BenchmarkCachedRoute is the gateway's own cost of a cached route read:
// the handler and the response frame, without TCP.
func BenchmarkCachedRoute(b *testing.B) {
	s := startSite(b, 1, nil)
	s.registerQUIC(orders(4))
	req := goRouteRequest("orders")
	if resp := s.gw.ServeRemoting(context.Background(), nil, req); resp == nil || resp.Code != remoting.Success {
		b.Fatalf("warm-up read: %+v", resp)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp := s.gw.ServeRemoting(context.Background(), nil, req)
		if _, err := resp.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}
