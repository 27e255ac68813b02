package simtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/testutils/simnet"
	"go.uber.org/goleak"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/routeclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The simulated deployment's addresses: nodes on 10.0.0.x, brokers on
// 10.1.x.y, route clients on 10.2.0.x; one UDP socket each.
const (
	nodePort     = 9876  // every node's QUIC port
	endpointPort = 40000 // every broker's and client's QUIC socket
	brokerPort   = 10911 // the port in a broker's advertised address
	clusterName  = "sim"
	sharedTopic  = "shared" // held by every broker
)

func nodeIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}) }
func brokerIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 1, byte(i / 200), byte(i%200 + 1)})
}
func clientIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}) }

func brokerName(i int) string  { return fmt.Sprintf("broker-%02d", i) }
func brokerTopic(i int) string { return fmt.Sprintf("topic-%02d", i) }

// ---------------------------------------------------------------------------
// The network.

// simNet is a simnet.Router: every endpoint hangs off it through its own
// SimulatedLink (which adds the one-way downlink latency), and every packet
// is dropped with probability loss, or always while its source or
// destination host is down or the pair is cut (a partition).
type simNet struct {
	oneWay time.Duration

	mu        sync.Mutex
	rng       *rand.Rand
	loss      float64
	down      map[netip.Addr]bool
	cut       map[[2]netip.Addr]bool
	receivers map[netip.AddrPort]simnet.PacketReceiver
	links     []*simnet.SimulatedLink
	conns     []*simnet.SimConn
	stats     netStats
	// drop, when set, decides the fate of every packet the cuts and the
	// uniform loss let through (asymmetric or bursty loss); with mu held.
	drop lossModel
	// jitter is the most a packet's latency exceeds oneWay by (0: none),
	// dup the share of packets delivered twice; set before any endpoint.
	jitter time.Duration
	dup    float64
	// dials records the destination connection ID of every client Initial
	// packet by pair of hosts (from, to): one ID per dial, however often
	// its Initial is retransmitted, whether or not the packet arrives.
	dials map[[2]netip.Addr]map[string]bool
}

type netStats struct {
	Sent, Lost, Cut, Undeliverable uint64
}

func newSimNet(rtt time.Duration, loss float64, seed uint64) *simNet {
	return &simNet{
		oneWay:    rtt / 2,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		loss:      loss,
		down:      make(map[netip.Addr]bool),
		cut:       make(map[[2]netip.Addr]bool),
		receivers: make(map[netip.AddrPort]simnet.PacketReceiver),
		dials:     make(map[[2]netip.Addr]map[string]bool),
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ua, ok := a.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

func pairOf(a, b netip.Addr) [2]netip.Addr {
	if b.Less(a) {
		a, b = b, a
	}
	return [2]netip.Addr{a, b}
}

// SendPacket implements simnet.Router.
func (n *simNet) SendPacket(p simnet.Packet) error {
	from, to := addrPortOf(p.From), addrPortOf(p.To)
	n.mu.Lock()
	n.stats.Sent++
	n.countDialLocked(from.Addr(), to.Addr(), p.Data)
	var rcv simnet.PacketReceiver
	switch {
	case n.down[from.Addr()] || n.down[to.Addr()] || n.cut[pairOf(from.Addr(), to.Addr())]:
		n.stats.Cut++
	case n.loss > 0 && n.rng.Float64() < n.loss:
		n.stats.Lost++
	case n.drop != nil && n.drop(n.rng, from, to, len(p.Data)):
		n.stats.Lost++
	default:
		if rcv = n.receivers[to]; rcv == nil {
			n.stats.Undeliverable++
		}
	}
	twice := rcv != nil && n.dup > 0 && n.rng.Float64() < n.dup
	n.mu.Unlock()
	if rcv != nil {
		rcv.RecvPacket(p) // the link queues it for delivery after its latency
	}
	if twice { // a copy of its own: the receiver decrypts in place
		rcv.RecvPacket(simnet.Packet{From: p.From, To: p.To, Data: bytes.Clone(p.Data)})
	}
	return nil
}

// latency is a link's one-way latency for a packet: oneWay, plus up to
// jitter at random, which reorders packets sent less than jitter apart.
func (n *simNet) latency(simnet.Packet) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.oneWay + time.Duration(n.rng.Int64N(int64(n.jitter)+1))
}

// countDialLocked records the connection ID of a QUIC v1 Initial packet
// (long header, type 0): byte 0, version (4), DCID length (1), DCID.
func (n *simNet) countDialLocked(from, to netip.Addr, b []byte) {
	if len(b) < 6 || b[0]&0x80 == 0 || (b[0]>>4)&0x3 != 0 || int(b[5]) > len(b)-6 {
		return
	}
	pair := [2]netip.Addr{from, to}
	if n.dials[pair] == nil {
		n.dials[pair] = make(map[string]bool)
	}
	n.dials[pair][string(b[6:6+int(b[5])])] = true
}

// dialsTo counts the dials seen from hosts for which from returns true to
// host to.
func (n *simNet) dialsTo(to netip.Addr, from func(netip.Addr) bool) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	total := 0
	for pair, ids := range n.dials {
		if pair[1] == to && from(pair[0]) {
			total += len(ids)
		}
	}
	return total
}

// lossModel decides whether to drop a packet, with the network's random
// source, under the network's lock (a model may keep state without one).
type lossModel func(rng *rand.Rand, from, to netip.AddrPort, size int) bool

// setDrop installs (nil: removes) a loss model, see simNet.drop.
func (n *simNet) setDrop(drop lossModel) {
	n.mu.Lock()
	n.drop = drop
	n.mu.Unlock()
}

// AddNode implements simnet.Router. A second endpoint on the same address
// (a restarted node) replaces the first.
func (n *simNet) AddNode(addr net.Addr, r simnet.PacketReceiver) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.receivers[addrPortOf(addr)] = r
}

// endpoint returns a new socket at ap.
func (n *simNet) endpoint(ap netip.AddrPort) *simnet.SimConn {
	link := &simnet.SimulatedLink{Latency: n.oneWay, UploadPacket: n}
	if n.jitter > 0 {
		link.LatencyFunc = n.latency
	}
	udp := net.UDPAddrFromAddrPort(ap)
	c := simnet.NewBlockingSimConn(udp, link)
	n.AddNode(udp, link)
	link.Start()
	n.mu.Lock()
	n.links = append(n.links, link)
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	return c
}

// setDown drops every packet from or to host while down (a crashed or
// unplugged machine: nothing it sends escapes, nothing reaches it).
func (n *simNet) setDown(host netip.Addr, down bool) {
	n.mu.Lock()
	n.down[host] = down
	n.mu.Unlock()
}

// setCut drops every packet between a and each of bs, both ways.
func (n *simNet) setCut(a netip.Addr, bs []netip.Addr, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range bs {
		if cut {
			n.cut[pairOf(a, b)] = true
		} else {
			delete(n.cut, pairOf(a, b))
		}
	}
}

func (n *simNet) snapshot() netStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// close closes every socket, then every link (a link's delivery goroutine
// may be waiting for its socket's reader until the socket closes).
func (n *simNet) close() {
	n.mu.Lock()
	conns, links := n.conns, n.links
	n.conns, n.links = nil, nil
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for _, l := range links {
		l.Close()
	}
}

// ---------------------------------------------------------------------------
// Events: what the nodes, brokers and clients log, counted.

// expiry is one lease a node's expiry scan removed, from its "broker
// expired" log record (the node has no other hook for expiries).
type expiry struct {
	Node          int
	Addr          string
	At            time.Time
	LastHeartbeat time.Time
}

func (e expiry) silence() time.Duration { return e.At.Sub(e.LastHeartbeat) }

// registration is a node's first registration of a broker it held no
// lease for, from its "broker registered" log record.
type registration struct {
	Node int
	Addr string
	At   time.Time
}

// events counts log records by source and message (and "op", where a
// record has one), and keeps every expiry and first registration.
type events struct {
	mu            sync.Mutex
	counts        map[string]int
	expiries      []expiry
	registrations []registration
}

func newEvents() *events { return &events{counts: make(map[string]int)} }

func (ev *events) count(key string) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.counts[key]
}

func (ev *events) expired() []expiry {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return slices.Clone(ev.expiries)
}

// registeredOn returns the registrations node logged at or after since.
func (ev *events) registeredOn(node int, since time.Time) []registration {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []registration
	for _, r := range ev.registrations {
		if r.Node == node && !r.At.Before(since) {
			out = append(out, r)
		}
	}
	return out
}

// summary lists the counts, sorted, for the test log.
func (ev *events) summary() string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	keys := make([]string, 0, len(ev.counts))
	for k := range ev.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n    %6d  %s", ev.counts[k], k)
	}
	return b.String()
}

// logHandler is a slog.Handler feeding events; with EDGEREG_TEST_LOG set
// it also prints every record (with virtual time stamps).
type logHandler struct {
	ev    *events
	who   string
	node  int // for who == "node"
	attrs []slog.Attr
	print slog.Handler
}

func (ev *events) logger(who string, node int) *slog.Logger {
	h := &logHandler{ev: ev, who: who, node: node}
	if os.Getenv("EDGEREG_TEST_LOG") != "" {
		h.print = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}).
			WithAttrs([]slog.Attr{slog.String("who", fmt.Sprintf("%s%d", who, node))})
	}
	return slog.New(h)
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	var op, addr string
	var last time.Time
	visit := func(a slog.Attr) bool {
		v := a.Value.Resolve()
		switch a.Key {
		case "op":
			op = v.String()
		case "addr":
			addr = v.String()
		case "last_heartbeat":
			if v.Kind() == slog.KindTime {
				last = v.Time()
			}
		}
		return true
	}
	for _, a := range h.attrs {
		visit(a)
	}
	r.Attrs(visit)
	key := h.who + ": " + r.Message
	if op != "" {
		key += " [" + op + "]"
	}
	h.ev.mu.Lock()
	h.ev.counts[key]++
	if h.who == "node" && r.Message == "broker expired" {
		h.ev.expiries = append(h.ev.expiries, expiry{Node: h.node, Addr: addr, At: r.Time, LastHeartbeat: last})
	}
	if h.who == "node" && r.Message == "broker registered" {
		h.ev.registrations = append(h.ev.registrations, registration{Node: h.node, Addr: addr, At: r.Time})
	}
	h.ev.mu.Unlock()
	if h.print != nil {
		return h.print.Handle(ctx, r)
	}
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), as...)
	if h.print != nil {
		c.print = h.print.WithAttrs(as)
	}
	return &c
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

// ---------------------------------------------------------------------------
// The deployment.

type simConfig struct {
	Nodes, Brokers, Clients int
	RTT                     time.Duration
	Loss                    float64 // per packet, each direction
	Seed                    uint64
	// Node edits every node's configuration (timings stay at the
	// defaults unless it changes them).
	Node func(*node.Config)
	// FirstClientFanout, when set, is client 0's routeclient Fanout (the
	// others keep the default).
	FirstClientFanout int
	// ExtraTopics, when set, is how many topics each broker holds besides
	// its own and the shared one: a large registration.
	ExtraTopics int
	// Broker, when set, edits every broker's registrar configuration.
	Broker func(*broker.Config)
	// Drop, when set, is a loss model applied after Loss (see simNet.drop).
	Drop lossModel
	// Jitter adds up to this much latency to each packet at random
	// (reordering); Dup is the share of packets delivered twice.
	Jitter time.Duration
	Dup    float64
	// ReadFailShare is, for runLossModel, the share of the clients'
	// explicit refreshes, and of their route reads that missed the cache,
	// that may fail (each is logged) where the loss model can leave every
	// node unreachable for a request's timeouts; zero: none may. A read
	// asks the network when a refresh before it failed, under the same
	// bursts: holding reads to none where refreshes may fail made the
	// test fail now and then (one read in 360, at 30 % burst loss).
	ReadFailShare float64
}

// sim is one deployment inside a synctest bubble. newSim registers a
// cleanup that stops everything, in order, before the bubble ends.
type sim struct {
	t   *testing.T
	cfg simConfig
	net *simNet
	ev  *events
	ca  *pki.Local

	nodes   []*simNode
	brokers []*simBroker
	clients []*simClient
	readers []*readers
}

func newSim(t *testing.T, cfg simConfig) *sim {
	t.Helper()
	if cfg.RTT == 0 {
		cfg.RTT = 40 * time.Millisecond
	}
	if v := os.Getenv("EDGEREG_SIM_SEED"); v != "" { // to vary the loss pattern
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("EDGEREG_SIM_SEED: %v", err)
		}
		cfg.Seed += n
	}
	s := &sim{t: t, cfg: cfg, net: newSimNet(cfg.RTT, cfg.Loss, cfg.Seed), ev: newEvents()}
	s.net.drop, s.net.jitter, s.net.dup = cfg.Drop, cfg.Jitter, cfg.Dup
	t.Cleanup(s.close)
	ca, err := pki.EnsureLocal(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ca = ca
	for i := range cfg.Nodes {
		sn := &simNode{s: s, idx: i, ap: netip.AddrPortFrom(nodeIP(i), nodePort), dir: t.TempDir()}
		s.seedCA(sn.dir)
		sn.start()
		s.nodes = append(s.nodes, sn)
	}
	// Brokers start one after another over a heartbeat interval, so
	// their heartbeats are spread out as in a fleet started at different
	// times (brokers started at once stay in step for a long while: the
	// registrar's jitter is a tenth of the interval).
	for i := range cfg.Brokers {
		if i > 0 {
			time.Sleep(node.DefaultHeartbeatInterval / time.Duration(cfg.Brokers))
		}
		s.brokers = append(s.brokers, s.startBroker(i))
	}
	for i := range cfg.Clients {
		s.clients = append(s.clients, s.startClient(i))
	}
	return s
}

func (s *sim) nodeAddrs() []string {
	out := make([]string, len(s.nodes))
	for i, sn := range s.nodes {
		out[i] = sn.ap.String()
	}
	return out
}

// seedCA puts the shared CA in a node's data directory, so every node
// issues its own certificate from it and accepts the same credentials.
func (s *sim) seedCA(dataDir string) {
	dst := pki.TLSDir(dataDir)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		s.t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key"} {
		b, err := os.ReadFile(filepath.Join(s.ca.Dir, f))
		if err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o600); err != nil {
			s.t.Fatal(err)
		}
	}
}

// tlsFor issues a credential; nodes are verified as "localhost", which
// every node certificate of the local CA carries.
func (s *sim) tlsFor(role pki.Role, name string, groups []string) *tls.Config {
	certPEM, keyPEM, err := s.ca.Issue(role, name, groups, 24*time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		s.t.Fatal(err)
	}
	return pki.ClientConfig(&cert, s.ca.CAPool, "")
}

// close stops clients, brokers and nodes, then the network.
func (s *sim) close() {
	for _, rd := range s.readers {
		rd.stop()
	}
	for _, c := range s.clients {
		c.close()
	}
	for _, b := range s.brokers {
		b.kill()
	}
	for _, sn := range s.nodes {
		sn.stop()
	}
	s.net.close()
}

// ---------------------------------------------------------------------------
// Nodes.

type simNode struct {
	s   *sim
	idx int
	ap  netip.AddrPort
	dir string

	conn    *simnet.SimConn
	n       *node.Node
	served  chan error
	started time.Time
}

func (sn *simNode) start() {
	s := sn.s
	sn.conn = s.net.endpoint(sn.ap)
	cfg := node.Config{
		Addr:       sn.ap.String(),
		AdminAddr:  node.AdminOff,
		DataDir:    sn.dir,
		Hosts:      []string{sn.ap.Addr().String()},
		PacketConn: sn.conn,
		Logger:     s.ev.logger("node", sn.idx),
	}
	if s.cfg.Node != nil {
		s.cfg.Node(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		s.t.Fatalf("node %d: %v", sn.idx, err)
	}
	sn.n, sn.served, sn.started = n, make(chan error, 1), time.Now()
	go func() { sn.served <- n.Serve() }()
}

// crash takes the node off the network at once: nothing it sends escapes,
// its socket closes, and its process state is gone (the Node is then shut
// down only to reap its goroutines; its goodbyes are dropped).
func (sn *simNode) crash() {
	sn.s.net.setDown(sn.ap.Addr(), true)
	sn.conn.Close()
	sn.stop()
}

// restart starts a new node on the same address and data directory.
func (sn *simNode) restart() {
	sn.s.net.setDown(sn.ap.Addr(), false)
	sn.start()
}

func (sn *simNode) stop() {
	if sn.n == nil {
		return
	}
	n := sn.n
	sn.n = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil && !errors.Is(err, node.ErrClosed) {
		sn.s.t.Errorf("node %d shutdown: %v", sn.idx, err)
	}
	select {
	case <-sn.served:
	case <-time.After(30 * time.Second):
		sn.s.t.Errorf("node %d: Serve did not return", sn.idx)
	}
}

func (sn *simNode) leases() int { return sn.n.Registry().LeaseCount() }

func (sn *simNode) hasLease(b *simBroker) bool {
	_, ok := sn.n.Registry().Lease(clusterName, b.addr)
	return ok
}

// routeBrokers returns how many broker groups the node's route of topic
// names (0 when it has none).
func (sn *simNode) routeBrokers(topic string) int {
	r, _, err := sn.n.Registry().RouteData(topic)
	if err != nil {
		return 0
	}
	return len(r.Brokers)
}

// ---------------------------------------------------------------------------
// Brokers.

type simBroker struct {
	s     *sim
	idx   int
	name  string
	addr  string // advertised address; keys its lease
	topic string // its own topic; it also holds sharedTopic
	ip    netip.Addr

	conn   *simnet.SimConn
	tr     *quic.Transport
	r      *broker.Registrar
	killed bool
}

func (s *sim) startBroker(i int) *simBroker {
	b := &simBroker{s: s, idx: i, name: brokerName(i), topic: brokerTopic(i), ip: brokerIP(i)}
	b.addr = netip.AddrPortFrom(b.ip, brokerPort).String()
	b.conn = s.net.endpoint(netip.AddrPortFrom(b.ip, endpointPort))
	b.tr = &quic.Transport{Conn: b.conn}
	topics := []wire.TopicConfig{
		{Name: sharedTopic, ReadQueues: 4, WriteQueues: 4, Perm: wire.PermRead | wire.PermWrite},
		{Name: b.topic, ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite},
	}
	for j := range s.cfg.ExtraTopics {
		topics = append(topics, wire.TopicConfig{Name: fmt.Sprintf("%s-extra-%06d", b.topic, j), ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite})
	}
	bc := broker.Config{
		Identity:  broker.Identity{Cluster: clusterName, BrokerName: b.name, Addr: b.addr},
		Topics:    topics,
		Nodes:     nodes.Static(s.nodeAddrs()...),
		TLS:       s.tlsFor(pki.RoleBroker, b.name, []string{b.name}),
		Logger:    s.ev.logger("broker", i),
		Transport: b.tr,
	}
	if s.cfg.Broker != nil {
		s.cfg.Broker(&bc)
	}
	r, err := broker.New(bc)
	if err != nil {
		s.t.Fatalf("broker %d: %v", i, err)
	}
	if err := r.Start(); err != nil {
		s.t.Fatalf("broker %d: %v", i, err)
	}
	b.r = r
	return b
}

// kill stops the broker as a crash does: off the network first, then
// closed without unregistering.
func (b *simBroker) kill() {
	if b.killed {
		return
	}
	b.killed = true
	b.s.net.setDown(b.ip, true)
	b.r.Close()
	b.tr.Close()
	b.conn.Close()
}

// ---------------------------------------------------------------------------
// Route clients.

// clientRefresh is the route clients' RefreshInterval: long enough that
// their own refresh loop (and watch ping) never runs in a test, so that each
// client is driven by one goroutine, its reader, which calls Refresh every
// read interval (more often than the default 30 s). With two goroutines in
// one client, a dial in progress wedges the synctest bubble:
// routeclient's node.get holds a sync.Mutex across the dial, a second
// caller blocks on that mutex (not a durable block), so virtual time
// stops, and the dial, which waits for packets and timers, never ends
// (see TestReproRouteClientDialWedge). Request timeouts, failover and
// backoff stay at their defaults.
const clientRefresh = 24 * time.Hour

type simClient struct {
	idx  int
	conn *simnet.SimConn
	tr   *quic.Transport
	c    *routeclient.Client
}

func (s *sim) startClient(i int) *simClient {
	fanout := 0
	if i == 0 {
		fanout = s.cfg.FirstClientFanout
	}
	return s.startClientFanout(i, s.nodeAddrs(), clientRefresh, fanout)
}

// startClientOf starts client i reading from the nodes at addrs.
func (s *sim) startClientOf(i int, addrs []string, refresh time.Duration) *simClient {
	return s.startClientFanout(i, addrs, refresh, 0)
}

// startClientFanout is startClientOf asking fanout nodes at once (0: the
// default).
func (s *sim) startClientFanout(i int, addrs []string, refresh time.Duration, fanout int) *simClient {
	sc := &simClient{idx: i, conn: s.net.endpoint(netip.AddrPortFrom(clientIP(i), endpointPort))}
	sc.tr = &quic.Transport{Conn: sc.conn}
	c, err := routeclient.New(routeclient.Config{
		Nodes:           nodes.Static(addrs...),
		RefreshInterval: refresh,
		Fanout:          fanout,
		TLS:             s.tlsFor(pki.RoleClient, fmt.Sprintf("client-%d", i), nil),
		Logger:          s.ev.logger("client", i),
		Transport:       sc.tr,
	})
	if err != nil {
		s.t.Fatalf("client %d: %v", i, err)
	}
	sc.c = c
	return sc
}

func (sc *simClient) close() {
	if sc.c == nil {
		return
	}
	sc.c.Close()
	sc.c = nil
	sc.tr.Close()
	sc.conn.Close()
}

// read is one route read a reader made.
type read struct {
	At      time.Time
	Client  int
	Topic   string // "" for a Refresh
	Brokers int    // broker groups in the route
	Err     error
}

// readers are goroutines, one per client, that refresh every cached route
// and read routes every interval, as a producer would.
type readers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	reads []read
}

// startReaders starts a reader for each of clients, which refreshes the
// client's cached routes and then reads topics(client) every interval
// (the k-th client starts k*interval/len(clients) in); each round is
// bounded by 30 s.
func (s *sim) startReaders(clients []*simClient, interval time.Duration, topics func(client int) []string) *readers {
	ctx, cancel := context.WithCancel(context.Background())
	rd := &readers{cancel: cancel}
	s.readers = append(s.readers, rd)
	for k, sc := range clients {
		c, i := sc.c, sc.idx
		offset := time.Duration(k) * interval / time.Duration(len(clients))
		rd.wg.Go(func() {
			timer := time.NewTimer(offset)
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				timer.Reset(interval)
				rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
				if err := c.Refresh(rctx); ctx.Err() == nil {
					rd.add(read{At: time.Now(), Client: i, Err: err})
				}
				for _, topic := range topics(i) {
					route, _, err := c.Route(rctx, topic)
					if ctx.Err() == nil {
						rd.add(read{At: time.Now(), Client: i, Topic: topic, Brokers: len(route.Brokers), Err: err})
					}
				}
				rcancel()
			}
		})
	}
	return rd
}

func (rd *readers) add(r read) {
	rd.mu.Lock()
	rd.reads = append(rd.reads, r)
	rd.mu.Unlock()
}

func (rd *readers) stop() {
	rd.cancel()
	rd.wg.Wait()
}

// readSummary counts a reader set's reads.
type readSummary struct {
	Refreshes, RefreshErrs int
	Reads, ReadErrs        int
	Short                  int // reads of sharedTopic with fewer than want brokers
}

func (rd *readers) summary(want int) readSummary {
	var rs readSummary
	for _, r := range rd.all() {
		switch {
		case r.Topic == "":
			rs.Refreshes++
			if r.Err != nil {
				rs.RefreshErrs++
			}
		case r.Err != nil:
			rs.Reads++
			rs.ReadErrs++
		default:
			rs.Reads++
			if r.Topic == sharedTopic && r.Brokers < want {
				rs.Short++
			}
		}
	}
	return rs
}

func (rd *readers) all() []read {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return slices.Clone(rd.reads)
}

// ---------------------------------------------------------------------------
// Helpers.

// waitSynced waits (virtual time) until every live broker is registered
// with every node.
func (s *sim) waitSynced(within time.Duration) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for _, b := range s.brokers {
		if b.killed {
			continue
		}
		if err := b.r.WaitSynced(ctx); err != nil {
			s.t.Fatalf("broker %d not registered with every node after %s: %v (nodes: %+v)", b.idx, within, err, b.r.Nodes())
		}
	}
}

// brokerTotals sums the registrars' per-node counters.
type brokerTotals struct {
	Heartbeats, Registrations, Updates, Dials, Resumes uint64
}

func (s *sim) brokerTotals() brokerTotals {
	var t brokerTotals
	for _, b := range s.brokers {
		for _, st := range b.r.Nodes() {
			t.Heartbeats += st.Heartbeats
			t.Registrations += st.Registrations
			t.Updates += st.Updates
			t.Dials += st.Dials
			t.Resumes += st.Resumes
		}
	}
	return t
}

func (s *sim) clientTotals() routeclient.Stats {
	var t routeclient.Stats
	for _, sc := range s.clients {
		if sc.c == nil {
			continue
		}
		st := sc.c.Stats()
		t.CacheHits += st.CacheHits
		t.Queries += st.Queries
		t.Failovers += st.Failovers
		t.StaleServed += st.StaleServed
		t.Refreshes += st.Refreshes
		t.NotModified += st.NotModified
		t.Updated += st.Updated
		t.WatchStreams += st.WatchStreams
		t.Events += st.Events
	}
	return t
}

func pct(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// leaseSnapshot is what a lost lease changes, by counters independent of
// the logs: the epoch of every lease on every node (a node that lost a
// lease holds it under a new epoch once the broker registers again, or
// not at all), and every registrar's count of full registrations with
// each node (a lost lease costs one more).
type leaseSnapshot struct {
	epochs []map[string]uint64          // by node index, then broker address
	regs   map[string]map[string]uint64 // by broker address, then node address
}

func (s *sim) snapshotLeases() leaseSnapshot {
	ls := leaseSnapshot{epochs: make([]map[string]uint64, len(s.nodes)), regs: make(map[string]map[string]uint64)}
	for i, sn := range s.nodes {
		ls.epochs[i] = make(map[string]uint64)
		if sn.n == nil {
			continue
		}
		for _, l := range sn.n.Registry().Leases() {
			ls.epochs[i][l.Addr] = l.Epoch
		}
	}
	for _, b := range s.brokers {
		if b.killed {
			continue
		}
		ls.regs[b.addr] = make(map[string]uint64)
		for _, st := range b.r.Nodes() {
			ls.regs[b.addr][st.Addr] = st.Registrations
		}
	}
	return ls
}

// leasesLost describes every lease on nodes lost since before was taken
// (of brokers still alive), and every full registration since.
func (s *sim) leasesLost(before leaseSnapshot, nodes ...*simNode) []string {
	if len(nodes) == 0 {
		nodes = s.nodes
	}
	now := s.snapshotLeases()
	var out []string
	for _, sn := range nodes {
		for addr, e := range before.epochs[sn.idx] {
			if _, alive := now.regs[addr]; alive && now.epochs[sn.idx][addr] != e {
				out = append(out, fmt.Sprintf("node %d: the lease of %s had epoch %d, now %d (0: none)", sn.idx, addr, e, now.epochs[sn.idx][addr]))
			}
		}
		for addr, regs := range now.regs {
			if n, was := regs[sn.ap.String()], before.regs[addr][sn.ap.String()]; n != was {
				out = append(out, fmt.Sprintf("broker %s registered with node %d %d more times", addr, sn.idx, n-was))
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkLoss fails the test unless the network dropped about the share of
// packets it was configured to: a loss test whose packets all arrive
// proves nothing.
func (s *sim) checkLoss() netStats {
	s.t.Helper()
	ns := s.net.snapshot()
	if s.cfg.Loss == 0 {
		return ns
	}
	got := float64(ns.Lost) / float64(max(ns.Sent, 1))
	if ns.Lost == 0 || got < s.cfg.Loss*0.8 || got > s.cfg.Loss*1.2 {
		s.t.Errorf("the network dropped %d of %d packets (%.1f%%), want about %.0f%%", ns.Lost, ns.Sent, 100*got, 100*s.cfg.Loss)
	}
	return ns
}
