package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgereg/edgereg/node/kv"
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/remoting"
)

// The remoting listener: RocketMQ's TCP protocol on the node, so unmodified
// RocketMQ brokers and clients use the node as their NameServer
// (namesrvAddr). It serves the same registry as QUIC: a broker registered
// here and one registered over QUIC are the same broker to every reader.
//
// The protocol has no TLS and no identity, so the listener binds loopback
// unless told otherwise, refuses broker codes without
// Config.RemotingAllowBrokers and write/admin codes without
// Config.RemotingAllowAdmin.

// orderTopicNamespace is the KV namespace of ordered-topic configuration
// (NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG) a NameServer returns to brokers.
const orderTopicNamespace = "ORDER_TOPIC_CONFIG"

// Request classes and who may send them.
var (
	remotingBrokerCodes = map[int16]bool{
		remoting.RegisterBroker: true, remoting.UnregisterBroker: true, remoting.QueryDataVersion: true,
		remoting.BrokerHeartbeat: true, remoting.RegisterTopicInNameSrv: true,
	}
	remotingAdminCodes = map[int16]bool{
		remoting.PutKVConfig: true, remoting.DeleteKVConfig: true, remoting.WipeWritePermOfBroker: true,
		remoting.AddWritePermOfBroker: true, remoting.DeleteTopicInNameSrv: true, remoting.UpdateNameSrvConfig: true,
	}
)

// brokerKey names a broker's lease, as the registry keys it.
type brokerKey struct{ cluster, addr string }

// Lock order: regMu before the registry's locks (registrations call the
// registry with it held); connMu is never held across a registry call, nor
// while a close hook is registered.
type remotingListener struct {
	n   *Node
	ln  net.Listener
	srv *remoting.Server

	// regMu serialises remoting registrations: each reads the group's
	// topics and registers their union with what the broker listed, and two
	// interleaved would lose one's topics.
	regMu sync.Mutex
	// decoding bounds the REGISTER_BROKER bodies decoded at once
	// (remotingDecoders): a compressed body of a few KiB inflates to 16 MiB,
	// and registrations take turns at regMu after decoding anyway.
	decoding chan struct{}

	// byConn holds, per connection, the brokers registered on it and the
	// epoch each got there, to unregister them when it closes.
	connMu sync.Mutex
	byConn map[uint64]map[brokerKey]uint64

	// requests counts requests by code: a child per code a NameServer
	// handles, one for every other code (so a peer cannot grow the label set).
	routes        routeBodies
	requests      map[int16]prometheus.Counter
	otherRequests prometheus.Counter

	// stopping is set when the node shuts down: connections closing then
	// unregister nobody (the node is going away, its readers should fail
	// over, not see routes vanish first).
	stopping atomic.Bool
}

// remotingListenAddr is addr with an empty host made loopback: the protocol
// has no authentication, so all interfaces must be asked for by name.
func remotingListenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// openRemoting binds the remoting listener when one is configured.
func (n *Node) openRemoting() error {
	if n.cfg.RemotingAddr == "" {
		return nil
	}
	addr := remotingListenAddr(n.cfg.RemotingAddr)
	ln, err := n.socks.listenTCP(addr)
	if err != nil {
		return bindError("remoting-addr", addr, err)
	}
	rl := &remotingListener{n: n, ln: ln, byConn: map[uint64]map[brokerKey]uint64{},
		decoding: make(chan struct{}, remotingDecoders())}
	// Without broker registration every request is a small client or admin
	// request: frames get the client cap, as a QUIC client's do. Remoting
	// gets at most half the node's workers, so QUIC always has the rest.
	maxFrame := n.cfg.RemotingMaxFrame
	if !n.cfg.RemotingAllowBrokers {
		maxFrame = min(maxFrame, n.cfg.MaxRequestLen)
	}
	rl.srv = &remoting.Server{Handler: rl, Logger: n.log, Limits: remoting.Limits{
		MaxConns: n.cfg.MaxConns, MaxConnsPerHost: n.cfg.MaxConnsPerHost,
		MaxFrame: maxFrame, FrameTimeout: n.cfg.ReadTimeout,
		Workers: max(1, n.cfg.Workers/2), WriteTimeout: n.cfg.WriteTimeout,
	}}
	n.remoting = rl
	rl.registerMetrics()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && (n.cfg.RemotingAllowBrokers || n.cfg.RemotingAllowAdmin) {
		n.log.Warn("remoting listener is not on loopback and accepts unauthenticated broker or admin requests",
			"addr", ln.Addr().String(), "allow_brokers", n.cfg.RemotingAllowBrokers, "allow_admin", n.cfg.RemotingAllowAdmin)
	}
	return nil
}

// RemotingAddr returns the TCP address of the remoting listener, or nil
// when it is off.
func (n *Node) RemotingAddr() net.Addr {
	if n.remoting == nil {
		return nil
	}
	return n.remoting.ln.Addr()
}

// serveRemoting runs the remoting listener until Shutdown.
func (n *Node) serveRemoting() {
	rl := n.remoting
	n.log.Info("remoting listener started", "addr", rl.ln.Addr().String(),
		"allow_brokers", n.cfg.RemotingAllowBrokers, "allow_admin", n.cfg.RemotingAllowAdmin,
		"unregister_on_close", !n.cfg.RemotingKeepBrokersOnClose)
	if err := rl.srv.Serve(rl.ln); err != nil && !errors.Is(err, remoting.ErrServerClosed) {
		n.log.Error("remoting listener stopped", "err", err)
	}
}

// shutdownRemoting stops the remoting listener: no new connections, requests
// in progress finish until ctx ends, then every connection closes.
func (n *Node) shutdownRemoting(ctx context.Context) {
	if n.remoting == nil {
		return
	}
	n.remoting.stopping.Store(true)
	// Shutdown marks the server closing before it closes the listener, so
	// Serve's Accept failing then is a normal stop, not an error; closing
	// the listener first made Serve return "use of closed network
	// connection" and the node log it at ERROR on every stop.
	if err := n.remoting.srv.Shutdown(ctx); err != nil {
		n.log.Warn("remoting listener shutdown", "err", err)
	}
	n.remoting.ln.Close() // in case Serve never ran; Shutdown closed it otherwise
}

// closeRemoting releases the listener of a node that never served.
func (n *Node) closeRemoting() {
	if n.remoting != nil {
		n.remoting.ln.Close()
	}
}

// remotingCodes are the request codes a NameServer handles.
var remotingCodes = []int16{
	remoting.PutKVConfig, remoting.GetKVConfig, remoting.DeleteKVConfig, remoting.RegisterBroker,
	remoting.UnregisterBroker, remoting.GetRouteInfoByTopic, remoting.GetBrokerClusterInfo,
	remoting.WipeWritePermOfBroker, remoting.GetAllTopicListFromNameSrv, remoting.DeleteTopicInNameSrv,
	remoting.RegisterTopicInNameSrv, remoting.GetKVListByNamespace, remoting.GetTopicsByCluster,
	remoting.GetSystemTopicListFromNS, remoting.GetUnitTopicList, remoting.GetHasUnitSubTopicList,
	remoting.GetHasUnitSubUnunitTopicList, remoting.UpdateNameSrvConfig, remoting.GetNameSrvConfig,
	remoting.QueryDataVersion, remoting.AddWritePermOfBroker, remoting.GetBrokerMemberGroup, remoting.BrokerHeartbeat,
}

// registerMetrics adds the listener's metrics to the node's registry.
func (rl *remotingListener) registerMetrics() {
	reg := rl.n.stats.reg
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgereg_remoting_requests_total",
		Help: "RocketMQ remoting requests, by request code."}, []string{"code"})
	rl.requests = make(map[int16]prometheus.Counter, len(remotingCodes))
	for _, c := range remotingCodes {
		rl.requests[c] = reqs.WithLabelValues(strconv.Itoa(int(c)))
	}
	rl.otherRequests = reqs.WithLabelValues("other")
	reg.MustRegister(reqs)
	st := func() remoting.ServerStats { return rl.srv.Stats() }
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edgereg_remoting_connections", Help: "Open remoting (TCP) connections."},
			func() float64 { return float64(st().Conns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edgereg_remoting_rejected_connections_total",
			Help: "Remoting connections closed at once for a connection limit."}, func() float64 { return float64(st().Rejected) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edgereg_remoting_bad_frames_total",
			Help: "Remoting connections closed for a frame that did not decode or was too large."}, func() float64 { return float64(st().BadFrames) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edgereg_remoting_buffered_bytes",
			Help: "Request bytes remoting connections hold now (frames arriving or waiting for a handler), bounded in all by the listener's budget."},
			func() float64 { return float64(st().BufferedBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edgereg_remoting_budget_waits_total",
			Help: "Remoting frames that waited because the listener's request memory budget was spent."}, func() float64 { return float64(st().BudgetWaits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edgereg_remoting_write_failures_total",
			Help: "Remoting connections closed because a response could not be written in time (a peer that does not read)."},
			func() float64 { return float64(st().WriteFailures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edgereg_remoting_panics_total",
			Help: "Remoting requests whose handler panicked."}, func() float64 { return float64(st().Panics) }),
	)
}

// ServeRemoting answers one remoting request.
func (rl *remotingListener) ServeRemoting(ctx context.Context, peer net.Addr, req *remoting.Command) *remoting.Command {
	n := rl.n
	if c, ok := rl.requests[req.Code]; ok {
		c.Inc()
	} else {
		rl.otherRequests.Inc()
	}
	// Broker codes use the brokers' own pool, so a flood of remoting reads
	// can never delay a registration or a heartbeat.
	pool := n.workers
	if remotingBrokerCodes[req.Code] {
		pool = n.brokerWorkers
	}
	if !n.acquireWorker(pool) {
		// Shutting down: a closed connection sends the client to its next
		// NameServer at once.
		if ci, ok := remoting.ConnFromContext(ctx); ok {
			ci.Close()
		}
		return nil
	}
	defer func() { <-pool }()
	switch {
	case remotingBrokerCodes[req.Code] && !n.cfg.RemotingAllowBrokers:
		n.stats.denied.WithLabelValues("remoting", strconv.Itoa(int(req.Code))).Inc()
		return remoting.NewResponse(req, remoting.NoPermission,
			fmt.Sprintf("request code %d: broker registration over remoting is off on this node (--remoting-allow-brokers)", req.Code))
	case remotingAdminCodes[req.Code] && !n.cfg.RemotingAllowAdmin:
		n.stats.denied.WithLabelValues("remoting", strconv.Itoa(int(req.Code))).Inc()
		return remoting.NewResponse(req, remoting.NoPermission,
			fmt.Sprintf("request code %d: admin requests over remoting are off on this node (--remoting-allow-admin)", req.Code))
	}
	switch req.Code {
	case remoting.RegisterBroker:
		return rl.registerBroker(ctx, req)
	case remoting.UnregisterBroker:
		return rl.unregisterBroker(req)
	case remoting.QueryDataVersion:
		return rl.queryDataVersion(req)
	case remoting.BrokerHeartbeat:
		return rl.brokerHeartbeat(req)
	case remoting.RegisterTopicInNameSrv:
		return rl.registerTopic(req)
	case remoting.GetRouteInfoByTopic:
		return rl.routeInfo(ctx, peer, req)
	}
	return rl.serveRead(req)
}

// serveRead answers the read and admin codes.
func (rl *remotingListener) serveRead(req *remoting.Command) *remoting.Command {
	reg := rl.n.reg
	switch req.Code {
	case remoting.GetBrokerClusterInfo:
		return withBody(req, clusterInfoBody(reg.ClusterInfo()))
	case remoting.GetAllTopicListFromNameSrv:
		return remoting.TopicListResponse(req, reg.Topics(), "")
	case remoting.GetTopicsByCluster:
		ts, _ := reg.TopicsByCluster(req.Ext("cluster")) // an unknown cluster has no topics
		return remoting.TopicListResponse(req, ts, "")
	case remoting.GetSystemTopicListFromNS:
		return remoting.TopicListResponse(req, reg.SystemTopics(), reg.ClusterInfo().LowestBrokerAddr())
	case remoting.GetUnitTopicList:
		return remoting.TopicListResponse(req, reg.UnitTopics(), "")
	case remoting.GetHasUnitSubTopicList:
		return remoting.TopicListResponse(req, reg.UnitSubTopics(), "")
	case remoting.GetHasUnitSubUnunitTopicList:
		return remoting.TopicListResponse(req, reg.UnitSubNonUnitTopics(), "")
	case remoting.GetBrokerMemberGroup:
		return rl.memberGroup(req)
	case remoting.GetKVConfig, remoting.PutKVConfig, remoting.DeleteKVConfig, remoting.GetKVListByNamespace:
		return rl.kvConfig(req)
	case remoting.WipeWritePermOfBroker, remoting.AddWritePermOfBroker:
		return rl.writePerm(req)
	case remoting.DeleteTopicInNameSrv:
		return rl.deleteTopic(req)
	case remoting.GetNameSrvConfig:
		return withBody(req, []byte(rl.configText()))
	case remoting.UpdateNameSrvConfig:
		return remoting.NewResponse(req, remoting.NoPermission,
			"an edgereg node's configuration is set by its flags and cannot be updated over remoting")
	}
	// As a 5.x NameServer answers (4.9 does not answer at all).
	return remoting.NotSupportedResponse(req)
}

func withBody(req *remoting.Command, body []byte) *remoting.Command {
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}

func systemError(req *remoting.Command, err error) *remoting.Command {
	return remoting.NewResponse(req, remoting.SystemError, err.Error())
}

// testHookRemotingRegisterWait, when set, runs as a remoting registration
// is about to wait for its turn (regMu).
var testHookRemotingRegisterWait func()

// testHookRemotingDecoded, when set, runs once a registration's body is
// decoded, before it is converted.
var testHookRemotingDecoded func()

// remotingDecoders is how many REGISTER_BROKER bodies are decoded at once:
// half the CPUs, at least two, as a gateway decodes them.
func remotingDecoders() int { return max(2, runtime.GOMAXPROCS(0)/2) }

// registerBroker is REGISTER_BROKER: an upsert of the listed topics into
// what the broker's group holds (REMOTING.md §3.1).
func (rl *remotingListener) registerBroker(ctx context.Context, req *remoting.Command) *remoting.Command {
	n := rl.n
	h, err := remoting.ParseRegisterBrokerHeader(req.ExtFields)
	if err != nil {
		return systemError(req, err)
	}
	// As RocketMQ checks it: a non-zero checksum against the body, a missing
	// body's being 0.
	if h.BodyCRC32 != 0 && remoting.BodyCRC32(req.Body) != h.BodyCRC32 {
		return remoting.NewResponse(req, remoting.SystemError, "crc32 not match")
	}
	listed, dv, tableLen, err := rl.registeredTopics(ctx, req, h)
	if err != nil {
		return systemError(req, fmt.Errorf("Failed to decode RegisterBrokerBody: %w", err))
	}
	if testHookRemotingRegisterWait != nil {
		testHookRemotingRegisterWait()
	}
	rl.regMu.Lock()
	defer rl.regMu.Unlock()
	members, _ := n.reg.BrokerMemberGroup(h.ClusterName, h.BrokerName)
	memberAddr, known := members.Addrs[h.BrokerID]
	if !known && tableLen == 1 {
		// 5.x refuses it too: a partial registration must not create a broker.
		return remoting.NewResponse(req, remoting.SystemError, "register broker failed")
	}
	topics, missing := listed, []wire.TopicConfig(nil)
	if mayLead(members, h) {
		topics, missing = upsertTopics(n.reg.GroupTopics(h.BrokerName), listed)
	}
	old, hadLease := n.reg.Lease(h.ClusterName, h.BrokerAddr)
	unchanged := hadLease && known && memberAddr == h.BrokerAddr && old.DataVersion == dv
	res, err := n.reg.Register(registry.Registration{
		Cluster: h.ClusterName, BrokerName: h.BrokerName, BrokerID: h.BrokerID, Addr: h.BrokerAddr,
		HAAddr: h.HAServerAddr, Zone: h.ZoneName, ActingMaster: h.EnableActingMaster, DataVersion: dv,
		Topics: topics, HeartbeatTimeout: h.HeartbeatTimeout,
	})
	switch {
	case errors.Is(err, registry.ErrStaleState):
		// A newer state holds this broker id: 5.x ignores the registration
		// and answers SUCCESS with nothing in it.
		n.warn.remoting.Info("remoting registration ignored", "broker", h.BrokerName, "addr", h.BrokerAddr, "err", err)
		return remoting.NewHeaderResponse(req, remoting.Success, "", nil)
	case err != nil:
		return systemError(req, err)
	}
	switch {
	case unchanged:
	case len(members.Addrs) == 0:
		missing = nil // applied in full, and a new group holds no tombstone
	case len(missing) > 0:
		// A topic an operator deleted from the group keeps a tombstone
		// against full registrations, and this one, applied as full, left
		// it out. But a remoting registration may be partial: a topic
		// created again on the broker after mqadmin deleteTopic comes as
		// one (a partial registration of that topic from 5.x, the whole
		// table from 4.9, a new data version either way), and a NameServer
		// routes every topic a registration lists. Upsert what the group
		// still lacks, as an incremental update, which ends the tombstone.
		missing = lacking(n.reg.GroupTopics(h.BrokerName), missing)
	}
	if len(missing) > 0 {
		// An unchanged data version renews only, but RocketMQ still adds a
		// topic the group has no queue data for: the later chunks of a split
		// registration carry the first chunk's version.
		_, err := n.reg.UpdateTopics(registry.TopicUpdate{Cluster: h.ClusterName, Addr: h.BrokerAddr,
			Epoch: res.Epoch, DataVersion: dv, Upsert: missing})
		if err != nil && !errors.Is(err, registry.ErrNotGroupLeader) {
			return systemError(req, err)
		}
	}
	n.stats.registrations.Inc()
	if !hadLease {
		n.log.Info("broker registered", "cluster", h.ClusterName, "broker", h.BrokerName, "id", h.BrokerID,
			"addr", h.BrokerAddr, "topics", len(topics), "epoch", res.Epoch, "via", "remoting")
	}
	rl.trackConn(ctx, brokerKey{h.ClusterName, h.BrokerAddr}, res.Epoch)

	ext := map[string]string{}
	if res.MasterAddr != "" {
		ext["masterAddr"] = res.MasterAddr
		if res.MasterHAAddr != "" { // a NameServer leaves a null field out
			ext["haServerAddr"] = res.MasterHAAddr
		}
	}
	resp := remoting.NewHeaderResponse(req, remoting.Success, "", ext)
	if table, err := n.kv.List(orderTopicNamespace); err == nil {
		resp.Body = (&remoting.KVTable{Table: table}).Encode()
	}
	return resp
}

// registeredTopics decodes a REGISTER_BROKER body into the topics the
// registry can hold, its data version and how many topics it listed. Only
// those outlive it: a registration waits for its turn (regMu) without its
// body, whose invalid names may be megabytes each (a compressed body
// inflates a few KiB to 16 MiB).
func (rl *remotingListener) registeredTopics(ctx context.Context, req *remoting.Command, h remoting.RegisterBrokerHeader) (
	listed []wire.TopicConfig, dv wire.DataVersion, tableLen int, err error) {
	n := rl.n
	select {
	case rl.decoding <- struct{}{}:
	case <-ctx.Done():
		return nil, wire.DataVersion{}, 0, ctx.Err() // the connection closed: nobody reads an answer
	}
	defer func() { <-rl.decoding }()
	body := &remoting.RegisterBrokerBody{}
	if len(req.Body) > 0 {
		if body, err = remoting.DecodeRegisterBrokerBody(req.Body, h.Compressed, n.cfg.RemotingMaxFrame); err != nil {
			return nil, wire.DataVersion{}, 0, err
		}
	}
	if testHookRemotingDecoded != nil {
		testHookRemotingDecoded()
	}
	listed, skipped := toWireTopics(body.TopicConfigTable)
	if len(skipped) > 0 {
		// A count and a few names: a frame of a million bad names must not
		// become megabytes of log. A name is cut too: it may be megabytes
		// long.
		first := skipped[:min(len(skipped), 5)]
		for i, name := range first {
			if len(name) > wire.MaxTopicNameLen {
				first[i] = fmt.Sprintf("%s... (%d bytes)", name[:wire.MaxTopicNameLen], len(name))
			}
		}
		n.warn.remoting.Warn("remoting registration: topics skipped", "broker", h.BrokerName, "addr", h.BrokerAddr,
			"skipped", len(skipped), "first", first)
	}
	return listed, toWireVersion(body.DataVersion), len(body.TopicConfigTable), nil
}

// mayLead reports whether a registration may carry its group's topics: it
// is the master's, or the group has no other master, so a slave may be its
// prime slave (the registry decides which). Those registrations are
// upserts, like all of RocketMQ's: a prime slave splits its table into
// chunks too. A slave's under a live master skips the union, whose topics
// the registry ignores.
func mayLead(members wire.BrokerData, h remoting.RegisterBrokerHeader) bool {
	master, ok := members.Addrs[wire.MasterID]
	return h.BrokerID == wire.MasterID || h.EnableActingMaster || !ok || master == h.BrokerAddr
}

// toWireTopics converts a broker's topic table, skipping (and naming) what
// the registry cannot hold rather than refusing the whole registration.
func toWireTopics(table map[string]remoting.TopicConfig) (topics []wire.TopicConfig, skipped []string) {
	for _, tc := range table {
		if wire.ValidTopicName(tc.TopicName) != nil || tc.ReadQueueNums < 0 || tc.WriteQueueNums < 0 ||
			tc.Perm < 0 || tc.Perm > 0xFF || tc.TopicSysFlag < 0 {
			skipped = append(skipped, tc.TopicName)
			continue
		}
		topics = append(topics, wire.TopicConfig{Name: tc.TopicName, ReadQueues: uint32(tc.ReadQueueNums),
			WriteQueues: uint32(tc.WriteQueueNums), Perm: uint8(tc.Perm), SysFlag: uint32(tc.TopicSysFlag)})
	}
	return topics, skipped
}

// upsertTopics returns held with listed applied over it, and the listed
// topics held did not have.
func upsertTopics(held, listed []wire.TopicConfig) (union, missing []wire.TopicConfig) {
	byName := make(map[string]int, len(held)+len(listed))
	union = append(make([]wire.TopicConfig, 0, len(held)+len(listed)), held...)
	for i, tc := range union {
		byName[tc.Name] = i
	}
	for _, tc := range listed {
		if i, ok := byName[tc.Name]; ok {
			union[i] = tc
			continue
		}
		byName[tc.Name] = len(union)
		union = append(union, tc)
		missing = append(missing, tc)
	}
	return union, missing
}

// lacking returns the topics of want that held has no entry of.
func lacking(held, want []wire.TopicConfig) []wire.TopicConfig {
	have := make(map[string]struct{}, len(held))
	for _, tc := range held {
		have[tc.Name] = struct{}{}
	}
	var out []wire.TopicConfig
	for _, tc := range want {
		if _, ok := have[tc.Name]; !ok {
			out = append(out, tc)
		}
	}
	return out
}

func toWireVersion(v remoting.DataVersion) wire.DataVersion {
	return wire.DataVersion{State: uint64(v.StateVersion), Timestamp: v.Timestamp, Counter: uint64(v.Counter)}
}

func fromWireVersion(v wire.DataVersion) remoting.DataVersion {
	return remoting.DataVersion{Counter: int64(v.Counter), StateVersion: int64(v.State), Timestamp: v.Timestamp}
}

// trackConn remembers that a broker registered on this connection with this
// epoch, so closing the connection unregisters that registration and no
// later one (a broker that reconnected, or registered over QUIC, keeps its
// new epoch).
func (rl *remotingListener) trackConn(ctx context.Context, key brokerKey, epoch uint64) {
	ci, ok := remoting.ConnFromContext(ctx)
	if !ok {
		return
	}
	rl.connMu.Lock()
	brokers := rl.byConn[ci.ID]
	first := brokers == nil
	if first {
		brokers = map[brokerKey]uint64{}
		rl.byConn[ci.ID] = brokers
	}
	brokers[key] = epoch
	rl.connMu.Unlock()
	if first {
		ci.OnClose(func() { rl.connClosed(ci.ID) })
	}
}

// hasBrokers reports whether a broker registered on the connection.
func (rl *remotingListener) hasBrokers(id uint64) bool {
	rl.connMu.Lock()
	defer rl.connMu.Unlock()
	return len(rl.byConn[id]) > 0
}

// connClosed unregisters what registered on a closed connection, as a
// NameServer's BrokerHousekeepingService does.
func (rl *remotingListener) connClosed(id uint64) {
	rl.connMu.Lock()
	brokers := rl.byConn[id]
	delete(rl.byConn, id)
	rl.connMu.Unlock()
	if rl.stopping.Load() || rl.n.cfg.RemotingKeepBrokersOnClose {
		return
	}
	for key, epoch := range brokers {
		err := rl.n.reg.Unregister(key.cluster, key.addr, epoch)
		switch {
		case err == nil:
			rl.n.log.Info("broker unregistered", "cluster", key.cluster, "addr", key.addr, "epoch", epoch,
				"reason", "its remoting connection closed")
		case errors.Is(err, registry.ErrStaleEpoch), errors.Is(err, registry.ErrLeaseNotFound):
			// Registered again since, or gone already: nothing to undo.
		default:
			rl.n.log.Warn("unregister on remoting close", "cluster", key.cluster, "addr", key.addr, "err", err)
		}
	}
}

// unregisterBroker is UNREGISTER_BROKER: the broker's current registration
// goes, whatever connection or protocol made it.
func (rl *remotingListener) unregisterBroker(req *remoting.Command) *remoting.Command {
	h, err := remoting.ParseBrokerHeader(req.ExtFields)
	if err != nil {
		return systemError(req, err)
	}
	if l, ok := rl.n.reg.Lease(h.ClusterName, h.BrokerAddr); ok {
		if err := rl.n.reg.Unregister(h.ClusterName, h.BrokerAddr, l.Epoch); err == nil {
			rl.n.log.Info("broker unregistered", "cluster", h.ClusterName, "broker", l.BrokerName,
				"addr", h.BrokerAddr, "epoch", l.Epoch, "via", "remoting")
		}
	}
	return remoting.NewResponse(req, remoting.Success, "") // RocketMQ answers 0 for an unknown broker too
}

// renew renews a broker's lease, reporting whether the node holds a
// different data version than v (or none at all).
func (rl *remotingListener) renew(cluster, addr string, v *wire.DataVersion) (held registry.LeaseInfo, known, changed bool) {
	l, ok := rl.n.reg.Lease(cluster, addr)
	if !ok {
		return l, false, true
	}
	if v == nil {
		v = &l.DataVersion
	}
	lease, err := rl.n.reg.Heartbeat(cluster, addr, l.Epoch, *v)
	if err != nil { // registered again or removed meanwhile
		return l, true, l.DataVersion != *v
	}
	rl.n.stats.heartbeats.Inc()
	return l, true, lease.VersionChanged
}

// queryDataVersion is QUERY_DATA_VERSION: a lease renewal that says whether
// the broker should register in full.
func (rl *remotingListener) queryDataVersion(req *remoting.Command) *remoting.Command {
	h, err := remoting.ParseBrokerHeader(req.ExtFields)
	if err != nil {
		return systemError(req, err)
	}
	var v *wire.DataVersion // nil without a body: a NameServer decodes it as null
	if len(req.Body) > 0 {
		dv, err := remoting.DecodeDataVersion(req.Body)
		if err != nil {
			return systemError(req, err)
		}
		w := toWireVersion(dv)
		v = &w
	}
	held, known, changed := rl.renew(h.ClusterName, h.BrokerAddr, v)
	if v == nil {
		changed = true // null equals no version (DataVersion.equals): register in full
	}
	resp := remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{"changed": strconv.FormatBool(changed)})
	if known {
		resp.Body = fromWireVersion(held.DataVersion).AppendJSON(nil)
	}
	return resp
}

// brokerHeartbeat is BROKER_HEARTBEAT (5.x, oneway): a lease renewal.
func (rl *remotingListener) brokerHeartbeat(req *remoting.Command) *remoting.Command {
	p := req.ExtFields
	if p["clusterName"] == "" || p["brokerAddr"] == "" {
		return systemError(req, errors.New("the request header field clusterName or brokerAddr is null"))
	}
	rl.renew(p["clusterName"], p["brokerAddr"], nil)
	return remoting.NewResponse(req, remoting.Success, "")
}

// registerTopic is REGISTER_TOPIC_IN_NAMESRV (5.x): the body's queue data
// upserted into groups that all exist, through each group's leader.
func (rl *remotingListener) registerTopic(req *remoting.Command) *remoting.Command {
	topic := req.Ext("topic")
	if err := wire.ValidTopicName(topic); err != nil {
		return systemError(req, err)
	}
	if len(req.Body) == 0 {
		return remoting.NewResponse(req, remoting.Success, "")
	}
	route, err := remoting.DecodeTopicRouteData(req.Body)
	if err != nil {
		return systemError(req, err)
	}
	ci := rl.n.reg.ClusterInfo()
	for _, qd := range route.QueueDatas {
		if _, ok := ci.Groups[qd.BrokerName]; !ok {
			rl.n.warn.remoting.Warn("remoting topic registration names an unknown broker group", "topic", topic, "broker", qd.BrokerName)
			return remoting.NewResponse(req, remoting.Success, "") // as RocketMQ: ignored, not refused
		}
	}
	for _, qd := range route.QueueDatas {
		g := ci.Groups[qd.BrokerName]
		addr, ok := leaderAddr(g)
		if !ok {
			continue
		}
		l, ok := rl.n.reg.Lease(g.Cluster, addr)
		if !ok {
			continue
		}
		tc, skipped := toWireTopics(map[string]remoting.TopicConfig{topic: {TopicName: topic,
			ReadQueueNums: qd.ReadQueueNums, WriteQueueNums: qd.WriteQueueNums, Perm: qd.Perm, TopicSysFlag: qd.TopicSysFlag}})
		if len(skipped) > 0 {
			return systemError(req, fmt.Errorf("queue data of %s for %s is out of range", topic, qd.BrokerName))
		}
		if _, err := rl.n.reg.UpdateTopics(registry.TopicUpdate{Cluster: g.Cluster, Addr: addr, Epoch: l.Epoch,
			DataVersion: l.DataVersion, Upsert: tc}); err != nil && !errors.Is(err, registry.ErrStaleEpoch) {
			return systemError(req, err)
		}
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// leaderAddr is the address of a group's lowest broker id: its master, or
// the broker that may act for it.
func leaderAddr(g wire.BrokerData) (string, bool) {
	best, addr, found := int64(0), "", false
	for id, a := range g.Addrs {
		if !found || id < best {
			best, addr, found = id, a, true
		}
	}
	return addr, found
}

// routeInfo is GET_ROUTEINFO_BY_TOPIC, filtered by the route policy as a
// QUIC reader's is.
func (rl *remotingListener) routeInfo(ctx context.Context, peer net.Addr, req *remoting.Command) *remoting.Command {
	n := rl.n
	topic := req.Ext("topic")
	if wire.ValidTopicName(topic) != nil {
		// No broker can hold it, warming up or not. A NameServer finds
		// nothing for an empty or missing topic either (its lookup of null
		// fails and is caught): TOPIC_NOT_EXIST, not SYSTEM_ERROR.
		n.stats.routeReads[wire.StatusNotFound].Inc()
		return remoting.TopicNotExistResponse(req, req.ExtText("topic"))
	}
	e, err := n.reg.Route(topic)
	if err != nil {
		if n.WarmingUp() {
			// Never TOPIC_NOT_EXIST or SYSTEM_ERROR while warming up: both
			// send a producer to the TBW102 fallback (rocketmq#5322). A
			// closed connection is a transport error to the client: it keeps
			// its cached route and asks its next NameServer. A broker's
			// connection stays (closing it would fail its registration and,
			// by default, unregister it): its lookup just gets no answer.
			n.stats.routeReads[wire.StatusWarmingUp].Inc()
			if ci, ok := remoting.ConnFromContext(ctx); ok && !rl.hasBrokers(ci.ID) {
				ci.Close()
			}
			return nil
		}
		n.stats.routeReads[wire.StatusNotFound].Inc()
		return remoting.TopicNotExistResponse(req, topic)
	}
	body, version, err := n.policies.filter(context.Background(), hostOf(peer.String()), wire.ClientAttrs{}, topic, e.Version, e.Body)
	if err != nil {
		// The route policy failed closed: no answer, as while warming up
		// (SYSTEM_ERROR would send a producer to TBW102).
		n.stats.routeReads[wire.StatusPolicyFailed].Inc()
		return nil
	}
	json, err := rl.routes.body(topic, version, body, remoting.RouteDialect(req))
	if err != nil {
		return systemError(req, err)
	}
	n.stats.routeReads[wire.StatusOK].Inc()
	return withBody(req, json)
}

// routeBodies caches the JSON route body of each topic and dialect for the
// route version it was made from, so an unchanged route is not decoded and
// encoded again on every read (the QUIC side keeps its CBOR likewise). A
// route policy that shows clients different routes gives them different
// versions; the cache then holds the last one asked for.
type routeBodies struct {
	mu sync.Mutex
	m  map[routeBodyKey]routeBody
}

type routeBodyKey struct {
	topic   string
	dialect remoting.Dialect
}

type routeBody struct {
	version uint64
	json    []byte // shared and never modified
}

// maxRouteBodies bounds the cache; past it the cache starts over, so topics
// that came and went cannot grow it without bound.
const maxRouteBodies = 100_000

func (c *routeBodies) body(topic string, version uint64, cbor []byte, d remoting.Dialect) ([]byte, error) {
	key := routeBodyKey{topic, d}
	c.mu.Lock()
	rb, ok := c.m[key]
	c.mu.Unlock()
	if ok && rb.version == version {
		return rb.json, nil
	}
	var route wire.Route
	if err := wire.Unmarshal(cbor, &route); err != nil {
		return nil, fmt.Errorf("route of %s does not decode: %w", topic, err)
	}
	json := toTopicRouteData(&route).Encode(d)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxRouteBodies {
		c.m = make(map[routeBodyKey]routeBody)
	}
	c.m[key] = routeBody{version: version, json: json}
	c.mu.Unlock()
	return json, nil
}

func toBrokerData(b wire.BrokerData) remoting.BrokerData {
	addrs := make(map[int64]string, len(b.Addrs))
	for id, a := range b.Addrs {
		addrs[id] = a
	}
	return remoting.BrokerData{Cluster: b.Cluster, BrokerName: b.Name, BrokerAddrs: addrs, ZoneName: b.Zone}
}

func toTopicRouteData(r *wire.Route) *remoting.TopicRouteData {
	out := &remoting.TopicRouteData{
		QueueDatas:  make([]remoting.QueueData, len(r.Queues)),
		BrokerDatas: make([]remoting.BrokerData, len(r.Brokers)),
	}
	for i, q := range r.Queues {
		out.QueueDatas[i] = remoting.QueueData{BrokerName: q.BrokerName, ReadQueueNums: remoting.QueueNums(q.ReadQueues),
			WriteQueueNums: remoting.QueueNums(q.WriteQueues), Perm: int32(q.Perm), TopicSysFlag: int32(q.SysFlag)}
	}
	for i, b := range r.Brokers {
		out.BrokerDatas[i] = toBrokerData(b)
	}
	return out
}

func clusterInfoBody(ci wire.ClusterInfo) []byte {
	out := remoting.ClusterInfo{BrokerAddrTable: make(map[string]remoting.BrokerData, len(ci.Groups)),
		ClusterAddrTable: make(map[string][]string, len(ci.Clusters))}
	for name, g := range ci.Groups {
		out.BrokerAddrTable[name] = toBrokerData(g)
	}
	for c, groups := range ci.Clusters {
		out.ClusterAddrTable[c] = groups
	}
	return out.Encode(remoting.Legacy) // as RocketMQ always writes it
}

// memberGroup is GET_BROKER_MEMBER_GROUP (5.x), with the NameServer's quirk
// of a remark on success; an unknown group has no members.
func (rl *remotingListener) memberGroup(req *remoting.Command) *remoting.Command {
	cluster, name := req.Ext("clusterName"), req.Ext("brokerName")
	g := remoting.BrokerMemberGroup{Cluster: cluster, BrokerName: name, BrokerAddrs: map[int64]string{}}
	if bd, err := rl.n.reg.BrokerMemberGroup(cluster, name); err == nil {
		g.BrokerAddrs = toBrokerData(bd).BrokerAddrs
	}
	resp := remoting.NewResponse(req, remoting.Success, "not set any response code")
	resp.Body = g.AppendJSON(nil, remoting.Legacy)
	return resp
}

// kvConfig answers the KV codes against the same store as QUIC.
func (rl *remotingListener) kvConfig(req *remoting.Command) *remoting.Command {
	store := rl.n.kv
	ns, key := req.Ext("namespace"), req.Ext("key")
	switch req.Code {
	case remoting.GetKVConfig:
		v, err := store.Get(ns, key)
		if err != nil {
			return remoting.NewHeaderResponse(req, remoting.QueryNotFound,
				"No config item, Namespace: "+req.ExtText("namespace")+" Key: "+req.ExtText("key"), nil)
		}
		return remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{"value": v})
	case remoting.GetKVListByNamespace:
		table, err := store.List(ns)
		if err != nil {
			return remoting.NewResponse(req, remoting.QueryNotFound, "No config item, Namespace: "+req.ExtText("namespace"))
		}
		return withBody(req, (&remoting.KVTable{Table: table}).Encode())
	case remoting.PutKVConfig:
		if err := store.Put(ns, key, req.Ext("value")); err != nil {
			return systemError(req, err)
		}
		rl.n.log.Info("kv config put", "namespace", ns, "key", key, "via", "remoting")
	case remoting.DeleteKVConfig:
		if err := store.Delete(ns, key); err != nil && !errors.Is(err, kv.ErrNotFound) {
			return systemError(req, err)
		}
		rl.n.log.Info("kv config deleted", "namespace", ns, "key", key, "via", "remoting")
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// writePerm is WIPE_/ADD_WRITE_PERM_OF_BROKER.
func (rl *remotingListener) writePerm(req *remoting.Command) *remoting.Command {
	name := req.Ext("brokerName")
	add := req.Code == remoting.AddWritePermOfBroker
	extKey, action := "wipeTopicCount", "wipe"
	if add {
		extKey, action = "addTopicCount", "add"
	}
	pc, err := rl.n.reg.EditWritePerm(name, add)
	if err != nil && !errors.Is(err, registry.ErrBrokerGroupNotFound) {
		return systemError(req, err)
	}
	rl.n.log.Info("write permission changed", "broker", name, "action", action, "topics", pc.Topics, "changed", pc.Changed, "via", "remoting")
	// A NameServer counts every topic of the group it visited, changed or
	// not (operateWritePermOfBroker); mqadmin prints that count.
	return remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{extKey: strconv.Itoa(pc.Topics)})
}

// deleteTopic is DELETE_TOPIC_IN_NAMESRV: everywhere, or only in the groups
// of clusterName.
func (rl *remotingListener) deleteTopic(req *remoting.Command) *remoting.Command {
	topic := req.Ext("topic")
	var clusters []string
	if c := req.Ext("clusterName"); c != "" {
		clusters = []string{c}
	}
	err := rl.n.reg.DeleteTopic(topic, clusters...)
	if err != nil && !errors.Is(err, registry.ErrTopicNotFound) && !errors.Is(err, registry.ErrClusterNotFound) {
		return systemError(req, err)
	}
	rl.n.log.Info("topic deleted", "topic", topic, "clusters", clusters, "via", "remoting")
	return remoting.NewResponse(req, remoting.Success, "")
}

// configText is GET_NAMESRV_CONFIG: the NameServer settings the node
// behaves as, in Java properties form.
func (rl *remotingListener) configText() string {
	cfg := rl.n.cfg
	lines := []string{
		"edgeregNodeId=" + rl.n.id,
		"edgeregVersion=" + Version,
		"enableAllTopicList=true",
		"enableTopicList=true",
		"orderMessageEnable=false",
		"returnOrderTopicConfigToBroker=true",
		"deleteTopicWithBrokerRegistration=false",
		"supportActingMaster=true",
		"scanNotActiveBrokerInterval=" + strconv.FormatInt(cfg.ScanInterval.Milliseconds(), 10),
		"brokerNotActiveTimeoutMillis=" + strconv.FormatInt(cfg.ExpiryThreshold.Milliseconds(), 10),
		"waitSecondsForService=" + strconv.FormatInt(int64(max(cfg.WarmUp, 0)/time.Second), 10),
	}
	return strings.Join(lines, "\n") + "\n"
}
