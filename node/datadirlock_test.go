package node

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDataDirHeldByOneNode: two nodes started on one data directory (make
// run twice with other ports, a unit and a hand-started node) both ran,
// with the same node id and one KV file that each rewrote from its own
// memory, losing the other's writes. The second is refused, naming the
// directory; once the first stops, the directory can be used again.
func TestDataDirHeldByOneNode(t *testing.T) {
	cfg := Config{Addr: "127.0.0.1:0", AdminAddr: AdminOff, DataDir: t.TempDir(), WarmUp: -1,
		PolicyCacheDir: sharedPolicyCache, Logger: quietLogger()}
	shutdown := func(n *Node) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := New(cfg); err == nil {
		shutdown(second)
		shutdown(first)
		t.Fatal("a second node started on a data directory a running node holds")
	} else if !strings.Contains(err.Error(), cfg.DataDir) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second node: %v; want an error naming the directory as in use", err)
	}
	shutdown(first)
	again, err := New(cfg)
	if err != nil {
		t.Fatalf("after the first node stopped: %v", err)
	}
	shutdown(again)
}
