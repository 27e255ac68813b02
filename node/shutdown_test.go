package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestShutdownClosesConnectionStoredAfterSweep is issue 10's item 8: a
// connection accepted just before Shutdown but recorded after its close
// sweep was never closed, and Shutdown waited for it forever.
func TestShutdownClosesConnectionStoredAfterSweep(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	testHookServeConn = func() {
		close(entered)
		<-release
	}
	t.Cleanup(func() { testHookServeConn = nil }) // after the node's shutdown
	tn := startNode(t, nil)
	c := tn.dialTLS(tn.tlsFor(pki.RoleClient, "late"))
	_ = c
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was never served")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tn.Shutdown(ctx) }()
	// Let the connection be recorded only once the sweep is over.
	for !tn.stoppedForTest() {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrClosed) {
			t.Logf("Shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Shutdown did not return within 15 s of a 2 s deadline")
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the late connection was not closed by Shutdown")
	}
}

func (n *Node) stoppedForTest() bool {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	return n.stopped
}

// TestShutdownReturnsByItsDeadline: a connection's goroutine that does not
// end must not hold Shutdown past its context.
func TestShutdownReturnsByItsDeadline(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	testHookServeConn = func() {
		close(entered)
		<-release
	}
	t.Cleanup(func() { testHookServeConn = nil }) // after the node's shutdown
	tn := startNode(t, nil)
	c := tn.dialTLS(tn.tlsFor(pki.RoleClient, "stuck"))
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tn.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown with a goroutine still running = %v, want the deadline's error", err)
		}
	case <-time.After(15 * time.Second):
		close(release)
		t.Fatal("Shutdown did not return within 15 s of a 0.5 s deadline")
	}
	close(release) // the goroutine ends; goleak checks it does
	c.Close()
}
