package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTP server timeouts. The write timeout leaves room for a 30 s CPU
// profile (/debug/pprof/profile's default).
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 60 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	// httpMaxHeaderBytes bounds a request's headers (Go's default is 1 MB,
	// held per connection for the header timeout): probes and scrapers
	// send a few hundred bytes, and anyone who reaches the address can
	// open connections. Go's server reads 4096 bytes of slack past
	// MaxHeaderBytes before it answers 431, so the field is that much less
	// than the 16 KiB the README promises.
	httpMaxHeaderBytes = 16<<10 - 4096
)

// adminServer serves the node's plain HTTP endpoints: health, readiness and
// metrics on the admin address (by default loopback-only; probes and
// Prometheus need it reachable), and the status page with /status.json,
// which show the whole topology, on the status address (loopback by
// default; see Config.StatusAddr).
type adminServer struct {
	n          *Node
	adminLn    net.Listener // nil when the admin address is off
	statusLn   net.Listener // nil when the page is off; adminLn when shared
	servers    []*http.Server
	listeners  []net.Listener
	statusHere string // where the page is served, or AdminOff
}

// newAdminServer binds the admin and status listeners the config asks for;
// it returns nil, nil when both are off.
func newAdminServer(n *Node) (*adminServer, error) {
	a := &adminServer{n: n, statusHere: statusAddr(n.cfg)}
	var adminMux *http.ServeMux
	if n.cfg.AdminAddr != AdminOff {
		adminMux = a.adminMux()
		ln, err := a.bind("admin", n.cfg.AdminAddr, adminMux)
		if err != nil {
			return nil, err
		}
		a.adminLn = ln
	}
	switch {
	case a.statusHere == AdminOff:
	case adminMux != nil && sharesAdmin(n.cfg):
		a.statusRoutes(adminMux)
		a.statusLn = a.adminLn
	default:
		mux := http.NewServeMux()
		a.statusRoutes(mux)
		ln, err := a.bind("status", a.statusHere, mux)
		if err != nil {
			a.closeListeners()
			return nil, err
		}
		a.statusLn = ln
	}
	if len(a.servers) == 0 {
		return nil, nil
	}
	a.logPlacement()
	return a, nil
}

func (a *adminServer) adminMux() *http.ServeMux {
	n := a.n
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	if n.cfg.Pprof {
		// On loopback the profiler gets the status page's guard against
		// DNS rebinding: a web page must not start profiles or read dumps.
		guard := func(h http.HandlerFunc) http.HandlerFunc { return h }
		if isLoopback(n.cfg.AdminAddr) {
			guard = loopbackHostOnly
		}
		mux.HandleFunc("GET /debug/pprof/", guard(pprof.Index))
		mux.HandleFunc("GET /debug/pprof/profile", guard(pprof.Profile))
		mux.HandleFunc("GET /debug/pprof/symbol", guard(pprof.Symbol))
		mux.HandleFunc("GET /debug/pprof/trace", guard(pprof.Trace))
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.stats.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelError)}))
	return mux
}

func (a *adminServer) statusRoutes(mux *http.ServeMux) {
	guard := func(h http.HandlerFunc) http.HandlerFunc { return h }
	if isLoopback(a.statusHere) {
		guard = loopbackHostOnly
	}
	mux.HandleFunc("GET /status.json", guard(a.statusJSON))
	mux.HandleFunc("GET /", guard(a.statusPage))
}

// loopbackHostOnly answers only requests addressed to an IP literal or
// localhost. A page on loopback is reachable from a browser on the same
// host through DNS rebinding (a hostile site's name resolving to
// 127.0.0.1); its requests carry that site's name as Host, so they are
// refused and the topology stays on this host.
func loopbackHostOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if host != "localhost" && net.ParseIP(host) == nil {
			http.Error(w, "forbidden: on loopback, address this server by IP or localhost", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}

// GuardLoopback returns h refusing, when addr (a listen address) is
// loopback, requests not addressed to an IP or localhost, as the status
// page does (see loopbackHostOnly); elsewhere it returns h. The gateway's
// admin address uses it: its /healthz and /metrics name every broker.
func GuardLoopback(addr string, h http.Handler) http.Handler {
	if !isLoopback(addr) {
		return h
	}
	return loopbackHostOnly(h.ServeHTTP)
}

func (a *adminServer) bind(what, addr string, h http.Handler) (net.Listener, error) {
	ln, err := a.n.socks.listenTCP(addr)
	if err != nil {
		return nil, bindError(what+"-addr", addr, err)
	}
	a.listeners = append(a.listeners, ln)
	srv := NewHTTPServer(h, a.n.log)
	srv.Addr = ln.Addr().String()
	a.servers = append(a.servers, srv)
	return ln, nil
}

// NewHTTPServer returns an HTTP server for h with the node's admin
// timeouts (header, read, write and idle), so a slow or idle client cannot
// hold a connection for ever, and a 16 KB bound on request headers; its
// errors go to log at debug level. The gateway's admin address uses it too.
func NewHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout,
		MaxHeaderBytes: httpMaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

func (a *adminServer) closeListeners() {
	for _, ln := range a.listeners {
		ln.Close()
	}
}

// logPlacement says where the page is, and warns when an operator put it,
// or the profiler, where more than this host can read it.
func (a *adminServer) logPlacement() {
	if a.n.cfg.Pprof && !isLoopback(a.n.cfg.AdminAddr) {
		a.n.log.Warn("profiler served on a non-loopback admin address: anyone who reaches it can take CPU profiles and traces, and force a GC per heap dump",
			"admin_addr", a.n.cfg.AdminAddr)
	}
	switch {
	case a.statusLn == nil && a.n.cfg.StatusAddr == "":
		a.n.log.Info("status page off: the admin address is not loopback; set --status-addr (e.g. 127.0.0.1:9878) to serve it",
			"admin_addr", a.n.cfg.AdminAddr)
	case a.statusLn != nil && !isLoopback(a.statusHere):
		a.n.log.Warn("status page served on a non-loopback address: it shows the whole topology to anyone who reaches it",
			"status_addr", a.statusLn.Addr().String())
	}
}

// EffectiveStatusAddr returns where a node of this configuration serves
// the status page: the status address, else the admin address when that
// is loopback, else AdminOff.
func (c Config) EffectiveStatusAddr() string { return statusAddr(c) }

// EffectiveRemotingAddr returns the TCP address the remoting listener
// binds (an empty host is loopback), or AdminOff when there is none.
func (c Config) EffectiveRemotingAddr() string {
	if c.RemotingAddr == "" {
		return AdminOff
	}
	return remotingListenAddr(c.RemotingAddr)
}

// statusAddr decides where the status page is served: the configured
// status address, else the admin address when that is loopback, else off.
func statusAddr(c Config) string {
	switch {
	case c.StatusAddr != "":
		return c.StatusAddr
	case c.AdminAddr != AdminOff && isLoopback(c.AdminAddr):
		return c.AdminAddr
	}
	return AdminOff
}

// sharesAdmin reports whether the page is served on the admin listener:
// by default, or when the status address names the admin address exactly
// (port 0 means a listener of its own).
func sharesAdmin(c Config) bool {
	if c.StatusAddr == "" {
		return true
	}
	_, port, _ := net.SplitHostPort(c.StatusAddr)
	return c.StatusAddr == c.AdminAddr && port != "0"
}

// isLoopback reports whether a listen address binds only loopback
// interfaces; an empty host binds them all.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a *adminServer) addr() net.Addr {
	if a == nil || a.adminLn == nil {
		return nil
	}
	return a.adminLn.Addr()
}

func (a *adminServer) statusAddr() net.Addr {
	if a == nil || a.statusLn == nil {
		return nil
	}
	return a.statusLn.Addr()
}

// serve runs every server until shutdown.
func (a *adminServer) serve() {
	var wg sync.WaitGroup
	for i, srv := range a.servers {
		wg.Go(func() {
			if err := srv.Serve(a.listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.n.log.Error("admin server stopped", "addr", srv.Addr, "err", err)
			}
		})
	}
	wg.Wait()
}

func (a *adminServer) shutdown(ctx context.Context) {
	for _, srv := range a.servers {
		srv.Shutdown(ctx)
	}
}

// StatusAddr returns the address the status page is served on, or nil when
// it is off.
func (n *Node) StatusAddr() net.Addr { return n.admin.statusAddr() }

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
