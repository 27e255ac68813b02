package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	mux.HandleFunc("GET /status.json", a.statusJSON)
	mux.HandleFunc("GET /", a.statusPage)
	if n.cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.stats.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelError)}))
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
