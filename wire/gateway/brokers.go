package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/remoting"
)

// brokerKey names a broker as RocketMQ keys its lease: cluster and address.
type brokerKey struct{ cluster, addr string }

// rmqVersion is a broker's RocketMQ DataVersion, as it last sent it.
type rmqVersion struct {
	Counter, StateVersion, Timestamp int64
}

// registration is one REGISTER_BROKER, decoded.
type registration struct {
	id      broker.Identity
	topics  []wire.TopicConfig
	version rmqVersion
	// timeout is how long the broker may stay silent (heartbeatTimeoutMillis),
	// zero for RocketMQ's 120 s.
	timeout time.Duration
	// conn is the connection it arrived on, when the server tells it.
	conn *remoting.ConnInfo
}

// brokerEntry is one broker the gateway keeps registered: a registrar
// session to every node, and what the broker last told the gateway.
type brokerEntry struct {
	key     brokerKey
	id      broker.Identity
	reg     *broker.Registrar
	timeout time.Duration

	// Guarded by brokerTable.mu.
	version  rmqVersion
	lastSeen time.Time
	conn     *remoting.ConnInfo // the connection of its last registration
	// listed is every topic the broker's registrations listed at version,
	// and when first: the round that tells which topics it still has.
	listed map[string]time.Time
}

// roundGap is how long a topic must have been listed at a data version
// before a registration that lists it again can complete a round: RocketMQ
// clamps registerNameServerPeriod to 10-60 s, so anything sooner is the
// same registration again (a NameServer address listed twice), not the
// next period's. Tests shorten it.
var roundGap atomic.Int64

func init() { roundGap.Store(int64(10 * time.Second)) }

// brokerTable turns RocketMQ's broker chatter into edgereg leases. Lock
// order: brokerTable.mu before a Registrar's own lock (topics are upserted
// under brokerTable.mu); a Registrar never calls back. Each
// broker gets one broker.Registrar, which registers with every node, holds
// the broker's topic set (REGISTER_BROKER is an upsert: brokers send
// partial sets and 800-topic chunks with no flag; applyLocked says how the
// set still follows the broker's deletions), sends only the topics that
// changed, and renews the lease with small heartbeats on its
// own schedule. So RocketMQ's 30 s full re-registration with nothing
// changed costs the WAN nothing extra, and the 1 Hz QUERY_DATA_VERSION and
// BROKER_HEARTBEAT only prove the broker alive to the gateway. A broker
// silent for its heartbeat timeout (120 s by default, as a NameServer
// waits) is unregistered from every node, as a NameServer would drop it.
type brokerTable struct {
	g *Gateway

	mu      sync.Mutex
	brokers map[brokerKey]*brokerEntry
	closed  bool

	// onExpire, set only by tests, runs when the unregistration of a
	// broker found silent (or whose connection closed) starts, so a test
	// can land a registration then.
	onExpire func()
}

func newBrokerTable(g *Gateway) *brokerTable {
	return &brokerTable{g: g, brokers: make(map[brokerKey]*brokerEntry)}
}

// errPartialFirst refuses a first registration that can only be partial.
var errPartialFirst = errors.New("register broker failed")

// register applies one REGISTER_BROKER and returns, for a slave, where its
// master is. The first registration of a broker waits (bounded by ctx and
// RegisterWait) until some node acknowledged it; later ones answer at once.
func (t *brokerTable) register(ctx context.Context, r *registration) (masterAddr, masterHA string, err error) {
	key := brokerKey{r.id.Cluster, r.id.Addr}
	topics := t.validTopics(r)
	now := time.Now()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return "", "", ErrClosed
	}
	e := t.brokers[key]
	var replaced *brokerEntry
	var displaced []*brokerEntry
	why := "broker address registered with another identity: replacing its registration"
	if e != nil && e.id == r.id && refusedEverywhere(e.reg) {
		// Every node refused the registrar for good, but a refusal can
		// stand on another broker's lease (the group held in another
		// cluster, a newer state at another address) that has expired
		// since. A NameServer judges every periodic registration afresh:
		// so does the gateway, at the broker's own pace.
		why = "every node had refused the broker: registering it afresh"
		replaced, e = e, nil
		delete(t.brokers, key)
	}
	if e != nil && e.id != r.id {
		// Same address, another identity (a slave promoted, a group
		// renamed): a fresh registrar registers the new identity, which
		// replaces the old lease of this address on every node.
		replaced, e = e, nil
		delete(t.brokers, key)
	}
	fresh := e == nil
	var before wire.DataVersion
	if !fresh {
		before = e.reg.DataVersion()
	}
	if fresh {
		if len(r.topics) == 1 {
			// A full topic table always holds the broker's system topics:
			// a single topic is a partial registration (a topic created on
			// a broker the gateway has not seen yet, e.g. after a gateway
			// restart). Registering it would replace the broker's whole
			// topic set on the nodes; refuse it as a 5.x NameServer does,
			// and the broker's next full registration goes through. The
			// table as sent counts, as it does for a NameServer, not the
			// topics left once those edgereg cannot hold are skipped.
			t.mu.Unlock()
			if replaced != nil {
				replaced.reg.Close()
			}
			return "", "", errPartialFirst
		}
		if len(t.brokers) >= t.g.cfg.MaxBrokers {
			t.mu.Unlock()
			if replaced != nil {
				replaced.reg.Close()
			}
			return "", "", fmt.Errorf("the gateway serves %d brokers already (its limit)", t.g.cfg.MaxBrokers)
		}
		e, err = t.start(r, topics)
		if err != nil {
			t.mu.Unlock()
			return "", "", err
		}
		t.brokers[key] = e
		displaced = t.displacedLocked(e)
		e.listed = make(map[string]time.Time, len(topics))
		listTopics(e.listed, topics, now)
	} else if err = t.applyLocked(e, r.version, topics, now); err != nil {
		t.mu.Unlock()
		return "", "", err
	}
	e.version, e.lastSeen = r.version, now
	if t.g.cfg.UnregisterOnClose && r.conn != nil && e.conn != r.conn {
		e.conn = r.conn
		ci := r.conn
		ci.OnClose(func() { t.connClosed(ci) }) // runs at once if it closed already
	}
	t.mu.Unlock()
	if replaced != nil {
		t.g.log.Info(why, "cluster", key.cluster, "addr", key.addr, "was", replaced.id.BrokerName, "id", replaced.id.BrokerID)
		replaced.reg.Close()
	}
	for _, d := range displaced {
		t.g.log.Info("broker id registered at another address: dropping the old address's registration",
			"cluster", d.key.cluster, "broker", d.id.BrokerName, "id", d.id.BrokerID, "was", d.key.addr, "now", key.addr)
		d.reg.Close()
	}
	if fresh {
		t.g.log.Info("broker registered through the gateway", "cluster", key.cluster, "broker", r.id.BrokerName,
			"id", r.id.BrokerID, "addr", key.addr, "topics", len(topics))
		t.waitAck(ctx, e)
	} else if v := e.reg.DataVersion(); v != before {
		t.waitApplied(ctx, e, v)
	}
	states := e.reg.Nodes()
	if !slices.ContainsFunc(states, func(s broker.NodeState) bool { return s.Registered }) {
		// Say so rather than SUCCESS: the broker logs it and registers
		// again at its next period, while the registrar keeps trying
		// (or, refused by every node, is replaced by that registration).
		if refusedEverywhere(e.reg) {
			return "", "", fmt.Errorf("%w: %s", errRefusedEverywhere, lastError(states))
		}
		return "", "", fmt.Errorf("%w: %s", errNotAcked, lastError(states))
	}
	masterAddr, masterHA = masterOf(states)
	return masterAddr, masterHA, nil
}

// applyLocked applies a later registration of e's broker to its topic set,
// which follows the broker's table. No flag tells a full registration from
// a partial one (a created topic; a chunk of a split registration), but
// RocketMQ bumps the data version at every topic creation, update and
// deletion, so every registration at one version lists topics of the same
// table, and each period the broker lists all of it again (in one
// registration, or in chunks in the same order). So:
//
//   - A new version starts a round. Its topics are sent to the nodes even
//     if unchanged: a topic deleted there and created again on the broker
//     comes back (a NameServer routes every topic a registration lists).
//   - A registration at the same version upserts what changed, and, if
//     every topic it lists was listed at this version roundGap before or
//     earlier, it is a later period's, so the whole table has been listed:
//     topics the gateway holds and the round did not list are no longer
//     on the broker and are removed from every node. Else the gateway would
//     register them again on a node that restarts or joins, where a
//     NameServer restart drops them, and the nodes would route a deleted
//     topic for as long as the broker lives (the gateway refuses
//     DELETE_TOPIC_IN_NAMESRV).
//
// A broker that registers only when its version changes
// (forceRegister=false, no split) never completes a round, and keeps its
// topics as before. With t.mu held.
func (t *brokerTable) applyLocked(e *brokerEntry, version rmqVersion, topics []wire.TopicConfig, now time.Time) error {
	if version != e.version {
		clear(e.listed)
		listTopics(e.listed, topics, now)
		return e.reg.RefreshTopics(topics...)
	}
	gap := time.Duration(roundGap.Load())
	round := len(topics) > 0
	for _, tc := range topics {
		first, ok := e.listed[tc.Name]
		if !ok {
			e.listed[tc.Name] = now
		}
		if !ok || now.Sub(first) < gap {
			round = false
		}
	}
	if err := e.reg.UpsertTopics(topics...); err != nil {
		return err
	}
	if !round {
		return nil
	}
	var gone []string
	for _, tc := range e.reg.Topics() {
		if _, ok := e.listed[tc.Name]; !ok {
			gone = append(gone, tc.Name)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	t.g.log.Info("broker no longer lists topics: removing them from every node", "cluster", e.key.cluster,
		"broker", e.id.BrokerName, "addr", e.key.addr, "removed", len(gone), "first", gone[:min(len(gone), maxLoggedSkips)])
	return e.reg.RemoveTopics(gone...)
}

// listTopics records topics as listed at now.
func listTopics(listed map[string]time.Time, topics []wire.TopicConfig, now time.Time) {
	for _, tc := range topics {
		listed[tc.Name] = now
	}
}

// errRefusedEverywhere is returned for a registration every node refused.
var errRefusedEverywhere = errors.New("edgereg gateway: every node refused the registration (judged again at the broker's next registration)")

// refusedEverywhere reports whether every node listed refused reg for good,
// so that it has stopped trying.
func refusedEverywhere(reg *broker.Registrar) bool {
	states := reg.Nodes()
	return len(states) > 0 && !slices.ContainsFunc(states, func(s broker.NodeState) bool { return s.Refused == nil })
}

// displacedLocked removes from the table, and returns, the entries of e's
// broker id (cluster, group, id) at other addresses. One id is one address
// (the node moves the id with the newer registration): a broker that came
// back at a new address has left the old one, and the old address's
// registrar, renewing a lease for a broker that is silent now, would
// register the old address again once the node dropped its lease, taking
// the id back from the live broker at every heartbeat. It is closed without
// unregistering, as the node already dropped that lease; a broker still
// alive there registers again at its next period, as with a NameServer,
// where the latest registration of an id wins. With t.mu held.
func (t *brokerTable) displacedLocked(e *brokerEntry) []*brokerEntry {
	var out []*brokerEntry
	for k, o := range t.brokers {
		if o != e && k.cluster == e.key.cluster && o.id.BrokerName == e.id.BrokerName && o.id.BrokerID == e.id.BrokerID {
			out = append(out, o)
			delete(t.brokers, k)
		}
	}
	return out
}

// errNotAcked is returned for a registration no node has acknowledged yet.
var errNotAcked = errors.New("edgereg gateway: no node has acknowledged the registration yet (the gateway keeps trying)")

func lastError(states []broker.NodeState) string {
	for _, s := range states {
		if s.LastError != "" {
			return s.LastError
		}
	}
	if len(states) == 0 {
		return "no node listed yet"
	}
	return "no answer yet"
}

// maxLoggedSkips is how many skipped topic names one log line names.
const maxLoggedSkips = 5

// loggedName is a skipped topic name as a log line gives it: cut past a
// topic name's longest, since a name may be megabytes long (a compressed
// registration inflates a few KiB to one).
func loggedName(name string) string {
	if len(name) > wire.MaxTopicNameLen {
		return fmt.Sprintf("%s... (%d bytes)", name[:wire.MaxTopicNameLen], len(name))
	}
	return name
}

// validTopics drops topics whose names the nodes would refuse, so one odd
// name does not cost the broker its whole registration. It logs one line
// per registration, naming the first few: a frame of a million bad names
// must not become a million log lines.
func (t *brokerTable) validTopics(r *registration) []wire.TopicConfig {
	out := r.topics[:0:0]
	var skipped int
	var first error
	var names []string
	for _, tc := range r.topics {
		if err := wire.ValidTopicName(tc.Name); err != nil {
			if skipped++; first == nil {
				first = err
			}
			if len(names) < maxLoggedSkips {
				names = append(names, loggedName(tc.Name))
			}
			continue
		}
		out = append(out, tc)
	}
	if skipped > 0 {
		t.g.peerLog.Warn("broker registers topics edgereg cannot hold: skipped", "broker", r.id.BrokerName,
			"addr", r.id.Addr, "skipped", skipped, "first", names, "err", first)
	}
	return out
}

// start creates and starts the registrar of a broker. With t.mu held; it
// does no I/O.
func (t *brokerTable) start(r *registration, topics []wire.TopicConfig) (*brokerEntry, error) {
	cfg := &t.g.cfg
	bc := broker.Config{
		Identity: r.id, Topics: topics, Nodes: t.g.nodeList, NodeRefreshInterval: cfg.NodeRefreshInterval,
		TLS: cfg.TLS, HeartbeatInterval: cfg.HeartbeatInterval, RequestTimeout: cfg.RequestTimeout,
		Backoff: cfg.Backoff, Logger: t.g.log, Transport: cfg.Transport,
	}
	if r.timeout > 0 {
		// The broker asks for a short lease (acting-master mode): ask the
		// nodes for the same, and renew it three times within it.
		bc.HeartbeatTimeout = r.timeout
		bc.HeartbeatInterval = min(bc.HeartbeatInterval, r.timeout/3)
	}
	reg, err := broker.New(bc)
	if err != nil {
		return nil, err
	}
	if err := reg.Start(); err != nil {
		return nil, err
	}
	timeout := r.timeout
	if timeout <= 0 {
		timeout = t.g.cfg.BrokerTimeout
	}
	return &brokerEntry{key: brokerKey{r.id.Cluster, r.id.Addr}, id: r.id, reg: reg, timeout: timeout}, nil
}

// registerWait bounds a registration's wait for the nodes: by ctx, by
// RegisterWait, and by the gateway's life, so a closing gateway answers
// the waiting brokers at once instead of holding its stop.
func (t *brokerTable) registerWait(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, t.g.cfg.RegisterWait)
	stop := context.AfterFunc(t.g.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// waitAck waits until some node acknowledged e's registration, so a slave's
// answer can name its master. It gives up after RegisterWait: the registrar
// keeps trying, and the broker's registration stands with the gateway.
func (t *brokerTable) waitAck(ctx context.Context, e *brokerEntry) {
	ctx, cancel := t.registerWait(ctx)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		states := e.reg.Nodes()
		if slices.ContainsFunc(states, func(s broker.NodeState) bool {
			return s.Registered && (e.id.BrokerID == wire.MasterID || s.MasterAddr != "")
		}) || refusedEverywhere(e.reg) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// waitApplied waits until every node holding e's registration has
// acknowledged topic version v, and one at least, bounded by ctx and
// RegisterWait. A NameServer answers a registration once it applied it:
// RocketMQ creates a topic (mqadmin updateTopic, a producer's auto-create)
// and a client reads its route right after, so answering first told that
// client TOPIC_NOT_EXIST for a WAN round trip. A node the registrar is not
// registered with (down, reconnecting) is not waited for; it gets the
// topics with its registration.
func (t *brokerTable) waitApplied(ctx context.Context, e *brokerEntry, v wire.DataVersion) {
	ctx, cancel := t.registerWait(ctx)
	defer cancel()
	if !slices.ContainsFunc(e.reg.Nodes(), func(s broker.NodeState) bool { return s.Registered }) {
		return // no node to wait for: the answer says so (errNotAcked)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !applied(e.reg.Nodes(), v) && !refusedEverywhere(e.reg) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// applied reports whether every registered node holds version v's topics,
// and one at least.
func applied(states []broker.NodeState, v wire.DataVersion) bool {
	some := false
	for _, s := range states {
		if !s.Registered || s.SameNodeAs != "" {
			continue
		}
		if s.DataVersion.Counter < v.Counter {
			return false
		}
		some = true
	}
	return some
}

// errUnknownGroup is returned by upsertGroupTopics for a group the gateway
// serves no broker of.
var errUnknownGroup = errors.New("no broker of the group registered through the gateway")

// upsertGroupTopics upserts one topic configuration per broker group into
// the registrar that leads each group (its master, else its lowest id),
// if the gateway serves every group named; else nothing changes. It
// returns once the nodes applied them (waitApplied), bounded by ctx.
func (t *brokerTable) upsertGroupTopics(ctx context.Context, byGroup map[string]wire.TopicConfig) error {
	leaders, err := t.upsertLeaders(byGroup)
	for _, l := range leaders {
		t.waitApplied(ctx, l, l.reg.DataVersion())
	}
	return err
}

// upsertLeaders is upsertGroupTopics' change, returning the registrars
// changed.
func (t *brokerTable) upsertLeaders(byGroup map[string]wire.TopicConfig) (map[string]*brokerEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	leaders := make(map[string]*brokerEntry, len(byGroup))
	for _, e := range t.brokers {
		if _, ok := byGroup[e.id.BrokerName]; !ok {
			continue
		}
		if l := leaders[e.id.BrokerName]; l == nil || e.id.BrokerID < l.id.BrokerID {
			leaders[e.id.BrokerName] = e
		}
	}
	for name := range byGroup {
		if leaders[name] == nil {
			return nil, fmt.Errorf("%w: %s", errUnknownGroup, name)
		}
	}
	for name, tc := range byGroup {
		// Sent even if unchanged: the broker created the topic, which a
		// node may have deleted before. The round starts again, as the
		// topic came from outside the broker's registrations.
		l := leaders[name]
		clear(l.listed)
		if err := l.reg.RefreshTopics(tc); err != nil {
			return leaders, err
		}
	}
	return leaders, nil
}

// masterOf returns the master address a node told a slave, if any.
func masterOf(states []broker.NodeState) (string, string) {
	for _, s := range states {
		if s.MasterAddr != "" {
			return s.MasterAddr, s.MasterHAAddr
		}
	}
	return "", ""
}

// seen renews the local liveness of a broker (QUERY_DATA_VERSION,
// BROKER_HEARTBEAT) and returns the data version it last registered. It
// sends nothing to the nodes: the registrar renews their leases itself. A
// broker every node refused is reported as not held, as a NameServer that
// refused a registration holds no data version for it: QUERY_DATA_VERSION
// then says changed, and a broker with forceRegister=false registers again
// (and is judged afresh) instead of believing itself registered for good.
func (t *brokerTable) seen(key brokerKey) (rmqVersion, bool) {
	t.mu.Lock()
	e := t.brokers[key]
	if e == nil {
		t.mu.Unlock()
		return rmqVersion{}, false
	}
	e.lastSeen = time.Now()
	v := e.version
	t.mu.Unlock()
	if refusedEverywhere(e.reg) {
		return rmqVersion{}, false
	}
	return v, true
}

// unregister stops a broker's registrar, which unregisters it from every
// node naming each registration's epoch, bounded by ctx. A broker the
// gateway does not hold is not an error (RocketMQ answers success too).
func (t *brokerTable) unregister(ctx context.Context, key brokerKey, why string) error {
	t.mu.Lock()
	e := t.brokers[key]
	delete(t.brokers, key)
	t.mu.Unlock()
	if e == nil {
		return nil
	}
	return t.stop(ctx, e, why)
}

// stop unregisters a broker removed from the table from every node,
// bounded by ctx.
func (t *brokerTable) stop(ctx context.Context, e *brokerEntry, why string) error {
	t.g.log.Info("unregistering broker from every node", "cluster", e.key.cluster, "broker", e.id.BrokerName, "addr", e.key.addr, "why", why)
	return e.reg.Stop(ctx)
}

// connClosed handles the close of a broker's TCP connection (with
// UnregisterOnClose): every broker whose last registration arrived on it is
// unregistered from every node, as a NameServer does. It may run with t.mu
// held (OnClose runs a hook at once for a connection already closed), so
// the unregistrations run on their own goroutines.
func (t *brokerTable) connClosed(ci *remoting.ConnInfo) {
	t.g.spawn(func() {
		t.dropWhere(func(e *brokerEntry) bool { return e.conn == ci }, "its connection to the gateway closed")
	})
}

// expire unregisters brokers silent for longer than their timeout.
func (t *brokerTable) expire(now time.Time) {
	t.dropWhere(func(e *brokerEntry) bool { return now.Sub(e.lastSeen) > e.timeout }, "silent for longer than its heartbeat timeout")
}

// dropWhere removes from the table the entries that match, found and
// removed under one lock, and unregisters each from every node on a
// goroutine of its own (bounded by RequestTimeout). A registration
// arriving after that is a fresh registrar's, under epochs the old
// registrar's unregistration does not name: the nodes keep it. Found by
// key and removed later, a silent broker's expiry removed the
// registration it sent meanwhile, from the gateway and every node.
func (t *brokerTable) dropWhere(match func(*brokerEntry) bool, why string) {
	t.mu.Lock()
	var gone []*brokerEntry
	for k, e := range t.brokers {
		if match(e) {
			gone = append(gone, e)
			delete(t.brokers, k)
		}
	}
	hook := t.onExpire
	t.mu.Unlock()
	for _, e := range gone {
		t.g.spawn(func() {
			if hook != nil {
				hook()
			}
			ctx, cancel := context.WithTimeout(t.g.ctx, t.g.cfg.RequestTimeout)
			defer cancel()
			t.stop(ctx, e, why)
		})
	}
}

// BrokerState describes one broker the gateway keeps registered.
type BrokerState struct {
	Cluster    string             `json:"cluster"`
	BrokerName string             `json:"broker_name"`
	BrokerID   int64              `json:"broker_id"`
	Addr       string             `json:"addr"`
	LastSeen   time.Time          `json:"last_seen"`
	Topics     int                `json:"topics"`
	Nodes      []broker.NodeState `json:"nodes"`
}

func (t *brokerTable) states() []BrokerState {
	t.mu.Lock()
	list := make([]*brokerEntry, 0, len(t.brokers))
	seen := make(map[*brokerEntry]time.Time, len(t.brokers))
	for _, e := range t.brokers {
		list = append(list, e)
		seen[e] = e.lastSeen
	}
	t.mu.Unlock()
	out := make([]BrokerState, 0, len(list))
	for _, e := range list {
		out = append(out, BrokerState{Cluster: e.id.Cluster, BrokerName: e.id.BrokerName, BrokerID: e.id.BrokerID,
			Addr: e.id.Addr, LastSeen: seen[e], Topics: len(e.reg.Topics()), Nodes: e.reg.Nodes()})
	}
	slices.SortFunc(out, func(a, b BrokerState) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	return out
}

// closeAll stops every registrar without unregistering: the nodes keep the
// brokers' leases until they expire, so restarting the gateway does not wipe
// live brokers, which register with the new gateway at their next period.
func (t *brokerTable) closeAll() {
	t.mu.Lock()
	list := t.brokers
	t.brokers = make(map[brokerKey]*brokerEntry)
	t.closed = true
	t.mu.Unlock()
	for _, e := range list {
		e.reg.Close()
	}
}

// vouches reports whether a broker registered through the gateway, alive on
// its LAN, holds topic while its registrar is not registered with every
// node it can register with: the nodes' word that the topic is gone may
// predate the broker's registration (every node expired it while the WAN
// was cut for longer than its lease, and the registrar is registering it
// again). The route cache then keeps the route it holds rather than tell
// the LAN's clients TOPIC_NOT_EXIST for a broker they can reach; the
// registration, once through, makes the nodes push the route.
func (t *brokerTable) vouches(topic string) bool {
	t.mu.Lock()
	regs := make([]*broker.Registrar, 0, len(t.brokers))
	for _, e := range t.brokers {
		regs = append(regs, e.reg)
	}
	t.mu.Unlock()
	for _, reg := range regs {
		if reg.HasTopic(topic) && slices.ContainsFunc(reg.Nodes(), func(s broker.NodeState) bool {
			return !s.Registered && s.SameNodeAs == "" && s.Refused == nil
		}) {
			return true
		}
	}
	return false // held by no broker here, or each is registered everywhere: the nodes' word stands
}
