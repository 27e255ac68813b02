// Package routeclient is what producers and consumers use to find where a
// topic lives: it asks any edgereg node for a topic's route, caches it,
// refreshes every cached route in one request per RefreshInterval, fails
// over between nodes, and watches topics so changes are pushed within one
// round trip instead of waiting for the next poll.
//
// # Merged reads
//
// Nodes share nothing, so one node's answer can lack brokers that node is
// cut off from. Every read and refresh asks Fanout nodes (default 2) at
// once and merges their answers by the rule of PROTOCOL.md section 9.1: a
// group any asked node holds a live lease for stays; not-found is returned
// only when every ready node that answered says so; the merged route's
// version is that of its bytes, so "not modified" works across nodes. The
// read returns MergeWait after the first answer (by default as long as
// that answer took) when every topic has a route from a node past its
// warm-up by then.
//
// # Failover
//
// A query goes first to the node that answered last; on an error, a timeout
// (RequestTimeout) or a "warming up" answer (a node that restarted recently
// and may not know every broker yet) it goes to the next node of the list.
// Nodes that failed recently are tried last. The node list comes from a
// nodes.Source and is read again every NodeRefreshInterval; a node that
// left the list has its connection closed and is never asked again, even
// by a query in flight (rocketmq#2042: clients stuck on a removed name
// server).
//
// # Staleness
//
// A cached route is served while a node confirmed it within two refresh
// intervals (or a watch pushed it). An older route is looked up again; if
// no node answers, the old route is served rather than nothing (a producer
// with a slightly old route can still send), and the failure is logged.
// Reads then serve it at once, without asking, for one refresh interval
// (the background refresh keeps asking), so an outage of every node does
// not cost each read a request timeout.
package routeclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
)

// Defaults a Client gets for unset Config fields, and protocol limits it
// respects.
const (
	DefaultRefreshInterval = 30 * time.Second
	DefaultRequestTimeout  = 3 * time.Second
	// DefaultFanout is how many nodes a read asks at once.
	DefaultFanout = 2
	// MaxFanout is the most nodes a read asks at once, and the most watch
	// streams a Client keeps; a larger Config.Fanout counts as this.
	MaxFanout = 16
	// MinMergeWait is the least a read waits for the other nodes asked
	// after the first answer (unless Config.MergeWait says otherwise), so
	// jitter of a few milliseconds does not drop an answer from the merge.
	MinMergeWait = 50 * time.Millisecond
	// MaxTopicsPerRequest is the most topics one get-routes or watch
	// request names (the node's limit); a refresh or watch of more topics
	// is split, as is one whose names would pass maxRequestBytes.
	MaxTopicsPerRequest = 10_000
	// maxRequestBytes keeps a refresh, watch or unwatch request under the
	// node's 1 MiB request cap, with room for the client attributes: 10,000
	// names of 127 characters would not fit.
	maxRequestBytes = 768 << 10
)

// Errors callers can branch on. Node errors arrive as *wire.Error: test
// them with errors.Is(err, wire.ErrNotFound) or wire.ErrWarmingUp.
var (
	// ErrClosed is returned by calls on a closed Client.
	ErrClosed = errors.New("route client closed")
	// ErrInvalidConfig is wrapped by New's errors for a bad Config.
	ErrInvalidConfig = errors.New("invalid route client config")
	// ErrInvalidTopic is wrapped by errors for a malformed topic name.
	ErrInvalidTopic = errors.New("invalid topic name")
	// ErrNoNodes is returned when the node list is empty or not known yet.
	ErrNoNodes = errors.New("no edgereg node to ask")
)

// Config configures a Client.
type Config struct {
	// Nodes says which nodes to ask. Required.
	Nodes nodes.Source
	// NodeRefreshInterval is how often Nodes is read again. Default 30 s.
	NodeRefreshInterval time.Duration
	// TLS is the client TLS configuration (pki.ClientConfig with a client
	// certificate, or none where the nodes allow anonymous readers).
	// Required. A session cache is added when it has none.
	TLS *tls.Config
	// Attrs describe this client to route policies; sent with every read.
	Attrs wire.ClientAttrs
	// RefreshInterval is how often every cached route is re-validated, in
	// one request, and how often a watch stream is pinged. Default 30 s.
	RefreshInterval time.Duration
	// RequestTimeout bounds each request to one node, and each dial,
	// before the next node is tried. Default 3 s.
	RequestTimeout time.Duration
	// Backoff schedules reconnects of a watch stream. Default 200 ms to 30 s.
	Backoff nodes.Backoff
	// Logger receives failovers and failures; default slog.Default().
	Logger *slog.Logger
	// Transport, when set, is the QUIC transport to dial nodes from (see
	// client.Config.Transport); tests use it for a simulated network.
	Transport *quic.Transport
	// Fanout is how many nodes every read, refresh and watch asks at once;
	// their answers are merged (PROTOCOL.md 9.1), so a node cut off from
	// some brokers cannot hide them. Default DefaultFanout (2); 1 asks one
	// node at a time, as clients before it did. More than the node list
	// holds asks every node; more than MaxFanout counts as MaxFanout.
	Fanout int
	// MergeWait is how long a read waits for the other nodes asked once
	// the first has answered with a route for every topic (a node that is
	// warming up does not count: its route may lack groups); what has not
	// arrived by then is not merged. Default: as long as the first answer
	// took, and at least MinMergeWait, so a slow or dead node never holds
	// a read up by more than that. When every asked node answers, the read
	// returns at once. An answer that arrives later is still merged into
	// the cached route (Stats.LateMerged), so the next read sees it.
	MergeWait time.Duration
	// OnConnState, when set, is told each change of the connection state
	// to a node: connected, failed (tried again later) or refused for good
	// (ErrRefused). It is called from the client's goroutines and must not
	// block or call back into the Client.
	OnConnState func(ConnEvent)
}

func (c Config) withDefaults() Config {
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.NodeRefreshInterval <= 0 {
		c.NodeRefreshInterval = nodes.DefaultRefreshInterval
	}
	if c.Fanout <= 0 {
		c.Fanout = DefaultFanout
	}
	c.Fanout = min(c.Fanout, MaxFanout) // the watch keeps a stream slot per unit
	c.Backoff = c.Backoff.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.TLS = wire.ClientTLS(c.TLS)
	return c
}

// Stats counts what a Client did; see Client.Stats.
type Stats struct {
	// CacheHits counts Route calls answered from the cache.
	CacheHits uint64
	// Queries counts get-routes requests sent for Route calls, one per
	// node asked, failovers included.
	Queries uint64
	// Failovers counts requests that went to a node beyond the Fanout
	// asked first, after an error, a timeout or a warming-up answer.
	Failovers uint64
	// StaleServed counts Route calls answered with an old cached route
	// because no node answered.
	StaleServed uint64
	// Refreshes counts get-routes requests sent by refreshes, one per
	// node asked.
	Refreshes uint64
	// NotModified and Updated count topics a refresh found unchanged or
	// changed.
	NotModified, Updated uint64
	// WatchStreams counts watch streams opened: one per node watched (up
	// to Fanout), plus one per resume.
	WatchStreams uint64
	// Events counts route events pushed on watch streams.
	Events uint64
	// LateMerged counts cached routes changed by an answer that arrived
	// after its read had returned on MergeWait.
	LateMerged uint64
	// Cached is how many routes the cache holds now (each is refreshed
	// every RefreshInterval).
	Cached int
}

type counters struct {
	cacheHits, queries, failovers, staleServed    atomic.Uint64
	refreshes, notModified, updated, watchStreams atomic.Uint64
	events, lateMerged                            atomic.Uint64
}

// entry is one cached route.
type entry struct {
	route   wire.Route
	version uint64
	checked time.Time // when a node last confirmed it
	// pushed is the sequence number (Client.pushSeq) of the last watch
	// push recorded for the topic; 0 for none.
	pushed uint64
	// polled is the stamp (asOf.poll) of the read whose answer the entry
	// holds or last confirmed: an answer to a read sent before it is older.
	polled uint64
	// quietUntil: a lookup found no node to answer, so reads serve the
	// route as it is until then rather than each waiting for the nodes to
	// fail again; the refresh loop keeps asking meanwhile.
	quietUntil time.Time
}

// flight is a lookup in progress that concurrent Route calls share.
type flight struct {
	done    chan struct{}
	route   wire.Route
	version uint64
	err     error
	// cut: the leader's own context ended during the lookup, so its
	// error says nothing to a caller whose context still runs.
	cut bool
}

// Client finds topic routes. It is safe for concurrent use; Close it when
// done.
type Client struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // background loops and watch goroutines

	mu        sync.Mutex
	nodes     []*node // current list, sorted by address
	preferred string  // the node that answered last
	listed    chan struct{}
	cache     map[string]*entry
	inflight  map[string]*flight
	closed    bool
	// goneAt holds, for a watched topic a push said is gone (so it has no
	// entry), that push's sequence number: a read sent before it must not
	// bring the topic back.
	goneAt map[string]uint64
	// pushSeq numbers the merged states a watch delivers, in the order the
	// hub merged them. Versions are hashes (PROTOCOL.md 9) and say nothing
	// of which route is newer, so the cache orders its writes by these: a
	// push is newer than a read sent before it was numbered (the read's
	// answer may predate the change; the watch keeps pushing what follows),
	// and than a push numbered before it.
	pushSeq atomic.Uint64
	// pollSeq numbers reads (lookups and refreshes) in the order they are
	// sent: of two answers for a topic, the one to the read sent last wins,
	// whichever arrives last (a slow node's answer may predate the change
	// a later read saw on the same node).
	pollSeq atomic.Uint64
	// dropped holds, for a topic a read found gone (so it has no entry),
	// that read's stamp, while reads stamped before it may still answer;
	// reading counts the stamped reads in flight, and dropped is emptied
	// whenever none is.
	dropped map[string]uint64
	reading int

	watch *watchHub
	stats counters

	// onAnswer, set only by tests, runs when a lookup has its answer and
	// before it is cached, so a test can land a push in between.
	onAnswer func(topic string)
	// onPushed, set only by tests, runs when a watch push was merged and
	// before the merge is recorded in the cache.
	onPushed func(topic string)
}

// New validates cfg and starts a Client: it reads the node list and starts
// refreshing cached routes in the background.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Nodes == nil:
		return nil, fmt.Errorf("%w: no node source", ErrInvalidConfig)
	case cfg.TLS == nil:
		return nil, fmt.Errorf("%w: no TLS config (use pki.ClientConfig)", ErrInvalidConfig)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:      cfg,
		log:      cfg.Logger,
		ctx:      ctx,
		cancel:   cancel,
		listed:   make(chan struct{}),
		cache:    make(map[string]*entry),
		inflight: make(map[string]*flight),
		goneAt:   make(map[string]uint64),
		dropped:  make(map[string]uint64),
	}
	c.watch = newWatchHub(c)
	c.wg.Add(3)
	go func() {
		defer c.wg.Done()
		nodes.Follow(ctx, cfg.Nodes, nodes.FollowConfig{
			Interval:      cfg.NodeRefreshInterval,
			LookupTimeout: cfg.RequestTimeout,
			Backoff:       cfg.Backoff,
			Logger:        c.log,
		}, c.setNodes)
	}()
	go func() {
		defer c.wg.Done()
		c.refreshLoop()
	}()
	go func() {
		defer c.wg.Done()
		c.watch.run()
	}()
	return c, nil
}

// Close stops background work, ends every watch (closing its channel) and
// closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	ns := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	c.cancel()
	for _, n := range ns {
		n.close()
	}
	c.wg.Wait()
	return nil
}

// Nodes returns the addresses of the nodes the client currently uses.
func (c *Client) Nodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	c.mu.Lock()
	cached := len(c.cache)
	c.mu.Unlock()
	return Stats{Cached: cached,
		CacheHits: s.cacheHits.Load(), Queries: s.queries.Load(), Failovers: s.failovers.Load(),
		StaleServed: s.staleServed.Load(), Refreshes: s.refreshes.Load(),
		NotModified: s.notModified.Load(), Updated: s.updated.Load(),
		WatchStreams: s.watchStreams.Load(), Events: s.events.Load(), LateMerged: s.lateMerged.Load(),
	}
}

// setNodes is the follow loop's callback: it keeps the connections of
// nodes still listed, adds the new ones, and closes those that left.
func (c *Client) setNodes(addrs []string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	old := c.nodes
	next := make([]*node, 0, len(addrs))
	for _, a := range addrs {
		i := slices.IndexFunc(old, func(n *node) bool { return n.addr == a })
		if i >= 0 {
			next = append(next, old[i])
		} else {
			next = append(next, newNode(c, a))
		}
	}
	var gone []*node
	for _, n := range old {
		if !slices.Contains(addrs, n.addr) {
			gone = append(gone, n)
		}
	}
	c.nodes = next
	select {
	case <-c.listed:
	default:
		close(c.listed)
	}
	c.mu.Unlock()
	for _, n := range gone {
		c.log.Info("node left the node list: closing its connection", "node", n.addr)
		n.close() // a watch stream on it ends, and resumes on a listed node
	}
}

// candidates returns the nodes to ask, in order: the node that answered
// last, then the others in list order after it; nodes that failed recently
// go last, and so do nodes known to be one listed before them under
// another name. It waits for the first node list, bounded by ctx.
func (c *Client) candidates(ctx context.Context) ([]*node, error) {
	select {
	case <-c.listed:
	case <-c.ctx.Done():
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for the node list: %w", ErrNoNodes, ctx.Err())
	}
	c.mu.Lock()
	list, pref := slices.Clone(c.nodes), c.preferred
	c.mu.Unlock()
	if len(list) == 0 {
		return nil, ErrNoNodes
	}
	if i := slices.IndexFunc(list, func(n *node) bool { return n.addr == pref }); i > 0 {
		list = append(list[i:], list[:i]...)
	}
	now := time.Now()
	healthy := list[:0:0]
	var sick []*node
	for _, n := range list {
		if n.backingOff(now) {
			sick = append(sick, n)
		} else {
			healthy = append(healthy, n)
		}
	}
	return sameNodes(append(healthy, sick...)), nil
}

func (c *Client) setPreferred(n *node) {
	c.mu.Lock()
	c.preferred = n.addr
	c.mu.Unlock()
}

// validTopic applies the node's rule for topic names.
func validTopic(name string) error {
	if err := wire.ValidTopicName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidTopic, err)
	}
	return nil
}
