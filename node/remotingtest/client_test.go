//go:build rocketmq && !race

package remotingtest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

func init() { rlog.SetLogLevel("fatal") }

// Broker request codes the stub answers specially.
const (
	sendMessage      = 10
	sendMessageV2    = 310
	sendBatchMessage = 320
	pullMessage      = 11
	queryOffset      = 14
	pullNotFound     = 19
)

// stubBroker is a loopback RocketMQ broker that accepts every request and
// records the messages sent to it, by topic.
type stubBroker struct {
	addr string
	mu   sync.Mutex
	sent map[string]int
}

func startStubBroker(t *testing.T) *stubBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &stubBroker{addr: l.Addr().String(), sent: map[string]int{}}
	srv := &remoting.Server{Handler: remoting.HandlerFunc(b.serve), Logger: nodetest.Logger()}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return b
}

func (b *stubBroker) serve(ctx context.Context, _ net.Addr, req *remoting.Command) *remoting.Command {
	switch req.Code {
	case sendMessage, sendMessageV2, sendBatchMessage:
		topic := req.Ext("topic")
		if topic == "" {
			topic = req.Ext("b") // SEND_MESSAGE_V2 abbreviates its header fields
		}
		b.mu.Lock()
		b.sent[topic]++
		n := b.sent[topic]
		b.mu.Unlock()
		return remoting.NewHeaderResponse(req, remoting.Success, "", map[string]string{
			"msgId": "STUB" + strconv.Itoa(n), "queueId": "0", "queueOffset": strconv.Itoa(n)})
	case pullMessage:
		select { // a broker holds a pull that finds nothing (long polling)
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return remoting.NewHeaderResponse(req, pullNotFound, "", map[string]string{
			"nextBeginOffset": "0", "minOffset": "0", "maxOffset": "0", "suggestWhichBrokerId": "0"})
	case queryOffset:
		return remoting.NewHeaderResponse(req, remoting.QueryNotFound, "", nil)
	}
	return remoting.NewHeaderResponse(req, remoting.Success, "", nil)
}

func (b *stubBroker) sentTo(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent[topic]
}

// world is a node with a remoting listener and a QUIC broker session for
// the stub brokers it registers.
type world struct {
	t    *testing.T
	node *nodetest.Node
	ns   []string // what a RocketMQ client is given as namesrvAddr
	ca   *nodetest.CA
}

func newWorld(t *testing.T) *world {
	ca := nodetest.NewCA(t)
	tn := nodetest.Start(t, ca, func(c *node.Config) { c.RemotingAddr = "127.0.0.1:0" })
	return &world{t: t, node: tn, ca: ca, ns: []string{tn.Node().RemotingAddr().String()}}
}

// register registers a broker group over QUIC, as an edgereg broker does.
func (w *world) register(group, addr string, topics ...string) *client.Conn {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, w.node.Addr(), client.Config{TLS: w.ca.TLS(w.t, pki.RoleBroker, group, group)})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
	r := &wire.Register{Cluster: "DefaultCluster", BrokerName: group, Addr: addr, DataVersion: wire.DataVersion{Counter: 1}}
	for _, topic := range topics {
		r.Topics = append(r.Topics, wire.TopicConfig{Name: topic, ReadQueues: 4, WriteQueues: 4, Perm: wire.PermRead | wire.PermWrite})
	}
	if _, err := c.Register(ctx, r); err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) resolver() primitive.NsResolver { return primitive.NewPassthroughResolver(w.ns) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAdminReadsRoutesAndTopics(t *testing.T) {
	w := newWorld(t)
	stub := startStubBroker(t)
	w.register("broker-a", stub.addr, "TopicTest", "orders")

	adm, err := admin.NewAdmin(admin.WithResolver(w.resolver()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	mqs, err := adm.FetchPublishMessageQueues(ctxFor(t), "TopicTest")
	if err != nil {
		t.Fatal(err)
	}
	if len(mqs) != 4 || mqs[0].BrokerName != "broker-a" || mqs[0].Topic != "TopicTest" {
		t.Fatalf("publish queues: %v", mqs)
	}
	_, err = adm.FetchPublishMessageQueues(ctxFor(t), "nosuch")
	if !errors.Is(err, rmqerrors.ErrTopicNotExist) {
		t.Fatalf("missing topic: %v, want ErrTopicNotExist", err)
	}
	list, err := adm.FetchAllTopicList(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.TopicList) != 2 || list.TopicList[0] != "TopicTest" || list.TopicList[1] != "orders" {
		t.Fatalf("topic list: %+v", list)
	}
}

func newProducer(t *testing.T, w *world, name string) rocketmq.Producer {
	t.Helper()
	p, err := producer.NewDefaultProducer(producer.WithNsResolver(w.resolver()), producer.WithGroupName(name),
		producer.WithInstanceName(name), producer.WithRetry(0), producer.WithSendMsgTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

func TestProducerSendsWhereTheRouteSays(t *testing.T) {
	w := newWorld(t)
	stub := startStubBroker(t)
	w.register("broker-a", stub.addr, "TopicTest")
	p := newProducer(t, w, "producer-route")
	res, err := p.SendSync(ctxFor(t), primitive.NewMessage("TopicTest", []byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != primitive.SendOK || res.MessageQueue.BrokerName != "broker-a" || stub.sentTo("TopicTest") != 1 {
		t.Fatalf("send result %v; the stub broker got %d messages", res, stub.sentTo("TopicTest"))
	}
}

// TestProducerFallsBackToTBW102 registers a broker as a RocketMQ broker
// does, REGISTER_BROKER over the node's remoting listener with its TBW102
// (perm 7, autoCreateTopicEnable), and sends to a topic no broker holds yet:
// the library gets TOPIC_NOT_EXIST, asks for TBW102's route and sends there,
// where the broker would create the topic.
func TestProducerFallsBackToTBW102(t *testing.T) {
	ca := nodetest.NewCA(t)
	tn := nodetest.Start(t, ca, func(c *node.Config) {
		c.RemotingAddr = "127.0.0.1:0"
		c.RemotingAllowBrokers = true
	})
	w := &world{t: t, node: tn, ca: ca, ns: []string{tn.Node().RemotingAddr().String()}}
	stub := startStubBroker(t)
	body := &remoting.RegisterBrokerBody{DataVersion: remoting.DataVersion{Counter: 1, Timestamp: time.Now().UnixMilli()},
		TopicConfigTable: map[string]remoting.TopicConfig{
			"TBW102":    {TopicName: "TBW102", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 7},
			"TopicTest": {TopicName: "TopicTest", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6},
		}}
	raw := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: stub.addr, ClusterName: "DefaultCluster",
		BodyCRC32: remoting.BodyCRC32(raw)}
	nc, err := net.Dial("tcp", w.ns[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close() // the broker stays registered while its connection is open
	if _, err := remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), raw).WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := remoting.ReadCommand(nc, 0); err != nil || resp.Code != remoting.Success {
		t.Fatalf("registration: %+v %v", resp, err)
	}
	p := newProducer(t, w, "producer-tbw102")
	res, err := p.SendSync(ctxFor(t), primitive.NewMessage("BrandNew", []byte("hello")))
	if err != nil {
		t.Fatal(err)
	}
	if res.MessageQueue.BrokerName != "broker-a" || stub.sentTo("BrandNew") != 1 {
		t.Fatalf("send result %v; the stub broker got %d messages for BrandNew", res, stub.sentTo("BrandNew"))
	}
}

func TestConsumersResolveTheirSubscription(t *testing.T) {
	w := newWorld(t)
	stub := startStubBroker(t)
	w.register("broker-a", stub.addr, "TopicTest")

	push, err := consumer.NewPushConsumer(consumer.WithNsResolver(w.resolver()), consumer.WithGroupName("push-group"),
		consumer.WithInstance("push-consumer"))
	if err != nil {
		t.Fatal(err)
	}
	err = push.Subscribe("TopicTest", consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := push.Start(); err != nil {
		t.Fatalf("push consumer start: %v", err)
	}
	defer push.Shutdown()

	pull, err := consumer.NewPullConsumer(consumer.WithNsResolver(w.resolver()), consumer.WithGroupName("pull-group"),
		consumer.WithInstance("pull-consumer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pull.Subscribe("TopicTest", consumer.MessageSelector{}); err != nil {
		t.Fatal(err)
	}
	if err := pull.Start(); err != nil {
		t.Fatalf("pull consumer start: %v", err)
	}
	defer pull.Shutdown()

	// A subscription the node has no route for fails Start, as it would
	// against a NameServer.
	missing, err := consumer.NewPullConsumer(consumer.WithNsResolver(w.resolver()), consumer.WithGroupName("missing-group"),
		consumer.WithInstance("missing-consumer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Subscribe("nosuch", consumer.MessageSelector{}); err != nil {
		t.Fatal(err)
	}
	if err := missing.Start(); err == nil {
		missing.Shutdown()
		t.Fatal("a consumer of a missing topic started")
	}
}

// TestRouteChangeReachesRunningProducer moves a topic from one broker to
// another while a producer runs. The library polls routes every 30 s
// (_PullNameServerInterval, not configurable), so this test takes about
// that long: it is the time a NameServer client needs too.
func TestRouteChangeReachesRunningProducer(t *testing.T) {
	w := newWorld(t)
	a, b := startStubBroker(t), startStubBroker(t)
	ca := w.register("broker-a", a.addr, "moving", "stay")
	p := newProducer(t, w, "producer-moving")
	if _, err := p.SendSync(ctxFor(t), primitive.NewMessage("moving", []byte("1"))); err != nil || a.sentTo("moving") != 1 {
		t.Fatalf("first send: %v (broker a got %d)", err, a.sentTo("moving"))
	}
	// Let the client's one-off lookup 10 ms after Start pass, so that only
	// its periodic poll can see the change.
	time.Sleep(200 * time.Millisecond)
	// The topic moves: broker b holds it, broker a no longer does.
	w.register("broker-b", b.addr, "moving")
	ctx := ctxFor(t)
	if _, err := ca.UpdateTopics(ctx, &wire.UpdateTopics{Cluster: "DefaultCluster", Addr: a.addr, Epoch: leaseEpoch(t, w, a.addr),
		DataVersion: wire.DataVersion{Counter: 2}, Remove: []string{"moving"}}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	deadline := changed.Add(45 * time.Second)
	for b.sentTo("moving") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no send reached broker b within 45 s of the route change (a got %d)", a.sentTo("moving"))
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.SendSync(sctx, primitive.NewMessage("moving", []byte("again")))
		cancel()
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the route change reached the producer after %s", time.Since(changed).Round(time.Second))
}

func leaseEpoch(t *testing.T, w *world, addr string) uint64 {
	t.Helper()
	l, ok := w.node.Node().Registry().Lease("DefaultCluster", addr)
	if !ok {
		t.Fatalf("no lease for %s", addr)
	}
	return l.Epoch
}
