//go:build rocketmq

package gatewaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/lossyudp"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

func TestMain(m *testing.M) {
	if os.Getenv("EDGEREG_TEST_LOG") == "" {
		rlog.SetLogLevel("fatal")
	}
	os.Exit(m.Run())
}

// stubBroker stands in for a RocketMQ broker on loopback: it answers what
// producers and consumers send a broker, and records which topics were
// sent to and pulled from, so a test knows a client found it by its route.
type stubBroker struct {
	addr string

	mu      sync.Mutex
	sends   map[string]int      // messages by topic
	pulls   map[string]int      // pull requests by topic
	deletes map[string]int      // DELETE_TOPIC_IN_BROKER by topic
	clients map[string][]string // client ids by consumer group, from heartbeats
}

func startStubBroker(t *testing.T) *stubBroker {
	t.Helper()
	b := &stubBroker{sends: map[string]int{}, pulls: map[string]int{}, deletes: map[string]int{}, clients: map[string][]string{}}
	b.addr = serve(t, remoting.HandlerFunc(b.serve))
	return b
}

// Broker request codes (RocketMQ RequestCode.java) the stub answers.
const (
	reqSendMessage       = 10
	reqPullMessage       = 11
	reqHeartbeat         = 34
	reqConsumerList      = 38
	reqDeleteTopic       = 215
	reqSendMessageV2     = 310
	reqSendBatchMessage  = 320
	respPullNotFound     = 19
	stubPullHoldDuration = 300 * time.Millisecond
)

func (b *stubBroker) serve(ctx context.Context, _ net.Addr, req *remoting.Command) *remoting.Command {
	switch req.Code {
	case reqSendMessage, reqSendMessageV2, reqSendBatchMessage:
		topic, queue := req.Ext("topic"), req.Ext("queueId")
		if req.Code == reqSendMessageV2 {
			topic, queue = req.Ext("b"), req.Ext("e")
		}
		b.mu.Lock()
		b.sends[topic]++
		b.mu.Unlock()
		return remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{
			"msgId": "7F00000100002A9F0000000000000000", "queueId": queue, "queueOffset": "0"})
	case reqDeleteTopic:
		b.mu.Lock()
		b.deletes[req.Ext("topic")]++
		b.mu.Unlock()
	case reqPullMessage:
		b.mu.Lock()
		b.pulls[req.Ext("topic")]++
		b.mu.Unlock()
		// Hold the pull a little, as a broker's long poll does, so the
		// consumer does not spin, then say there is nothing new.
		select {
		case <-ctx.Done():
		case <-time.After(stubPullHoldDuration):
		}
		return remoting.NewHeaderResponse(req, respPullNotFound, "no new message", map[string]string{
			"nextBeginOffset": "0", "minOffset": "0", "maxOffset": "0", "suggestWhichBrokerId": "0"})
	case reqHeartbeat:
		var hb struct {
			ClientID  string `json:"clientID"`
			Consumers []struct {
				Group string `json:"groupName"`
			} `json:"consumerDataSet"`
		}
		if json.Unmarshal(req.Body, &hb) == nil {
			b.mu.Lock()
			for _, c := range hb.Consumers {
				if !slices.Contains(b.clients[c.Group], hb.ClientID) {
					b.clients[c.Group] = append(b.clients[c.Group], hb.ClientID)
				}
			}
			b.mu.Unlock()
		}
	case reqConsumerList:
		b.mu.Lock()
		ids := slices.Clone(b.clients[req.Ext("consumerGroup")])
		b.mu.Unlock()
		body, _ := json.Marshal(map[string][]string{"consumerIdList": ids})
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.Body = body
		return resp
	}
	// Offsets and everything else: success, offset 0.
	return remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{"offset": "0"})
}

func (b *stubBroker) sent(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sends[topic]
}

func (b *stubBroker) deleted(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deletes[topic]
}

func (b *stubBroker) pulled(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pulls[topic]
}

// serve runs a remoting server on loopback until the test ends.
func serve(t *testing.T, h remoting.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &remoting.Server{Handler: h, Logger: nodetest.Logger()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// edgeSite is three nodes, each behind its own UDP proxy (the WAN), and a
// gateway in front of them.
type edgeSite struct {
	ca      *nodetest.CA
	nodes   []*nodetest.Node
	proxies []*lossyudp.Proxy
	gw      *gateway.Gateway
	addr    string // the gateway's remoting address: the clients' namesrvAddr
}

func startEdgeSite(t *testing.T) *edgeSite {
	t.Helper()
	s := &edgeSite{ca: nodetest.NewCA(t)}
	var addrs []string
	for range 3 {
		tn := nodetest.Start(t, s.ca, nil)
		p, err := lossyudp.New(tn.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		s.nodes, s.proxies = append(s.nodes, tn), append(s.proxies, p)
		addrs = append(addrs, p.Addr())
	}
	gw, err := gateway.New(gateway.Config{
		Nodes:           nodes.Static(addrs...),
		TLS:             s.ca.TLS(t, pki.RoleBroker, "edge-gateway"),
		ProbeInterval:   200 * time.Millisecond,
		RequestTimeout:  1500 * time.Millisecond,
		UpstreamTimeout: 5 * time.Second,
		Backoff:         nodes.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond},
		Logger:          nodetest.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	s.gw = gw
	s.addr = serve(t, gw)
	return s
}

// registerBroker registers a master holding topics through the gateway, as
// a 5.x broker does: REGISTER_BROKER over remoting, at data version
// counter (the same counter is the same version, as a broker's periodic
// registrations carry it).
func (s *edgeSite) registerBroker(t *testing.T, name, addr string, counter int64, topics ...string) {
	t.Helper()
	body := &remoting.RegisterBrokerBody{
		DataVersion:      remoting.DataVersion{Counter: counter, Timestamp: 1735689600000 + counter},
		TopicConfigTable: map[string]remoting.TopicConfig{},
	}
	for _, topic := range append(topics, "TBW102", "SELF_TEST_TOPIC", name) {
		body.TopicConfigTable[topic] = remoting.TopicConfig{TopicName: topic, ReadQueueNums: 4, WriteQueueNums: 4,
			Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	raw := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: name, BrokerAddr: addr, ClusterName: "DefaultCluster",
		BodyCRC32: remoting.BodyCRC32(raw)}
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), raw)
	if _, err := req.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := remoting.ReadCommand(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != remoting.Success {
		t.Fatalf("register %s: %d %q", name, resp.Code, resp.Remark)
	}
}

// onEveryNode waits until every node, asked directly over QUIC, routes
// topic to a broker group named group.
func (s *edgeSite) onEveryNode(t *testing.T, topic, group string) {
	t.Helper()
	for _, tn := range s.nodes {
		c, err := client.Dial(nodetest.Context(t), tn.Addr(), client.Config{TLS: s.ca.TLS(t, pki.RoleOperator, "op")})
		if err != nil {
			t.Fatal(err)
		}
		nodetest.WaitFor(t, fmt.Sprintf("%s on %s with node %s", topic, group, tn.Addr()), func() bool {
			r, _, err := c.Route(nodetest.Context(t), topic, wire.ClientAttrs{})
			return err == nil && slices.ContainsFunc(r.Brokers, func(b wire.BrokerData) bool { return b.Name == group })
		})
		c.Close()
	}
}

var instance int

// uniqueName keeps the library's process-wide client cache (keyed by
// instance name) from handing one test's client to another.
func uniqueName(what string) string {
	instance++
	return fmt.Sprintf("%s-%d-%d", what, os.Getpid(), instance)
}

func newAdmin(t *testing.T, namesrv string) admin.Admin {
	t.Helper()
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{namesrv})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func queueBrokers(mqs []*primitive.MessageQueue) []string {
	var out []string
	for _, mq := range mqs {
		if !slices.Contains(out, mq.BrokerName) {
			out = append(out, mq.BrokerName)
		}
	}
	slices.Sort(out)
	return out
}

// The real rocketmq-client-go against a gateway in front of three nodes,
// one of them behind a lossy link: admin reads, a producer and consumers
// resolving routes, a route change reaching a running producer, and routes
// still served while the WAN is cut.
func TestClientLibraryThroughGateway(t *testing.T) {
	s := startEdgeSite(t)
	s.proxies[2].SetDrop(25) // node 3's link loses a quarter of its datagrams
	brokerA, brokerB := startStubBroker(t), startStubBroker(t)
	s.registerBroker(t, "broker-a", brokerA.addr, 1, "TopicTest", "TopicLater")
	s.onEveryNode(t, "TopicTest", "broker-a") // the lossy node too
	ctx := nodetest.Context(t)

	t.Run("admin", func(t *testing.T) {
		a := newAdmin(t, s.addr)
		mqs, err := a.FetchPublishMessageQueues(ctx, "TopicTest")
		if err != nil {
			t.Fatal(err)
		}
		if len(mqs) != 4 || mqs[0].BrokerName != "broker-a" {
			t.Errorf("publish queues %v", mqs)
		}
		list, err := a.FetchAllTopicList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(list.TopicList, "TopicTest") {
			t.Errorf("topic list %v lacks TopicTest", list.TopicList)
		}
		if _, err := a.FetchPublishMessageQueues(ctx, "NoSuchTopic"); !errors.Is(err, rmqerrors.ErrTopicNotExist) {
			t.Errorf("missing topic: %v, want ErrTopicNotExist", err)
		}
	})

	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{s.addr}),
		producer.WithGroupName(uniqueName("producer")), producer.WithInstanceName(uniqueName("producer")),
		producer.WithRetry(2), producer.WithSendMsgTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	t.Run("producer", func(t *testing.T) {
		res, err := p.SendSync(ctx, primitive.NewMessage("TopicTest", []byte("hello")))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != primitive.SendOK || brokerA.sent("TopicTest") != 1 {
			t.Errorf("send: %v; the stub broker got %d messages", res, brokerA.sent("TopicTest"))
		}
	})

	t.Run("push consumer", func(t *testing.T) {
		group := uniqueName("push")
		c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{s.addr}), consumer.WithGroupName(group),
			consumer.WithInstance(group))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Subscribe("TopicTest", consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			return consumer.ConsumeSuccess, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Shutdown()
		nodetest.WaitFor(t, "the push consumer to pull from the broker its route names", func() bool {
			return brokerA.pulled("TopicTest") > 0
		})
	})

	t.Run("pull consumer", func(t *testing.T) {
		group := uniqueName("pull")
		c, err := consumer.NewPullConsumer(consumer.WithNameServer([]string{s.addr}), consumer.WithGroupName(group),
			consumer.WithInstance(group))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe("TopicTest", consumer.MessageSelector{}); err != nil {
			t.Fatal(err)
		}
		// Start fails with "route info not found" unless the subscription
		// resolved.
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		c.Shutdown()
	})

	// A second broker group takes TopicTest too. The gateway learns it by
	// its watch; then the WAN is cut entirely, and the running producer
	// still picks the change up at its next 30 s route poll (the library's
	// fixed, unexported interval: the reason this test takes over 30 s),
	// served from the gateway's cache, and sends to the new broker.
	s.registerBroker(t, "broker-b", brokerB.addr, 1, "TopicTest")
	nodetest.WaitFor(t, "the gateway to route TopicTest to both groups", func() bool {
		mqs, err := newAdmin(t, s.addr).FetchPublishMessageQueues(ctx, "TopicTest")
		return err == nil && slices.Equal(queueBrokers(mqs), []string{"broker-a", "broker-b"})
	})
	for _, px := range s.proxies {
		px.SetDrop(100)
	}
	nodetest.WaitFor(t, "the gateway to see every node down", func() bool { return !s.gw.Health().OK })

	t.Run("served while the WAN is cut", func(t *testing.T) {
		mqs, err := newAdmin(t, s.addr).FetchPublishMessageQueues(context.Background(), "TopicTest")
		if err != nil {
			t.Fatal(err)
		}
		if got := queueBrokers(mqs); !slices.Equal(got, []string{"broker-a", "broker-b"}) {
			t.Errorf("groups while cut: %v", got)
		}
	})

	t.Run("route change reaches a running producer", func(t *testing.T) {
		deadline := time.Now().Add(75 * time.Second)
		for brokerB.sent("TopicTest") == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the running producer never sent to the new broker group")
			}
			if _, err := p.SendSync(context.Background(), primitive.NewMessage("TopicTest", []byte("again"))); err != nil {
				t.Fatalf("send while the WAN is cut: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	// Only the lossy node comes back: a topic the gateway has not cached
	// yet is found through it.
	s.proxies[2].SetDrop(25)
	t.Run("found over the lossy link alone", func(t *testing.T) {
		var mqs []*primitive.MessageQueue
		nodetest.WaitFor(t, "TopicLater through the lossy node", func() bool {
			var err error
			mqs, err = newAdmin(t, s.addr).FetchPublishMessageQueues(context.Background(), "TopicLater")
			return err == nil
		})
		if got := queueBrokers(mqs); !slices.Equal(got, []string{"broker-a"}) {
			t.Errorf("TopicLater groups: %v", got)
		}
	})
}

// mqadmin deleteTopic through the gateway, by the real library: it deletes
// the topic on the broker (DELETE_TOPIC_IN_BROKER, found by the route the
// gateway serves) and sends DELETE_TOPIC_IN_NAMESRV, which the gateway
// refuses. The broker's registrations at its new data version no longer
// list the topic: one period later no node routes it, nor does the
// gateway, and a restarted node does not get it back.
func TestTopicDeletedThroughGateway(t *testing.T) {
	s := startEdgeSite(t)
	b := startStubBroker(t)
	s.registerBroker(t, "broker-d", b.addr, 1, "TopicKept", "TopicDeleted")
	s.onEveryNode(t, "TopicDeleted", "broker-d")
	ctx := nodetest.Context(t)

	a := newAdmin(t, s.addr)
	if err := a.DeleteTopic(ctx, admin.WithTopicDelete("TopicDeleted")); err != nil {
		t.Fatal(err)
	}
	if n := b.deleted("TopicDeleted"); n != 1 {
		t.Fatalf("the broker got %d DELETE_TOPIC_IN_BROKER, want 1", n)
	}
	// The broker's next periodic registrations, one period apart (RocketMQ
	// clamps registerNameServerPeriod to 10 s at least).
	s.registerBroker(t, "broker-d", b.addr, 2, "TopicKept")
	time.Sleep(11 * time.Second)
	s.registerBroker(t, "broker-d", b.addr, 2, "TopicKept")
	s.offEveryNode(t, "TopicDeleted")
	nodetest.WaitFor(t, "the gateway answering TOPIC_NOT_EXIST", func() bool {
		return s.routeCode(t, "TopicDeleted") == remoting.TopicNotExist
	})

	s.nodes[0].Restart()
	s.onEveryNode(t, "TopicKept", "broker-d")
	s.offEveryNode(t, "TopicDeleted")
}

// offEveryNode waits until no node, asked directly over QUIC, routes topic.
func (s *edgeSite) offEveryNode(t *testing.T, topic string) {
	t.Helper()
	for _, tn := range s.nodes {
		c, err := client.Dial(nodetest.Context(t), tn.Addr(), client.Config{TLS: s.ca.TLS(t, pki.RoleOperator, "op")})
		if err != nil {
			t.Fatal(err)
		}
		nodetest.WaitFor(t, fmt.Sprintf("%s gone from node %s", topic, tn.Addr()), func() bool {
			_, _, err := c.Route(nodetest.Context(t), topic, wire.ClientAttrs{})
			return errors.Is(err, wire.ErrNotFound)
		})
		c.Close()
	}
}

// routeCode asks the gateway for topic's route as the Go library does and
// returns the answer's code.
func (s *edgeSite) routeCode(t *testing.T, topic string) int16 {
	t.Helper()
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := remoting.NewRequest(remoting.GetRouteInfoByTopic, 1, map[string]string{"topic": topic}, nil)
	if _, err := req.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := remoting.ReadCommand(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Code
}
