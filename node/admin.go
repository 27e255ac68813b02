package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// adminServer serves the node's health and metrics over plain HTTP on a
// separate, by default loopback-only, address.
type adminServer struct {
	n   *Node
	ln  net.Listener
	srv *http.Server
}

func newAdminServer(n *Node, addr string) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listen on %s: %w", addr, err)
	}
	a := &adminServer{n: n, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /metrics", a.metrics)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return a, nil
}

func (a *adminServer) addr() net.Addr { return a.ln.Addr() }

func (a *adminServer) serve() {
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.n.log.Error("admin server stopped", "err", err)
	}
}

func (a *adminServer) shutdown(ctx context.Context) { a.srv.Shutdown(ctx) }

// healthz answers 200 while the node runs.
func (a *adminServer) healthz(w http.ResponseWriter, _ *http.Request) {
	if a.n.closing.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// readyz answers 200 once the node is past its warm-up window, so load
// balancers send route reads only to nodes that know the brokers.
func (a *adminServer) readyz(w http.ResponseWriter, _ *http.Request) {
	switch {
	case a.n.closing.Load():
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	case a.n.WarmingUp():
		http.Error(w, "warming up", http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ready")
	}
}

// metrics writes the node's counters in the Prometheus text format.
func (a *adminServer) metrics(w http.ResponseWriter, _ *http.Request) {
	s := &a.n.stats
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	counter("edgereg_registrations_total", "Full broker registrations accepted.", s.registrations.Load())
	counter("edgereg_heartbeats_total", "Heartbeats accepted.", s.heartbeats.Load())
	counter("edgereg_expiries_total", "Brokers expired for missing heartbeats.", s.expiries.Load())
	counter("edgereg_requests_total", "Requests handled.", s.requests.Load())
	counter("edgereg_request_errors_total", "Requests answered with an error.", s.errors.Load())
	counter("edgereg_bad_frames_total", "Malformed, oversized or unknown frames.", s.badFrames.Load())
	counter("edgereg_denied_total", "Requests refused as not authorized.", s.denied.Load())
	counter("edgereg_stream_timeouts_total", "Streams cut off by a read deadline.", s.timeouts.Load())
	fmt.Fprintf(w, "# HELP edgereg_route_reads_total Route reads by result.\n# TYPE edgereg_route_reads_total counter\n")
	for st := range s.routeReads {
		fmt.Fprintf(w, "edgereg_route_reads_total{result=%q} %d\n", wire.RouteStatus(st).String(), s.routeReads[st].Load())
	}
	gauge("edgereg_connections", "Open QUIC connections.", s.conns.Load())
	gauge("edgereg_streams", "Open streams.", s.streams.Load())
	gauge("edgereg_leases", "Live broker leases.", int64(len(a.n.reg.Leases())))
	a.n.watches.mu.Lock()
	watchers := a.n.watches.count
	a.n.watches.mu.Unlock()
	gauge("edgereg_watch_streams", "Streams watching routes.", int64(watchers))
	ready := int64(1)
	if a.n.WarmingUp() {
		ready = 0
	}
	gauge("edgereg_ready", "1 once the warm-up window has passed.", ready)
}
