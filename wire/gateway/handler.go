package gateway

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/remoting"
)

// maxInflatedRegister caps a compressed REGISTER_BROKER body once inflated.
const maxInflatedRegister = remoting.DefaultMaxFrame

// minBrokerTimeout is the shortest heartbeat timeout a broker may ask for;
// a shorter one (or none) means BrokerTimeout.
const minBrokerTimeout = 3 * time.Second

// refusedRemark explains the codes the gateway does not relay.
const refusedRemark = "edgereg gateway: administrative and KV requests are not relayed; use the edgereg CLI with an operator credential against the nodes"

// ServeRemoting answers one remoting request (it is a remoting.Handler). It
// returns nil for oneway requests and when it withholds an answer (no node
// answered and nothing is cached).
func (g *Gateway) ServeRemoting(ctx context.Context, peer net.Addr, req *remoting.Command) *remoting.Command {
	resp := g.serve(ctx, req)
	switch {
	case req.IsOneway():
		g.metrics.requestUnanswered(req.Code)
		return nil
	case resp == nil:
		g.metrics.requestUnanswered(req.Code)
		g.metrics.withheld.WithLabelValues(codeLabel(req.Code)).Inc()
		return nil
	}
	g.metrics.request(req.Code, resp.Code)
	return resp
}

func (g *Gateway) serve(ctx context.Context, req *remoting.Command) *remoting.Command {
	switch req.Code {
	case remoting.GetRouteInfoByTopic:
		return g.serveRoute(ctx, req)
	case remoting.RegisterBroker:
		return g.serveRegister(ctx, req)
	case remoting.QueryDataVersion:
		return g.serveQueryDataVersion(req)
	case remoting.BrokerHeartbeat:
		if h, err := remoting.ParseBrokerHeader(req.ExtFields); err == nil {
			g.brokers.seen(brokerKey{h.ClusterName, h.BrokerAddr})
		}
		return remoting.NewResponse(req, remoting.Success, "")
	case remoting.UnregisterBroker:
		return g.serveUnregister(req)
	case remoting.RegisterTopicInNameSrv:
		return g.serveRegisterTopic(ctx, req)
	case remoting.GetBrokerClusterInfo:
		return g.serveClusterInfo(ctx, req)
	case remoting.GetAllTopicListFromNameSrv:
		return g.serveTopics(ctx, req, wire.TopicsAll, "")
	case remoting.GetTopicsByCluster:
		cluster := req.Ext("cluster")
		if cluster == "" {
			// A NameServer reads the missing field as null and finds no
			// topics for it; no node needs asking.
			return remoting.TopicListResponse(req, nil, "")
		}
		return g.serveTopics(ctx, req, wire.TopicsByCluster, cluster)
	case remoting.GetSystemTopicListFromNS:
		return g.serveSystemTopics(ctx, req)
	case remoting.GetUnitTopicList:
		return g.serveTopics(ctx, req, wire.TopicsUnit, "")
	case remoting.GetHasUnitSubTopicList:
		return g.serveTopics(ctx, req, wire.TopicsUnitSub, "")
	case remoting.GetHasUnitSubUnunitTopicList:
		return g.serveTopics(ctx, req, wire.TopicsUnitSubWithoutUnit, "")
	case remoting.GetBrokerMemberGroup:
		return g.serveMemberGroup(ctx, req)
	case remoting.PutKVConfig, remoting.GetKVConfig, remoting.DeleteKVConfig, remoting.GetKVListByNamespace,
		remoting.WipeWritePermOfBroker, remoting.AddWritePermOfBroker, remoting.DeleteTopicInNameSrv,
		remoting.UpdateNameSrvConfig, remoting.GetNameSrvConfig:
		return remoting.NewResponse(req, remoting.NoPermission, refusedRemark)
	}
	return remoting.NotSupportedResponse(req)
}

// serveRoute answers GET_ROUTEINFO_BY_TOPIC from the route cache.
func (g *Gateway) serveRoute(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic := req.Ext("topic")
	if wire.ValidTopicName(topic) != nil {
		// No broker can hold such a topic: a NameServer finds none either.
		g.metrics.routeReads.WithLabelValues("not_exist").Inc()
		return remoting.TopicNotExistResponse(req, req.ExtText("topic"))
	}
	dialect := remoting.RouteDialect(req)
	standard := dialect == remoting.Standard
	a := g.cache.get(ctx, topic, standard)
	switch a.outcome {
	case routeNotExist:
		g.metrics.routeReads.WithLabelValues("not_exist").Inc()
		return remoting.TopicNotExistResponse(req, topic)
	case routeUnavailable:
		g.metrics.routeReads.WithLabelValues("unavailable").Inc()
		g.peerLog.Warn("no node could route a topic the gateway has not cached: withholding the answer", "topic", topic, "err", a.err)
		return nil
	}
	if a.cached {
		g.metrics.routeReads.WithLabelValues("hit").Inc()
	} else {
		g.metrics.routeReads.WithLabelValues("miss").Inc()
	}
	body := a.body
	if body == nil {
		body = topicRouteData(a.route).Encode(dialect)
		g.cache.keepBody(topic, a.version, standard, body)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = body
	return resp
}

// topicRouteData translates an edgereg route into RocketMQ's.
func topicRouteData(r wire.Route) *remoting.TopicRouteData {
	t := &remoting.TopicRouteData{
		QueueDatas:        make([]remoting.QueueData, len(r.Queues)),
		BrokerDatas:       make([]remoting.BrokerData, len(r.Brokers)),
		FilterServerTable: map[string][]string{},
	}
	for i, q := range r.Queues {
		t.QueueDatas[i] = remoting.QueueData{BrokerName: q.BrokerName, ReadQueueNums: remoting.QueueNums(q.ReadQueues),
			WriteQueueNums: remoting.QueueNums(q.WriteQueues), Perm: int32(q.Perm), TopicSysFlag: int32(q.SysFlag)}
	}
	for i, b := range r.Brokers {
		t.BrokerDatas[i] = brokerData(b)
	}
	return t
}

func brokerData(b wire.BrokerData) remoting.BrokerData {
	addrs := b.Addrs
	if addrs == nil {
		addrs = map[int64]string{} // never absent: rocketmq-client-go panics on it
	}
	return remoting.BrokerData{Cluster: b.Cluster, BrokerName: b.Name, BrokerAddrs: addrs, ZoneName: b.Zone}
}

// serveRegister applies a REGISTER_BROKER.
func (g *Gateway) serveRegister(ctx context.Context, req *remoting.Command) *remoting.Command {
	h, err := remoting.ParseRegisterBrokerHeader(req.ExtFields)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	if h.BodyCRC32 != 0 && h.BodyCRC32 != remoting.BodyCRC32(req.Body) {
		return remoting.NewResponse(req, remoting.SystemError, "crc32 not match")
	}
	select {
	case g.decoding <- struct{}{}:
	case <-ctx.Done():
		return nil // the connection closed while waiting: nobody reads an answer
	}
	// No body is an empty table at data version 0, as a NameServer (and a
	// node's listener) reads it.
	body := &remoting.RegisterBrokerBody{}
	if len(req.Body) > 0 {
		body, err = remoting.DecodeRegisterBrokerBody(req.Body, h.Compressed, maxInflatedRegister)
	}
	<-g.decoding
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	r := &registration{
		id: broker.Identity{Cluster: h.ClusterName, BrokerName: h.BrokerName, BrokerID: h.BrokerID, Addr: h.BrokerAddr,
			HAAddr: h.HAServerAddr, Zone: h.ZoneName, ActingMaster: h.EnableActingMaster,
			StateVersion: uint64(max(body.DataVersion.StateVersion, 0))},
		version: rmqVersion(body.DataVersion),
	}
	if ci, ok := remoting.ConnFromContext(ctx); ok {
		r.conn = ci
	}
	if h.HeartbeatTimeout >= minBrokerTimeout {
		r.timeout = h.HeartbeatTimeout
	}
	for _, tc := range body.TopicConfigTable {
		r.topics = append(r.topics, wire.TopicConfig{Name: tc.TopicName, ReadQueues: uint32(max(tc.ReadQueueNums, 0)),
			WriteQueues: uint32(max(tc.WriteQueueNums, 0)), Perm: uint8(tc.Perm & 0xF), SysFlag: uint32(max(tc.TopicSysFlag, 0))})
	}
	master, masterHA, err := g.brokers.register(ctx, r)
	if err != nil {
		if !errors.Is(err, errPartialFirst) {
			g.peerLog.Warn("broker registration refused", "broker", h.BrokerName, "addr", h.BrokerAddr, "err", err)
		}
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	ext := map[string]string{}
	if h.BrokerID != wire.MasterID && master != "" {
		ext["masterAddr"] = master
		if masterHA != "" { // a NameServer leaves a null field out
			ext["haServerAddr"] = masterHA
		}
	}
	return remoting.NewHeaderResponse(req, remoting.Success, "", ext)
}

// serveRegisterTopic is REGISTER_TOPIC_IN_NAMESRV (5.x brokers with
// enableSingleTopicRegister send it for a created topic instead of a
// partial REGISTER_BROKER): the queue data is upserted into the registrar
// of each group it names, if the gateway serves every one of them; else it
// is ignored, as a NameServer ignores queue data of groups it does not know.
// It is answered once the nodes applied it, as REGISTER_BROKER is.
func (g *Gateway) serveRegisterTopic(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic := req.Ext("topic")
	if err := wire.ValidTopicName(topic); err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	if len(req.Body) == 0 {
		return remoting.NewResponse(req, remoting.Success, "")
	}
	route, err := remoting.DecodeTopicRouteData(req.Body)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	upserts := make(map[string]wire.TopicConfig, len(route.QueueDatas))
	for _, qd := range route.QueueDatas {
		upserts[qd.BrokerName] = wire.TopicConfig{Name: topic, ReadQueues: uint32(max(qd.ReadQueueNums, 0)),
			WriteQueues: uint32(max(qd.WriteQueueNums, 0)), Perm: uint8(qd.Perm & 0xF), SysFlag: uint32(max(qd.TopicSysFlag, 0))}
	}
	if err := g.brokers.upsertGroupTopics(ctx, upserts); err != nil {
		if !errors.Is(err, errUnknownGroup) {
			return remoting.NewResponse(req, remoting.SystemError, err.Error())
		}
		g.peerLog.Info("REGISTER_TOPIC_IN_NAMESRV names a broker group the gateway does not serve: ignored", "topic", topic, "err", err)
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// serveQueryDataVersion answers QUERY_DATA_VERSION locally: it renews the
// broker's liveness with the gateway and says whether the data version
// differs from the one last registered.
func (g *Gateway) serveQueryDataVersion(req *remoting.Command) *remoting.Command {
	h, err := remoting.ParseBrokerHeader(req.ExtFields)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	held, ok := g.brokers.seen(brokerKey{h.ClusterName, h.BrokerAddr})
	// No body is a null DataVersion to a NameServer, which equals no
	// version held: changed, so the broker registers in full.
	changed := !ok || len(req.Body) == 0
	if !changed {
		v, err := remoting.DecodeDataVersion(req.Body)
		changed = err != nil || rmqVersion(v) != held
	}
	resp := remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{"changed": strconv.FormatBool(changed)})
	if ok {
		resp.Body = remoting.DataVersion(held).AppendJSON(nil)
	}
	return resp
}

func (g *Gateway) serveUnregister(req *remoting.Command) *remoting.Command {
	h, err := remoting.ParseBrokerHeader(req.ExtFields)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, err.Error())
	}
	// Bounded by the gateway's life, not the connection's: a broker
	// shutting down waits 3 s for the answer and then closes its
	// connection, and a NameServer applies an unregister it received
	// whatever becomes of the connection. Abandoned with it, the broker
	// stayed routed on every node until its lease expired.
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.RequestTimeout)
	defer cancel()
	if err := g.brokers.unregister(ctx, brokerKey{h.ClusterName, h.BrokerAddr}, "UNREGISTER_BROKER"); err != nil {
		// Nodes that missed it expire the lease by themselves.
		g.peerLog.Warn("unregister did not reach every node", "broker", h.BrokerName, "addr", h.BrokerAddr, "err", err)
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

// noSuchName reports whether a node's answer to a lookup by name (a
// cluster's topics, a member group) means there is nothing by that name:
// it knows none, or refuses the name as one no broker can have (too long,
// a control character). A NameServer finds nothing for either, and a
// node's listener answers so; neither is SYSTEM_ERROR.
func noSuchName(err error) bool {
	return errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrBadRequest)
}

// unreachable answers a polled read that no node answered.
func unreachable(req *remoting.Command, err error) *remoting.Command {
	return remoting.NewResponse(req, remoting.SystemError, "edgereg gateway: "+err.Error())
}

func (g *Gateway) pollResult(kind string, cached bool) {
	result := "miss"
	if cached {
		result = "hit"
	}
	g.metrics.polls.WithLabelValues(kind, result).Inc()
}

func (g *Gateway) serveClusterInfo(ctx context.Context, req *remoting.Command) *remoting.Command {
	ci, cached, err := g.cluster.get(ctx, "")
	if err != nil {
		return unreachable(req, err)
	}
	g.pollResult("cluster_info", cached)
	out := &remoting.ClusterInfo{BrokerAddrTable: make(map[string]remoting.BrokerData, len(ci.Groups)),
		ClusterAddrTable: ci.Clusters}
	if out.ClusterAddrTable == nil {
		out.ClusterAddrTable = map[string][]string{}
	}
	for name, bd := range ci.Groups {
		out.BrokerAddrTable[name] = brokerData(bd)
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = out.Encode(remoting.Legacy)
	return resp
}

func (g *Gateway) serveTopics(ctx context.Context, req *remoting.Command, kind wire.TopicsKind, cluster string) *remoting.Command {
	list, err := g.topicList(ctx, kind, cluster)
	if err != nil {
		return unreachable(req, err)
	}
	return remoting.TopicListResponse(req, list, "")
}

// topicList reads a topic list from the cache or the nodes.
func (g *Gateway) topicList(ctx context.Context, kind wire.TopicsKind, cluster string) ([]string, error) {
	list, cached, err := g.topics.get(ctx, topicsKey(kind, cluster))
	switch {
	case noSuchName(err):
		list = nil // an unknown cluster has no topics, as a NameServer answers
	case err != nil:
		return nil, err
	}
	g.pollResult("topics", cached)
	return list, nil
}

// serveSystemTopics is GET_SYSTEM_TOPIC_LIST_FROM_NS: the list, and, as a
// NameServer adds, the address of some broker (Java admin tools ask it for
// its own system topics), from the cached cluster info. Without cluster
// info the list goes alone.
func (g *Gateway) serveSystemTopics(ctx context.Context, req *remoting.Command) *remoting.Command {
	list, err := g.topicList(ctx, wire.TopicsSystem, "")
	if err != nil {
		return unreachable(req, err)
	}
	addr := ""
	if ci, cached, err := g.cluster.get(ctx, ""); err == nil {
		g.pollResult("cluster_info", cached)
		addr = ci.LowestBrokerAddr()
	}
	return remoting.TopicListResponse(req, list, addr)
}

func (g *Gateway) serveMemberGroup(ctx context.Context, req *remoting.Command) *remoting.Command {
	cluster, name := req.Ext("clusterName"), req.Ext("brokerName")
	var bd wire.BrokerData
	var cached, asked bool
	var err error
	if cluster == "" || name == "" {
		// No members, as a node's listener answers a missing field (and a
		// NameServer a missing broker name); no node needs asking, and
		// every node refuses an empty name.
		err = wire.ErrNotFound
	} else {
		bd, cached, err = g.members.get(ctx, joinKey(cluster, name))
		asked = true
	}
	var mg remoting.BrokerMemberGroup
	switch {
	case noSuchName(err):
		mg = remoting.BrokerMemberGroup{Cluster: cluster, BrokerName: name, BrokerAddrs: map[int64]string{}}
	case err != nil:
		return unreachable(req, err)
	default:
		b := brokerData(bd)
		mg = remoting.BrokerMemberGroup{Cluster: b.Cluster, BrokerName: b.BrokerName, BrokerAddrs: b.BrokerAddrs}
	}
	if asked {
		g.pollResult("member_group", cached)
	}
	// A 5.x NameServer answers this code with SUCCESS and this remark.
	resp := remoting.NewResponse(req, remoting.Success, "not set any response code")
	resp.Body = mg.AppendJSON(nil, remoting.Legacy)
	return resp
}
