// Package node is the edgereg registry server: it accepts QUIC connections
// from brokers, clients and operators, authorizes and dispatches their
// requests to the route tables (package registry), expires silent brokers,
// and keeps what must survive a restart in its data directory.
//
// A node is safe against hostile peers by construction: connections are
// bounded in total and per source host, streams per connection by QUIC flow
// control, requests in progress by a worker pool, every frame by a size cap
// chosen by the peer's role, and every read by a deadline.
package node

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/node/kv"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire/datadir"
	"github.com/edgereg/edgereg/wire/pki"
)

// Files in the data directory besides tls/ and the KV config.
const (
	nodeIDFile   = "node-id"
	resetKeyFile = "quic-reset.key"
	tokenKeyFile = "quic-token.key"
)

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("node closed")

// Node is one registry server.
type Node struct {
	cfg      Config
	log      *slog.Logger
	id       string
	started  time.Time
	reg      *registry.Registry
	kv       *kv.Store
	watches  *watchHub
	policies *policies
	tlsConf  *tls.Config
	creds    *pki.Reloader // the TLS credentials, re-read when they change (auth.go)
	renewal  *localRenewal // renews the local CA's certificates; nil on issued credentials
	udp      net.PacketConn
	tr       *quic.Transport
	ln       *quic.Listener
	workers  chan struct{}
	servers  *streamServers  // idle goroutines that serve the next stream (conn.go)
	filtered *filteredGroups // the groups of policy-filtered routes (info.go)
	inFlight *byteBudget
	closing  atomic.Bool
	conns    sync.Map // *quic.Conn -> struct{}
	lifeMu   sync.Mutex
	stopped  bool           // set by Shutdown before it waits for wg; guarded by lifeMu
	wg       sync.WaitGroup // every goroutine the node owns
	stop     chan struct{}
	stopOnce sync.Once
	admin    *adminServer
	stats    *stats
	remoting *remotingListener // nil unless Config.RemotingAddr is set

	// brokerInFlight is the byte budget of brokers' and operators' frames
	// (conn.go), apart from readers' (inFlight): a reader flood cannot
	// delay a registration or a heartbeat. answers and brokerAnswers bound,
	// by class too, the bytes of large answers being written
	// (streamWriter.writeAnswer): a peer that does not read cannot make the
	// node hold an answer per stream.
	brokerInFlight, answers, brokerAnswers *byteBudget
	// requestShares and answerShares are each source IP's share of
	// inFlight and answers (a quarter; of inFlight at least a frame): one
	// IP whose readers trickle large frames, or ask for large answers and
	// read none, cannot hold every reader's budget.
	requestShares, answerShares *hostShares
	// watchBudget bounds watched topics over every connection
	// (--max-watches), watchShares each source IP's readers to a quarter.
	watchBudget *byteBudget
	watchShares *hostShares

	// brokerWorkers is the pool of brokers' and operators' requests.
	brokerWorkers chan struct{}
	// policyWorkers holds a slot per policy upload or test in progress,
	// which may take minutes: off the brokers' pool (dispatch.go).
	policyWorkers chan struct{}
	adm           *admission             // connection limits (admission.go)
	untrusted     *prometheus.CounterVec // connections closed for their certificate (auth.go)
	rechecks      atomic.Uint64          // full checks of every connection done (auth.go), for tests
	warn          *warnings              // rate-limited security logs (audit.go)
	unlockData    func() error           // releases the data directory's lock (Shutdown)
	socks         *sockets               // bound by New before the data directory is touched
}

// New prepares a node: it creates or loads the data directory, its TLS
// material and keys, and binds the UDP port. Serve starts it.
func New(cfg Config) (*Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Bind first: a node that cannot bind writes nothing to the data
	// directory (sockets.go).
	socks, err := bindSockets(cfg)
	if err != nil {
		return nil, err
	}
	defer socks.close() // what open did not take, whether New succeeds or not
	if err := datadir.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	// One node per data directory: two would share an id and rewrite one
	// KV file each from its own memory.
	unlock, err := datadir.Lock(cfg.DataDir)
	if err != nil {
		if errors.Is(err, datadir.ErrInUse) {
			return nil, fmt.Errorf("data directory (--data): %w: stop that node, or give this one another --data", err)
		}
		return nil, fmt.Errorf("data directory (--data): %w", err)
	}
	started := false
	defer func() {
		if !started {
			unlock()
		}
	}()
	// A node killed in the middle of a write left its temporary file.
	if err := datadir.CleanTemps(cfg.DataDir); err != nil {
		cfg.Logger.Warn("data directory: could not remove the temporary files of interrupted writes", "err", err)
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger,
		started:  cfg.Clock.Now(),
		workers:  make(chan struct{}, cfg.Workers),
		inFlight: newByteBudget(int64(cfg.MaxBytesInFlight)),
		stop:     make(chan struct{}),
		servers:  newStreamServers(),
		filtered: newFilteredGroups(),
		socks:    socks,
	}
	n.brokerInFlight = newByteBudget(int64(cfg.MaxBytesInFlight))
	n.answers = newByteBudget(int64(cfg.MaxBytesInFlight))
	n.brokerAnswers = newByteBudget(int64(cfg.MaxBytesInFlight))
	n.requestShares = newHostShares(max(int64(cfg.MaxBytesInFlight)/budgetShareOfHost, int64(cfg.MaxRequestLen)))
	n.answerShares = newHostShares(max(int64(cfg.MaxBytesInFlight)/budgetShareOfHost, 1))
	n.watchBudget = newByteBudget(int64(cfg.MaxWatches))
	n.watchShares = newHostShares(max(int64(cfg.MaxWatches)/budgetShareOfHost, 1))
	n.brokerWorkers = make(chan struct{}, cfg.BrokerWorkers)
	n.policyWorkers = make(chan struct{}, maxPolicyUploadsAtOnce)
	n.warn = newWarnings(cfg.Logger)
	n.adm = newAdmission(cfg)
	n.watches = newWatchHub()
	n.unlockData = unlock
	if n.id, err = loadNodeID(cfg.DataDir); err != nil {
		return nil, err
	}
	if n.policies, err = newPolicies(cfg, n.watches); err != nil {
		return nil, err
	}
	n.reg = registry.New(registry.Config{
		Clock:            cfg.Clock,
		DefaultThreshold: cfg.ExpiryThreshold,
		MinThreshold:     cfg.MinLeaseTimeout,
		MaxThreshold:     cfg.MaxLeaseTimeout,
		Thresholds:       n.policies.set,
		Confirmer:        n.policies.set,
		OnChange:         n.watches.changed,
	})
	n.stats = newStats(n)
	n.untrusted = newUntrustedCounter() // auth.go
	n.stats.reg.MustRegister(n.untrusted)
	n.stats.reg.MustRegister(n.revocationGauges()...) // auth.go
	n.adm.onRefuse, n.adm.onReplace, n.adm.onFailure = n.connRefused, n.connReplaced, n.handshakeFailed
	n.adm.onValidate = n.stats.validations.Inc
	n.adm.leaseLive = func(cluster, addr string) bool { _, ok := n.reg.Lease(cluster, addr); return ok }
	if err := n.open(); err != nil {
		n.policies.close()
		return nil, err
	}
	started = true
	return n, nil
}

// open loads what the node keeps on disk and binds its sockets.
func (n *Node) open() error {
	cfg := n.cfg
	var err error
	if n.kv, err = kv.Open(cfg.DataDir); err != nil {
		return err
	}
	if n.tlsConf, err = n.serverTLS(); err != nil {
		return err
	}
	if err := n.listen(); err != nil {
		return err
	}
	if err := n.openRemoting(); err != nil {
		n.ln.Close()
		n.tr.Close()
		return err
	}
	if n.admin, err = newAdminServer(n); err != nil {
		n.closeRemoting()
		n.ln.Close()
		n.tr.Close()
		return err
	}
	return nil
}

// Registry returns the node's route tables, for embedding and tests.
func (n *Node) Registry() *registry.Registry { return n.reg }

// Addr returns the UDP address the node listens on.
func (n *Node) Addr() net.Addr { return n.udp.LocalAddr() }

// AdminAddr returns the admin HTTP address, or nil when it is off.
func (n *Node) AdminAddr() net.Addr { return n.admin.addr() }

// ID returns the node's persistent identity.
func (n *Node) ID() string { return n.id }

// WarmingUp reports whether the node is inside its warm-up window, when a
// route miss may only mean brokers have not re-registered yet.
func (n *Node) WarmingUp() bool {
	return n.cfg.WarmUp > 0 && n.cfg.Clock.Now().Sub(n.started) < n.cfg.WarmUp
}

// serverTLS returns the node's TLS config. Certificate, key, client CA and
// revocation files are re-read when they change (pki.Reloader); a change
// that cannot be used is logged and the last good credentials stay.
func (n *Node) serverTLS() (*tls.Config, error) {
	var lastReloadErr string // the last failure reported
	creds := pki.ServerCredentials{
		CertFile: n.cfg.CertFile, KeyFile: n.cfg.KeyFile, ClientCAFile: n.cfg.ClientCAFile,
		RevocationFile: n.cfg.RevocationFile, AllowAnonymous: n.cfg.AllowAnonymousClients,
		KeyExchange: n.keyExchange(),
		OnReload: func(err error) {
			if n.renewal != nil { // the local CA's files: it looks at them again
				n.renewal.filesChanged()
			}
			// Called with the Reloader's lock held, one call at a time.
			// A file that stays broken is looked at every second: say so
			// once per breakage, not once a second.
			if err != nil {
				if msg := err.Error(); msg != lastReloadErr {
					lastReloadErr = msg
					n.log.Error("TLS credentials changed but cannot be used; keeping the previous ones", "err", err)
				}
				return
			}
			lastReloadErr = ""
			n.log.Info("TLS credentials reloaded")
		},
	}
	if n.cfg.CertFile == "" {
		// The local CA's files, as for issued credentials: the Reloader
		// then serves what renewal (localca.go) writes over them.
		if err := n.localCredentials(&creds); err != nil {
			return nil, fmt.Errorf("local CA: %w", err)
		}
	}
	r, err := pki.NewReloader(creds)
	if err != nil {
		return nil, err
	}
	n.creds = r
	return r.TLSConfig(), nil
}

// keyExchange is the validated Config.TLSKeyExchange.
func (n *Node) keyExchange() pki.KeyExchange {
	k, _ := pki.ParseKeyExchange(n.cfg.TLSKeyExchange)
	return k
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return strings.Trim(h, "[]")
}

func (n *Node) listen() error {
	resetKey, err := pki.LoadOrCreateKey(filepath.Join(n.cfg.DataDir, resetKeyFile))
	if err != nil {
		return fmt.Errorf("stateless reset key: %w", err)
	}
	tokenKey, err := pki.LoadOrCreateKey(filepath.Join(n.cfg.DataDir, tokenKeyFile))
	if err != nil {
		return fmt.Errorf("token key: %w", err)
	}
	udp, err := n.socket()
	if err != nil {
		return err
	}
	n.udp = udp
	sk := quic.StatelessResetKey(resetKey)
	tk := quic.TokenGeneratorKey(tokenKey)
	n.tr = &quic.Transport{
		Conn:              udp,
		StatelessResetKey: &sk,
		TokenGeneratorKey: &tk,
		ConnContext:       n.connContext,
		// Source-address validation under a handshake flood (admission.go).
		VerifySourceAddress: n.adm.verifySource,
	}
	n.ln, err = n.tr.Listen(n.gatedTLS(), &quic.Config{
		MaxIncomingStreams:    int64(n.cfg.MaxStreamsPerConn),
		MaxIncomingUniStreams: -1, // the protocol uses none
		// Receive windows bound what peers can make the node hold unread
		// (admission.go, allowWindowIncrease).
		InitialStreamReceiveWindow:     streamWindow,
		InitialConnectionReceiveWindow: connWindow,
		MaxStreamReceiveWindow:         maxStreamWindow,
		MaxConnectionReceiveWindow:     maxConnWindow,
		AllowConnectionWindowIncrease:  n.adm.allowWindowIncrease,
		KeepAlivePeriod:                15 * time.Second,
		MaxIdleTimeout:                 60 * time.Second,
		// A handshake may wait HandshakeQueueTimeout for a slot (and quic-go
		// gives a handshake twice this in all), so a queued one is not
		// timed out by the time its turn comes.
		HandshakeIdleTimeout: max(5*time.Second, n.cfg.HandshakeQueueTimeout),
	})
	if err != nil {
		udp.Close()
		return fmt.Errorf("listen on %s: %w", n.cfg.Addr, err)
	}
	return nil
}

// gatedTLS is the node's TLS config with every handshake first waiting
// for a handshake slot (admission.enterHandshake), before the key
// exchange and certificate work begin.
func (n *Node) gatedTLS() *tls.Config {
	conf := n.tlsConf.Clone()
	current := conf.GetConfigForClient
	conf.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if err := n.adm.enterHandshake(hello.Context()); err != nil {
			return nil, err
		}
		if testHookHandshake != nil {
			testHookHandshake()
		}
		if current == nil {
			return nil, nil
		}
		return current(hello)
	}
	return conf
}

// testHookHandshake, when set, runs in each handshake once it holds its
// slot; tests use it to hold handshakes in progress.
var testHookHandshake func()

// socket is the node's QUIC socket: Config.PacketConn, or the one New bound.
func (n *Node) socket() (net.PacketConn, error) {
	if n.cfg.PacketConn != nil {
		return n.cfg.PacketConn, nil
	}
	udp := n.socks.udp
	n.socks.udp = nil
	return udp, nil
}

// Serve accepts connections until Shutdown, running the expiry scan and the
// admin server alongside. It returns ErrClosed after Shutdown.
func (n *Node) Serve() error {
	warmUp := n.cfg.WarmUp.String()
	if n.cfg.WarmUp < 0 {
		warmUp = "disabled" // as --print-config says; a negative window is no window
	}
	n.log.Info("node started", "id", n.id, "addr", n.Addr().String(), "data", n.cfg.DataDir,
		"warm_up", warmUp, "expiry_threshold", n.cfg.ExpiryThreshold.String())
	if !n.spawn(n.expiryLoop) || !n.spawn(n.warmUpLoop) || !n.spawn(n.trustLoop) {
		return ErrClosed
	}
	if n.admin != nil {
		n.spawn(n.admin.serve)
	}
	if n.cfg.PolicyDir != "" {
		n.spawn(n.watchPolicyDir)
	}
	if n.remoting != nil {
		n.spawn(n.serveRemoting)
	}
	for range acceptors - 1 {
		n.spawn(func() { n.acceptLoop() })
	}
	return n.acceptLoop()
}

// acceptors is how many goroutines wait in Accept at once. quic-go hands a
// connection whose handshake has completed to a waiting Accept, or queues
// it in a 32-deep queue, or, with the queue full, closes it with
// CONNECTION_REFUSED: the whole handshake paid for, and the client redials
// and pays again. With one accept loop the queue fills whenever that
// goroutine waits for a CPU while handshakes complete in bursts (10,000
// brokers reconnecting at once: 10,916 redials). Each parked acceptor is a
// receiver quic-go's send reaches without the queue, so the node absorbs
// a burst of acceptors+32 handshakes completing while no acceptor runs; a
// parked goroutine costs a few KiB.
const acceptors = 256

// acceptLoop takes connections off the listener and hands each to a
// goroutine of its own at once: it never waits on per-connection work.
func (n *Node) acceptLoop() error {
	for {
		qc, err := n.ln.Accept(context.Background())
		if err != nil {
			if n.closing.Load() {
				return ErrClosed
			}
			return fmt.Errorf("accept: %w", err)
		}
		if testHookAccepted != nil {
			testHookAccepted()
		}
		if !n.spawn(func() { n.serveConn(qc) }) {
			qc.CloseWithError(codeShutdown, "node shutting down")
		}
	}
}

// testHookAccepted, when set, runs in the accept loop after each accepted
// connection, before it is handed off; tests use it to stall a hand-off.
var testHookAccepted func()

// spawn runs f in a goroutine that Shutdown waits for, unless Shutdown has
// begun waiting already.
func (n *Node) spawn(f func()) bool {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.stopped {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// Shutdown stops the node gracefully: it stops accepting connections,
// lets requests in progress finish until ctx ends, closes every connection
// telling peers to go elsewhere, and releases the port. KV config is
// persisted on every change, so nothing else needs saving. Shutdown
// returns by the time ctx ends: goroutines still running then are cut
// off by closing the transport under them, and reported in the error.
func (n *Node) Shutdown(ctx context.Context) error {
	if !n.closing.CompareAndSwap(false, true) {
		return ErrClosed
	}
	n.log.Info("node shutting down")
	n.stopOnce.Do(func() { close(n.stop) })
	n.adm.gate.close() // handshakes waiting for a slot fail now: ln.Close waits for them
	n.ln.Close()
	n.shutdownRemoting(ctx)
	err := n.drainWorkers(ctx)
	n.closeConns()
	if n.admin != nil {
		n.admin.shutdown(ctx)
	}
	n.lifeMu.Lock()
	n.stopped = true
	n.lifeMu.Unlock()
	if werr := n.waitGoroutines(ctx); werr != nil {
		err = errors.Join(err, werr)
	}
	n.policies.close()
	n.tr.Close()
	n.udp.Close()
	n.unlockData()
	n.log.Info("node stopped")
	return err
}

// closeConns closes every connection the node has recorded. A connection
// recorded after the sweep closes itself: it sees closing, set before.
func (n *Node) closeConns() {
	n.conns.Range(func(k, _ any) bool {
		k.(*quic.Conn).CloseWithError(codeShutdown, "node shutting down")
		return true
	})
}

// waitGoroutines waits for every goroutine of the node until ctx ends;
// then it closes the connections again and the transport, which ends
// every stream read and write, and gives up waiting.
func (n *Node) waitGoroutines(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	n.closeConns()
	n.tr.Close()
	select {
	case <-done:
		return nil
	default:
		n.log.Warn("shutdown deadline reached with connections still being served")
		return fmt.Errorf("shutdown: connections still being served at the deadline: %w", ctx.Err())
	}
}

// drainWorkers waits for requests in progress by taking every worker slot;
// requests that arrive meanwhile are told the node is shutting down.
func (n *Node) drainWorkers(ctx context.Context) error {
	for _, pool := range []chan struct{}{n.workers, n.brokerWorkers, n.policyWorkers} {
		for range cap(pool) {
			select {
			case pool <- struct{}{}:
			case <-ctx.Done():
				return fmt.Errorf("shutdown: requests still in progress: %w", ctx.Err())
			}
		}
	}
	return nil
}

func (n *Node) expiryLoop() { n.every(n.cfg.ScanInterval, func() { n.ExpireNow() }) }

// every runs fn every d until the node stops.
func (n *Node) every(d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// ExpireNow runs one expiry scan, as the node does every ScanInterval.
func (n *Node) ExpireNow() []registry.LeaseInfo {
	expired := n.reg.ExpireDue()
	for _, l := range expired {
		n.log.Info("broker expired", "cluster", l.Cluster, "broker", l.BrokerName, "id", l.BrokerID,
			"addr", l.Addr, "epoch", l.Epoch, "reason", "no heartbeat within threshold",
			"last_heartbeat", l.LastHeartbeat, "threshold", l.Threshold.String())
	}
	n.stats.expiries.WithLabelValues("no_heartbeat").Add(float64(len(expired)))
	return expired
}

func (n *Node) warmUpLoop() {
	if !n.WarmingUp() {
		return
	}
	n.log.Info("node warming up: route misses answer warming-up", "for", n.cfg.WarmUp.String())
	t := time.NewTimer(n.cfg.WarmUp - n.cfg.Clock.Now().Sub(n.started))
	defer t.Stop()
	select {
	case <-n.stop:
	case <-t.C:
		n.log.Info("node ready: warm-up over")
		n.watches.markAll()
	}
}

func loadNodeID(dir string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
		// Damaged (a full disk, another tool): a new id would make this
		// node another one to brokers, clients and dashboards without a word.
		return "", fmt.Errorf("node id: %s is empty, so the data directory is damaged: restore the file from a backup, or delete it to start this node with a new identity", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("node id: %w", err)
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw[:])
	if err := datadir.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	return id, nil
}

func maxProcs() int { return runtime.GOMAXPROCS(0) }
