// Package gateway is an edge site's local NameServer: it answers RocketMQ's
// remoting protocol (wire/remoting) for unmodified brokers and clients on
// the site's LAN, and talks edgereg's QUIC, with mutual TLS, to every
// edgereg node over the WAN.
//
// # Brokers
//
// Each broker's REGISTER_BROKER becomes a broker.Registrar, one session to
// every node, holding the broker's cumulative topic set: RocketMQ sends
// partial sets (a created topic) and 800-topic chunks with no flag, so each
// registration is an upsert, and only changed topics travel. RocketMQ's
// 30 s full re-registration with nothing changed then costs the WAN nothing
// beyond the registrar's own heartbeat; QUERY_DATA_VERSION and
// BROKER_HEARTBEAT (1 Hz in acting-master mode) are answered locally and
// only prove the broker alive to the gateway. UNREGISTER_BROKER, and a
// broker silent for its heartbeat timeout, unregister it from every node.
//
// # Clients
//
// GET_ROUTEINFO_BY_TOPIC is answered from a route cache that node watches
// keep current (wire/routeclient): the first read of a topic asks the
// nodes, every later one is served from memory and sees changes within a
// round trip of the node, not at the client's next 30 s poll. Every
// RefreshInterval the cached routes are also re-read from the route client's
// own refreshed cache, so a route whose watch failed still converges. While
// the WAN is lossy or cut the last known routes are served. A topic is reported
// missing (TOPIC_NOT_EXIST) only when a node says so, and not while a broker
// behind the gateway that holds it is being registered again (the nodes
// expired it during a cut longer than its lease); when no node answers
// and nothing is cached the answer is withheld, so the client's request
// times out and it keeps its own cached route (a SYSTEM_ERROR or a 17 would
// send a Go producer to the TBW102 fallback). Cluster info, topic lists and
// broker member groups have no watch in edgereg's protocol: they are polled
// in full, at most once per PollInterval and only while asked, and the last
// answer is served meanwhile and while the nodes are unreachable.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/ratelog"
	"github.com/edgereg/edgereg/wire/routeclient"
)

// Defaults a Gateway gets for unset Config fields.
const (
	DefaultProbeInterval   = 5 * time.Second
	DefaultPollInterval    = 5 * time.Second
	DefaultRequestTimeout  = 3 * time.Second
	DefaultUpstreamTimeout = 4 * time.Second
	DefaultNegativeTTL     = 2 * time.Second
	DefaultRegisterWait    = 5 * time.Second
	DefaultBrokerTimeout   = 120 * time.Second
	DefaultIdleTopic       = 10 * time.Minute
	DefaultMaxTopics       = 10_000
	DefaultMaxBrokers      = 1000
)

// ErrInvalidConfig is wrapped by New's errors for a bad Config.
var ErrInvalidConfig = errors.New("invalid gateway config")

// Config configures a Gateway.
type Config struct {
	// Nodes says where the edgereg nodes are. Required. The gateway alone
	// reads it; its route client and every broker's registrar follow what
	// it read.
	Nodes nodes.Source
	// NodeRefreshInterval is how often Nodes is read again. Default 30 s.
	NodeRefreshInterval time.Duration
	// TLS is the client TLS configuration, with a broker certificate that
	// names the broker groups the site's brokers use (a broker certificate
	// may also read routes). Required.
	TLS *tls.Config
	// Attrs describe the site's clients to route policies (zone, labels).
	Attrs wire.ClientAttrs
	// ProbeInterval is how often every node is pinged, for the upstream
	// state in metrics and health. Default 5 s.
	ProbeInterval time.Duration
	// PollInterval is how old a cached cluster info, topic list or member
	// group may get before a read triggers a new poll. Default 5 s.
	PollInterval time.Duration
	// RequestTimeout bounds one request to one node. Default 3 s.
	RequestTimeout time.Duration
	// UpstreamTimeout bounds a read that waits for the nodes (a route or a
	// list not cached yet), failovers included; it stays under
	// rocketmq-client-go's 6 s so a withheld answer is the client's
	// timeout, not a late reply. Default 4 s.
	UpstreamTimeout time.Duration
	// NegativeTTL is how long a node's "no such topic" is repeated from the
	// cache before the nodes are asked again. Default 2 s.
	NegativeTTL time.Duration
	// RefreshInterval is how often the route client re-validates its cache
	// and pings its watch stream, and how often the gateway re-reads its
	// cached routes from the route client, so a route whose watch failed
	// (a node refusing it, a stream that keeps breaking) still converges.
	// Default 30 s.
	RefreshInterval time.Duration
	// HeartbeatInterval is how often the registrars renew the brokers'
	// leases on every node. Default 30 s (broker.DefaultHeartbeatInterval).
	HeartbeatInterval time.Duration
	// RegisterWait bounds how long a broker's first registration waits for
	// a node's acknowledgement (a slave's answer names its master from it).
	// Default 5 s; the registrar keeps trying after.
	RegisterWait time.Duration
	// BrokerTimeout is how long a broker may stay silent (no registration,
	// QUERY_DATA_VERSION or BROKER_HEARTBEAT) before the gateway
	// unregisters it, unless its registration names its own
	// heartbeatTimeoutMillis. Default 120 s, a NameServer's.
	BrokerTimeout time.Duration
	// UnregisterOnClose unregisters a broker from every node as soon as the
	// TCP connection it registered on closes, as a NameServer does. Off by
	// default: a broker reconnects to its gateway without losing its routes
	// for that, a crashed broker is unregistered after BrokerTimeout, and a
	// clean shutdown sends UNREGISTER_BROKER anyway.
	UnregisterOnClose bool
	// IdleTopic is how long a topic nobody asked for stays cached and
	// watched. Default 10 min.
	IdleTopic time.Duration
	// MaxTopics caps the topics cached and watched; reads of more topics
	// are still answered, through the route client. Default 10000, a
	// node's default limit of watched topics per connection (all watches
	// share one stream).
	MaxTopics int
	// MaxBrokers caps the brokers the gateway registers. Each broker's
	// registrar holds one QUIC connection to every node with the gateway's
	// broker certificate. A node admits broker and operator connections
	// from one source address by a budget of their own (default 1024,
	// --max-broker-conns-per-host), apart from readers' 64
	// (--max-conns-per-host), and the gateway's own route and read
	// connections take two of it per node: default 1000. Past the node's
	// budget, connections of one certificate replace each other, so keep
	// MaxBrokers plus two plus any other broker agents behind the same
	// address under it.
	MaxBrokers int
	// Backoff schedules reconnects. Default 200 ms to 30 s with jitter.
	Backoff nodes.Backoff
	// Logger receives registrations, failovers and failures; default
	// slog.Default().
	Logger *slog.Logger
	// Transport, when set, is the QUIC transport to dial nodes from (tests).
	Transport *quic.Transport
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ProbeInterval, DefaultProbeInterval)
	def(&c.PollInterval, DefaultPollInterval)
	def(&c.RequestTimeout, DefaultRequestTimeout)
	def(&c.UpstreamTimeout, DefaultUpstreamTimeout)
	def(&c.NegativeTTL, DefaultNegativeTTL)
	def(&c.HeartbeatInterval, 30*time.Second)
	def(&c.RefreshInterval, routeclient.DefaultRefreshInterval)
	def(&c.RegisterWait, DefaultRegisterWait)
	def(&c.BrokerTimeout, DefaultBrokerTimeout)
	def(&c.IdleTopic, DefaultIdleTopic)
	def(&c.NodeRefreshInterval, nodes.DefaultRefreshInterval)
	if c.MaxTopics <= 0 {
		c.MaxTopics = DefaultMaxTopics
	}
	if c.MaxBrokers <= 0 {
		c.MaxBrokers = DefaultMaxBrokers
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.TLS = wire.ClientTLS(c.TLS)
	return c
}

// Gateway answers remoting requests for an edge site. Create it with New,
// serve it with a remoting.Server (it is the server's Handler), and Close
// it when done.
type Gateway struct {
	cfg Config
	log *slog.Logger
	// peerLog is the rate-limited log of what remoting peers' requests
	// cause.
	peerLog *ratelog.Logger

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // background loops and fetches
	probe  chan struct{}

	// nodeList is what the gateway last read from cfg.Nodes, which only
	// the gateway reads: its route client and every broker's registrar
	// follow this list, so a thousand brokers are not a thousand reads
	// of an address service or DNS per refresh interval, and they all
	// see one list.
	nodeList *nodes.List
	routes   *routeclient.Client
	up       *upstream
	cache    *routeCache
	brokers  *brokerTable
	cluster  *polled[wire.ClusterInfo]
	topics   *polled[[]string]
	members  *polled[wire.BrokerData]
	metrics  *metrics
	// decoding bounds the REGISTER_BROKER bodies decoded at once: a
	// decoded topic table takes several times its frame's bytes, and the
	// remoting server bounds only the frames.
	decoding chan struct{}

	closeOnce sync.Once
	spawnMu   sync.Mutex // guards closed, so no goroutine starts once Close waits
	closed    bool
}

// spawn runs f on a goroutine the gateway owns, unless it is closing.
func (g *Gateway) spawn(f func()) bool {
	g.spawnMu.Lock()
	defer g.spawnMu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// New validates cfg and starts a Gateway: it reads the node list, connects
// to the nodes and starts probing them.
func New(cfg Config) (*Gateway, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Nodes == nil:
		return nil, fmt.Errorf("%w: no node source", ErrInvalidConfig)
	case cfg.TLS == nil:
		return nil, fmt.Errorf("%w: no TLS config (use pki.ClientConfig with a broker certificate)", ErrInvalidConfig)
	case cfg.UpstreamTimeout < cfg.RequestTimeout:
		return nil, fmt.Errorf("%w: upstream timeout %s is shorter than the request timeout %s", ErrInvalidConfig, cfg.UpstreamTimeout, cfg.RequestTimeout)
	}
	list := firstNodes(cfg)
	rc, err := routeclient.New(routeclient.Config{
		Nodes: list, NodeRefreshInterval: cfg.NodeRefreshInterval, TLS: cfg.TLS, Attrs: cfg.Attrs,
		RefreshInterval: cfg.RefreshInterval, RequestTimeout: cfg.RequestTimeout, Backoff: cfg.Backoff, Logger: cfg.Logger, Transport: cfg.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{cfg: cfg, nodeList: list, log: cfg.Logger, peerLog: ratelog.New(cfg.Logger), ctx: ctx, cancel: cancel, probe: make(chan struct{}, 1), routes: rc,
		decoding: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)/2))}
	g.up = newUpstream(g)
	g.cache = newRouteCache(g)
	g.brokers = newBrokerTable(g)
	g.cluster = newPolled(g, 1, func(ctx context.Context, _ string) (wire.ClusterInfo, error) {
		var answers []wire.ClusterInfo
		err := g.up.readMany(ctx, pollFanout, func(ctx context.Context, c *client.Conn) error {
			ci, err := c.ClusterInfo(ctx)
			if err == nil {
				answers = append(answers, ci)
			}
			return err
		})
		if err != nil {
			return wire.ClusterInfo{}, err
		}
		return mergeClusterInfo(answers), nil
	})
	g.topics = newPolled(g, 64, g.fetchTopics)
	g.members = newPolled(g, 1024, func(ctx context.Context, key string) (wire.BrokerData, error) {
		cluster, name := splitKey(key)
		var bd wire.BrokerData
		err := g.up.readMany(ctx, pollFanout, func(ctx context.Context, c *client.Conn) error {
			got, err := c.BrokerMemberGroup(ctx, cluster, name)
			if err == nil {
				bd = mergeBrokerData(bd, got)
			}
			return err
		})
		return bd, err
	})
	g.metrics = newMetrics(g)
	g.wg.Go(g.followNodes)
	g.wg.Go(g.probeLoop)
	g.wg.Go(g.janitor)
	g.wg.Go(g.revalidateLoop)
	return g, nil
}

// firstNodes reads cfg.Nodes once, bounded by RequestTimeout, into the list
// the gateway's route client and registrars follow, so they start with it;
// on failure the list starts empty and the gateway's follow loop retries.
func firstNodes(cfg Config) *nodes.List {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
	defer cancel()
	list := nodes.NewList()
	addrs, err := cfg.Nodes.Nodes(ctx)
	if err == nil {
		addrs, err = nodes.Normalize(addrs)
	}
	if err == nil && len(addrs) > 0 && len(addrs) <= nodes.MaxNodes {
		list.Set(addrs...)
	}
	return list
}

// Close stops the gateway. Brokers are not unregistered: the nodes keep
// their leases until they expire, so a restarted gateway does not wipe a
// site's live brokers, which register with it again at their next period.
func (g *Gateway) Close() error {
	err := ErrClosed
	g.closeOnce.Do(func() {
		err = nil
		g.spawnMu.Lock()
		g.closed = true
		g.spawnMu.Unlock()
		g.brokers.closeAll()
		g.cancel()
		g.up.close()
		g.wg.Wait()
		g.routes.Close()
	})
	return err
}

// ErrClosed is returned by Close on a closed Gateway.
var ErrClosed = errors.New("gateway closed")

// Nodes returns the state of the gateway's link to every listed node.
func (g *Gateway) Nodes() []NodeState { return g.up.states() }

// Brokers returns the brokers the gateway keeps registered.
func (g *Gateway) Brokers() []BrokerState { return g.brokers.states() }

func (g *Gateway) probeNow() {
	select {
	case g.probe <- struct{}{}:
	default:
	}
}

func (g *Gateway) probeLoop() {
	t := time.NewTicker(g.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.probe:
		}
		g.up.probe()
	}
}

// janitor expires silent brokers and forgets topics and lists nobody asks
// for.
func (g *Gateway) janitor() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastForget := time.Now()
	for {
		select {
		case <-g.ctx.Done():
			return
		case now := <-t.C:
			g.brokers.expire(now)
			if now.Sub(lastForget) >= time.Minute {
				lastForget = now
				g.cache.forget(g.cfg.IdleTopic)
				g.topics.forget(g.cfg.IdleTopic)
				g.members.forget(g.cfg.IdleTopic)
			}
		}
	}
}

// revalidateLoop re-reads the cached routes every RefreshInterval.
func (g *Gateway) revalidateLoop() {
	t := time.NewTicker(g.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
			g.cache.revalidate(g.ctx)
		}
	}
}

func splitKey(key string) (string, string) {
	for i := range len(key) {
		if key[i] == 0 {
			return key[:i], key[i+1:]
		}
	}
	return key, ""
}

func joinKey(a, b string) string { return a + "\x00" + b }

// fetchTopics reads a topic list; key is topicsKey's.
func (g *Gateway) fetchTopics(ctx context.Context, key string) ([]string, error) {
	kind, cluster := splitKey(key)
	k, err := strconv.Atoi(kind)
	if err != nil {
		return nil, fmt.Errorf("topic list key %q: %w", key, err)
	}
	q := wire.TopicsQuery{Kind: wire.TopicsKind(k), Cluster: cluster}
	var answers [][]string
	err = g.up.readMany(ctx, pollFanout, func(ctx context.Context, c *client.Conn) error {
		list, err := c.Topics(ctx, q)
		if err == nil {
			answers = append(answers, list)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return mergeTopics(answers), nil
}

// topicsKey names a topic list in the cache: the kind in decimal (never a
// NUL, which separates the cluster name), then the cluster.
func topicsKey(kind wire.TopicsKind, cluster string) string {
	return joinKey(strconv.Itoa(int(kind)), cluster)
}
