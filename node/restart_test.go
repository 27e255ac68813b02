package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire/pki"
)

// crash stops a node the way a kill -9 would: its socket goes away without
// telling any peer.
func (tn *testNode) crash() {
	tn.crashed = true
	tn.udp.Close()
	tn.stop()
}

// TestCrashedNodeIsSeenAtOnce: a node restarted after a crash answers its
// old peers with stateless resets from its persisted key, so they learn at
// once that their connection is gone instead of waiting for a timeout.
func TestCrashedNodeIsSeenAtOnce(t *testing.T) {
	dir := t.TempDir()
	tn := startNodeIn(t, dir, "127.0.0.1:0", nil)
	addr := tn.Addr().String()
	c := tn.dial(pki.RoleClient)
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	tn.crash()
	select {
	case <-c.Done():
		t.Fatal("the crashed node told its peer it was going; nothing was meant to be sent")
	default:
	}
	startNodeIn(t, dir, addr, nil)
	// The ping's first packet may wait for the client's next probe timeout:
	// its pings sent while the node was down backed the timer off, by
	// seconds when the restart was slow (a loaded machine, -race).
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	_, err := c.Ping(ctx)
	var reset *quic.StatelessResetError
	if !errors.As(err, &reset) {
		// Without the persisted key the node could not reset the old
		// connection and the client would wait for its idle timeout.
		t.Fatalf("ping to the restarted node: %v, want a stateless reset", err)
	}
}
