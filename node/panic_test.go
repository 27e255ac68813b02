package node

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)


// TestHandlerPanicIsRecovered is issue 10's item 13: a panic in one request
// handler is answered with an internal error, counted and logged with the
// request's kind, and the node, the stream and the worker slot survive.
func TestHandlerPanicIsRecovered(t *testing.T) {
	var logs syncBuffer
	t.Cleanup(func() { testHookDispatch = nil }) // after the node's shutdown
	tn := startNode(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Workers = 1 // a leaked worker slot would stop the node
	})
	testHookDispatch = func(f *wire.Frame) {
		if f.Type == wire.TypeClusterInfo {
			panic("injected handler bug")
		}
	}
	c := tn.dial(pki.RoleClient)
	ctx := ctxT(t)
	for i := range 3 {
		_, err := c.ClusterInfo(ctx)
		if !errors.Is(err, wire.ErrInternal) {
			t.Fatalf("call %d to a panicking handler = %v, want an internal error", i, err)
		}
		if _, err := c.Ping(ctx); err != nil { // same stream, same worker
			t.Fatalf("ping after panic %d: %v", i, err)
		}
	}
	if got := testutil.ToFloat64(tn.stats.panics.WithLabelValues("cluster-info")); got != 3 {
		t.Errorf("edgereg_request_panics_total{kind=cluster-info} = %v, want 3", got)
	}
	if l := logs.String(); !strings.Contains(l, "injected handler bug") || !strings.Contains(l, "kind=cluster-info") {
		t.Errorf("the panic was not logged with its kind:\n%s", l)
	}
}
