package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// serveGateway runs a remoting server for h on loopback and returns it,
// for its Stats, and its address; it is shut down when the test ends.
func serveGateway(t testing.TB, h remoting.Handler) (*remoting.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &remoting.Server{Handler: h, Logger: nodetest.Logger()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return srv, ln.Addr().String()
}

// dialFrom dials addr from another loopback address (Linux routes all of
// 127/8 to lo), as a client on another host of the site would.
func dialFrom(t *testing.T, ip net.IP, addr string) *rmqConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no loopback address %s: %v", ip, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rmqConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func waitHealthz(t *testing.T, s *site, status int) {
	t.Helper()
	nodetest.WaitFor(t, fmt.Sprintf("the gateway's /healthz to answer %d", status), func() bool {
		resp, err := http.Get(s.admin.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == status
	})
}

// TestOneHostCannotStallCachedReads: while the WAN is cut, a lookup of a
// topic the gateway has not cached waits for the nodes (up to
// UpstreamTimeout). One host of the site pipelining such lookups on a few
// connections must not hold every worker of the gateway's listener: another
// host's read of a cached route is still answered from the cache at once,
// which is the point of the gateway while the WAN is cut.
func TestOneHostCannotStallCachedReads(t *testing.T) {
	s := startSite(t, 1, func(c *gateway.Config) { c.UpstreamTimeout = 30 * time.Second })
	srv, addr := serveGateway(t, s.gw)
	s.registerQUIC(orders(4))
	legit := dialFrom(t, net.IPv4(127, 0, 0, 3), addr)
	decodeRoute(t, legit.call(goRouteRequest("orders")))
	for _, tn := range s.nodes {
		tn.Stop()
	}
	waitHealthz(t, s, http.StatusServiceUnavailable)

	before := srv.Stats().Requests
	const conns, perConn = 4, remoting.DefaultMaxInFlightPerConn // as many as the listener has workers
	for i := range conns {
		c := dialFrom(t, net.IPv4(127, 0, 0, 2), addr)
		for j := range perConn {
			c.send(goRouteRequest(fmt.Sprintf("never_cached_%d_%d", i, j)))
		}
	}
	share := uint64(remoting.DefaultWorkers / 2)
	nodetest.WaitFor(t, "the flooding host to hold its share of the workers", func() bool {
		return srv.Stats().Requests-before >= share
	})
	time.Sleep(100 * time.Millisecond) // give a host without a share the chance to take every worker
	if n := srv.Stats().Requests - before; n > share {
		t.Errorf("one host holds %d of the %d workers", n, remoting.DefaultWorkers)
	}
	legit.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	req := goRouteRequest("orders")
	legit.send(req)
	resp, err := remoting.ReadCommand(legit.br, 0)
	if err != nil {
		t.Fatalf("cached route from another host while one host waits in %d handlers: %v", srv.Stats().Requests-before, err)
	}
	if resp.Opaque != req.Opaque {
		t.Fatalf("answer to opaque %d, want %d", resp.Opaque, req.Opaque)
	}
	decodeRoute(t, resp)
	// The nodes come back, so the flooding host's lookups end now rather
	// than at their timeout.
	for _, tn := range s.nodes {
		tn.Start()
	}
}
