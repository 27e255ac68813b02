package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

const rocketmqFixtures = "../testdata/rocketmq"

func rmqFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rocketmqFixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, ".hex") {
		if b, err = hex.DecodeString(strings.TrimSpace(string(b))); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func rmqFixtureCmd(t testing.TB, name string) *remoting.Command {
	t.Helper()
	c, err := remoting.DecodeFrame(rmqFixture(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startRemotingNode starts a node with a remoting listener on loopback.
func startRemotingNode(t testing.TB, edit func(*Config)) *testNode {
	t.Helper()
	return startNode(t, func(c *Config) {
		c.RemotingAddr = "127.0.0.1:0"
		c.RemotingAllowBrokers = true
		if edit != nil {
			edit(c)
		}
	})
}

// rmqConn is a raw remoting connection, as a broker or client holds one.
type rmqConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialRemoting(t testing.TB, tn *testNode) *rmqConn {
	t.Helper()
	nc, err := net.Dial("tcp", tn.RemotingAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	// Only against a hang: under -race on a loaded machine, the node
	// inflating and decoding a registration of megabytes took longer than
	// the 30 s this was (TestRemotingCompressedRegistrationPinsNoInflatedBytes).
	nc.SetDeadline(time.Now().Add(3 * time.Minute))
	return &rmqConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rmqConn) sendRaw(frame []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(frame); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rmqConn) send(cmd *remoting.Command) {
	c.t.Helper()
	frame, err := cmd.Encode()
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(frame)
}

// recvRaw reads one whole frame as bytes.
func (c *rmqConn) recvRaw() []byte {
	c.t.Helper()
	var prefix [4]byte
	if _, err := io.ReadFull(c.br, prefix[:]); err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	n := int(prefix[0])<<24 | int(prefix[1])<<16 | int(prefix[2])<<8 | int(prefix[3])
	rest := make([]byte, n)
	if _, err := io.ReadFull(c.br, rest); err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return append(prefix[:], rest...)
}

func (c *rmqConn) recv() *remoting.Command {
	c.t.Helper()
	cmd, err := remoting.DecodeFrame(c.recvRaw())
	if err != nil {
		c.t.Fatal(err)
	}
	return cmd
}

func (c *rmqConn) call(cmd *remoting.Command) *remoting.Command {
	c.t.Helper()
	c.send(cmd)
	resp := c.recv()
	if resp.Opaque != cmd.Opaque || !resp.IsResponse() {
		c.t.Fatalf("answer %+v to opaque %d", resp, cmd.Opaque)
	}
	return resp
}

// expectClosed checks that the node closes the connection without an answer.
func (c *rmqConn) expectClosed() {
	c.t.Helper()
	if resp, err := remoting.ReadCommand(c.br, 0); err == nil {
		c.t.Fatalf("got %+v, want the connection closed", resp)
	}
}

func sameFrame(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from RocketMQ's\n got %q\nwant %q", what, got, want)
	}
}

// slaveRequest is the master's fixture registration as its slave sends it.
func slaveRequest(t testing.TB) *remoting.Command {
	req := rmqFixtureCmd(t, "v5_register_broker_request.hex")
	req.Opaque = 8
	req.ExtFields["brokerId"] = "1"
	req.ExtFields["brokerAddr"] = "127.0.0.1:10921"
	req.ExtFields["haServerAddr"] = "127.0.0.1:10922"
	return req
}

// TestRemotingFixtureBroker replays the 5.x broker fixtures against the
// listener, compares every answer the fixtures hold byte for byte, and
// checks through QUIC that the broker is really there.
func TestRemotingFixtureBroker(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)

	c.sendRaw(rmqFixture(t, "v5_register_broker_request.hex"))
	sameFrame(t, "register response", c.recvRaw(), rmqFixture(t, "v5_register_broker_response.hex"))
	c.send(slaveRequest(t))
	sameFrame(t, "register response to the slave", c.recvRaw(), rmqFixture(t, "v5_register_broker_response_to_slave.hex"))

	// QUIC readers see the broker the fixtures registered.
	qc := tn.dial(pki.RoleClient)
	route, _, err := qc.Route(ctxT(t), "TopicTest", wire.ClientAttrs{})
	if err != nil {
		t.Fatal(err)
	}
	if len(route.Queues) != 1 || route.Queues[0] != (wire.QueueData{BrokerName: "broker-a", ReadQueues: 4, WriteQueues: 4, Perm: 6}) ||
		len(route.Brokers) != 1 || route.Brokers[0].Addrs[0] != "127.0.0.1:10911" || route.Brokers[0].Addrs[1] != "127.0.0.1:10921" {
		t.Fatalf("QUIC route of TopicTest: %+v", route)
	}
	if tbw, _, err := qc.Route(ctxT(t), "TBW102", wire.ClientAttrs{}); err != nil || tbw.Queues[0].Perm != 7 {
		t.Fatalf("QUIC route of TBW102: %+v %v", tbw, err)
	}

	// Route answers in both dialects, byte for byte.
	goReq := rmqFixtureCmd(t, "go_client_get_route_request.hex")
	goReq.Opaque = 13
	c.send(goReq)
	sameFrame(t, "route answer to rocketmq-client-go", c.recvRaw(), rmqFixture(t, "v5_get_route_response_legacy.hex"))
	c.sendRaw(rmqFixture(t, "v5_java_client_get_route_request.hex"))
	sameFrame(t, "route answer to a Java client", c.recvRaw(), rmqFixture(t, "v5_get_route_response_standard.hex"))
	c.send(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 14, ExtFields: map[string]string{"topic": "nosuch"}})
	sameFrame(t, "route answer for a missing topic", c.recvRaw(), rmqFixture(t, "v5_get_route_response_topic_not_exist.hex"))

	// Renewals: the synchronous data-version query answers as RocketMQ; the
	// oneway ones renew without an answer.
	c.sendRaw(rmqFixture(t, "v5_query_data_version_request.hex"))
	sameFrame(t, "data version answer", c.recvRaw(), rmqFixture(t, "v5_query_data_version_response.hex"))
	c.sendRaw(rmqFixture(t, "v5_query_data_version_oneway.hex"))
	c.sendRaw(rmqFixture(t, "v5_broker_heartbeat_oneway.hex"))
	ping := &remoting.Command{Code: remoting.GetBrokerClusterInfo, Opaque: 99}
	if resp := c.call(ping); resp.Code != remoting.Success { // the oneways got no answer before this one
		t.Fatalf("cluster info %+v", resp)
	}
	sameFrame(t, "cluster info body", ping2body(t, c), rmqFixture(t, "v5_cluster_info_body.json"))
	// Pipelined requests run concurrently: wait for the oneways to be handled.
	renewed := func() bool {
		l, ok := tn.Registry().Lease("DefaultCluster", "127.0.0.1:10911")
		return ok && l.Heartbeats == 3
	}
	for i := 0; i < 2000 && !renewed(); i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if !renewed() {
		l, _ := tn.Registry().Lease("DefaultCluster", "127.0.0.1:10911")
		t.Fatalf("master lease after three renewals: %+v", l)
	}

	c.sendRaw(rmqFixture(t, "v5_unregister_broker_request.hex"))
	if resp := c.recv(); resp.Code != remoting.Success || resp.Opaque != 12 {
		t.Fatalf("unregister answer %+v", resp)
	}
	route, _, err = qc.Route(ctxT(t), "TopicTest", wire.ClientAttrs{})
	if err != nil {
		t.Fatal(err)
	}
	if _, master := route.Brokers[0].Addrs[0]; master || route.Brokers[0].Addrs[1] != "127.0.0.1:10921" {
		t.Fatalf("after the master's unregister QUIC sees %+v", route.Brokers)
	}
	leases, err := tn.dial(pki.RoleOperator).Leases(ctxT(t))
	if err != nil || len(leases) != 1 || leases[0].Addr != "127.0.0.1:10921" {
		t.Fatalf("leases after unregister: %+v %v", leases, err)
	}
}

// ping2body asks for cluster info again and returns the body.
func ping2body(t testing.TB, c *rmqConn) []byte {
	t.Helper()
	return c.call(&remoting.Command{Code: remoting.GetBrokerClusterInfo, Opaque: 100}).Body
}

// registerCmd builds a 5.x REGISTER_BROKER with the given topics.
func registerCmd(t testing.TB, opaque int32, id int64, addr string, dv remoting.DataVersion, topics ...string) *remoting.Command {
	t.Helper()
	body := &remoting.RegisterBrokerBody{DataVersion: dv, TopicConfigTable: map[string]remoting.TopicConfig{}}
	for _, name := range topics {
		body.TopicConfigTable[name] = remoting.TopicConfig{TopicName: name, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}
	}
	b := body.EncodeJSON()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-a", BrokerAddr: addr, ClusterName: "DefaultCluster",
		HAServerAddr: "127.0.0.1:10912", BrokerID: id, BodyCRC32: remoting.BodyCRC32(b)}
	return remoting.NewRequest(remoting.RegisterBroker, opaque, h.Ext(), b)
}

func routeTopics(t testing.TB, tn *testNode) []string {
	t.Helper()
	return tn.Registry().Topics()
}

// TestRemotingRegistrationIsUpsert: brokers send partial registrations and
// 800-topic chunks with nothing marking them; each is an upsert.
func TestRemotingRegistrationIsUpsert(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	const master = "127.0.0.1:10911"
	dv := func(n int64) remoting.DataVersion { return remoting.DataVersion{Counter: n, Timestamp: 1735689600000} }

	// A broker's first registration with exactly one topic is refused, as 5.x does.
	if resp := c.call(registerCmd(t, 1, 0, master, dv(1), "only")); resp.Code != remoting.SystemError || resp.Remark != "register broker failed" {
		t.Fatalf("first single-topic registration: %+v", resp)
	}
	if got := routeTopics(t, tn); len(got) != 0 {
		t.Fatalf("topics after a refused registration: %v", got)
	}
	if resp := c.call(registerCmd(t, 2, 0, master, dv(1), "a", "b", "c")); resp.Code != remoting.Success {
		t.Fatalf("full registration: %+v", resp)
	}
	// Topic creation: a partial registration with a new version.
	if resp := c.call(registerCmd(t, 3, 0, master, dv(2), "d")); resp.Code != remoting.Success {
		t.Fatalf("partial registration: %+v", resp)
	}
	if got := strings.Join(routeTopics(t, tn), ","); got != "a,b,c,d" {
		t.Fatalf("after a partial registration: %s, want a,b,c,d", got)
	}
	// Split registration: later chunks carry the first chunk's version.
	if resp := c.call(registerCmd(t, 4, 0, master, dv(3), "e", "f")); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	if resp := c.call(registerCmd(t, 5, 0, master, dv(3), "g", "h")); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	if got := strings.Join(routeTopics(t, tn), ","); got != "a,b,c,d,e,f,g,h" {
		t.Fatalf("after two chunks of one version: %s", got)
	}
	// An unchanged version with changed queue counts only renews, as RocketMQ.
	again := registerCmd(t, 6, 0, master, dv(3), "a", "b")
	body, _ := remoting.DecodeRegisterBrokerBody(again.Body, false, 0)
	body.TopicConfigTable["a"] = remoting.TopicConfig{TopicName: "a", ReadQueueNums: 16, WriteQueueNums: 16, Perm: 6}
	again.Body = body.EncodeJSON()
	again.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(again.Body)))
	if resp := c.call(again); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	if r, _, _ := tn.Registry().RouteData("a"); r.Queues[0].ReadQueues != 4 {
		t.Fatalf("unchanged version changed queue counts: %+v", r.Queues)
	}
	// A slave's topics never change the group's.
	if resp := c.call(registerCmd(t, 7, 1, "127.0.0.1:10921", dv(9), "slave-only", "x")); resp.Code != remoting.Success ||
		resp.Ext("masterAddr") != master {
		t.Fatalf("slave registration: %+v", resp)
	}
	if got := strings.Join(routeTopics(t, tn), ","); got != "a,b,c,d,e,f,g,h" {
		t.Fatalf("after a slave's registration: %s", got)
	}
}

func TestRemotingRegisterBodies(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	// The compressed form (4.9 brokers with compressedRegister=true).
	full, err := remoting.DecodeRegisterBrokerBody(rmqFixture(t, "v5_register_broker_body.json"), false, 0)
	if err != nil {
		t.Fatal(err)
	}
	z := full.EncodeCompressed()
	h := remoting.RegisterBrokerHeader{BrokerName: "broker-z", BrokerAddr: "127.0.0.1:20911", ClusterName: "DefaultCluster",
		Compressed: true, BodyCRC32: remoting.BodyCRC32(z)}
	if resp := c.call(remoting.NewRequest(remoting.RegisterBroker, 1, h.Ext(), z)); resp.Code != remoting.Success {
		t.Fatalf("compressed registration: %+v", resp)
	}
	if r, _, err := tn.Registry().RouteData("orders"); err != nil || r.Queues[0].BrokerName != "broker-z" || r.Queues[0].ReadQueues != 8 {
		t.Fatalf("route after a compressed registration: %+v %v", r, err)
	}
	// RocketMQ's own compressed fixture too.
	zf := rmqFixture(t, "v5_register_broker_body_compressed.hex")
	h.BrokerName, h.BrokerAddr, h.BodyCRC32 = "broker-y", "127.0.0.1:30911", remoting.BodyCRC32(zf)
	if resp := c.call(remoting.NewRequest(remoting.RegisterBroker, 2, h.Ext(), zf)); resp.Code != remoting.Success {
		t.Fatalf("fixture compressed registration: %+v", resp)
	}
	// Bad input: a clear error and nothing registered.
	bad := []struct {
		name   string
		mutate func(*remoting.Command)
		remark string
	}{
		{"crc mismatch", func(c *remoting.Command) { c.ExtFields["bodyCrc32"] = "12345" }, "crc32 not match"},
		{"5.x deflated body marked uncompressed", func(c *remoting.Command) {
			c.Body = z
			c.ExtFields["bodyCrc32"] = strconv.Itoa(int(remoting.BodyCRC32(z)))
		}, "Failed to decode RegisterBrokerBody"},
		{"missing brokerAddr", func(c *remoting.Command) { delete(c.ExtFields, "brokerAddr") }, "brokerAddr"},
		{"cluster conflict", func(c *remoting.Command) {
			c.ExtFields["brokerName"] = "broker-z"
			c.ExtFields["clusterName"] = "Other"
		}, "conflict"},
	}
	for i, b := range bad {
		req := registerCmd(t, int32(10+i), 0, "127.0.0.1:40911", remoting.DataVersion{Counter: 1}, "p", "q")
		b.mutate(req)
		resp := c.call(req)
		if resp.Code != remoting.SystemError || !strings.Contains(resp.Remark, b.remark) {
			t.Errorf("%s: %+v, want SYSTEM_ERROR with %q", b.name, resp, b.remark)
		}
	}
	if _, ok := tn.Registry().Lease("DefaultCluster", "127.0.0.1:40911"); ok {
		t.Fatal("a refused registration left a lease")
	}
}

// TestRemotingSameBrokerAsQUIC: one broker, whichever protocol registered
// it, is one broker to both kinds of reader.
func TestRemotingSameBrokerAsQUIC(t *testing.T) {
	tn := startRemotingNode(t, nil)
	bc := tn.dial(pki.RoleBroker, "broker-q")
	if _, err := bc.Register(ctxT(t), registration("DefaultCluster", "broker-q", 0, "127.0.0.1:50911", "quic-topic", "shared")); err != nil {
		t.Fatal(err)
	}
	c := dialRemoting(t, tn)
	resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 1, Version: remoting.V5_3_3, ExtFields: map[string]string{"topic": "quic-topic"}})
	r, err := remoting.DecodeTopicRouteData(resp.Body)
	if err != nil || r.BrokerDatas[0].BrokerAddrs[0] != "127.0.0.1:50911" || r.QueueDatas[0].ReadQueueNums != 8 {
		t.Fatalf("remoting route of a QUIC broker: %+v %v", r, err)
	}
	// The same broker registers over remoting with another topic: an upsert
	// into what QUIC registered.
	req := registerCmd(t, 2, 0, "127.0.0.1:50911", remoting.DataVersion{Counter: 7}, "remoting-topic", "shared")
	req.ExtFields["brokerName"] = "broker-q"
	if resp := c.call(req); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	qc := tn.dial(pki.RoleClient)
	for _, topic := range []string{"quic-topic", "remoting-topic", "shared"} {
		if _, _, err := qc.Route(ctxT(t), topic, wire.ClientAttrs{}); err != nil {
			t.Errorf("QUIC route of %s: %v", topic, err)
		}
	}
	ci, err := qc.ClusterInfo(ctxT(t))
	if err != nil || len(ci.Groups) != 1 || ci.Groups["broker-q"].Addrs[0] != "127.0.0.1:50911" {
		t.Fatalf("QUIC cluster info: %+v %v", ci, err)
	}
	body := c.call(&remoting.Command{Code: remoting.GetBrokerClusterInfo, Opaque: 3}).Body
	rci, err := remoting.DecodeClusterInfo(body)
	if err != nil || len(rci.BrokerAddrTable) != 1 || rci.ClusterAddrTable["DefaultCluster"][0] != "broker-q" {
		t.Fatalf("remoting cluster info: %s %v", body, err)
	}
}

// TestRemotingWarmUpNeverNotFound: a miss while warming up closes the
// connection (a transport error to the client) instead of answering
// TOPIC_NOT_EXIST or SYSTEM_ERROR (rocketmq#5322).
func TestRemotingWarmUpNeverNotFound(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.WarmUp = time.Hour })
	broker, c := dialRemoting(t, tn), dialRemoting(t, tn)
	if resp := broker.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "known", "other")); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	if resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 2, ExtFields: map[string]string{"topic": "known"}}); resp.Code != remoting.Success {
		t.Fatalf("a known topic while warming up: %+v", resp)
	}
	c.send(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 3, ExtFields: map[string]string{"topic": "unknown"}})
	c.expectClosed()
}

func TestRemotingRefusesWithoutPermission(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.RemotingAddr = ":0" }) // no allow flags; empty host
	if ip := tn.RemotingAddr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("an empty host bound %s, want loopback", ip)
	}
	c := dialRemoting(t, tn)
	for i, code := range []int16{remoting.RegisterBroker, remoting.UnregisterBroker, remoting.QueryDataVersion,
		remoting.RegisterTopicInNameSrv, remoting.PutKVConfig, remoting.DeleteKVConfig, remoting.WipeWritePermOfBroker,
		remoting.AddWritePermOfBroker, remoting.DeleteTopicInNameSrv, remoting.UpdateNameSrvConfig} {
		req := registerCmd(t, int32(i), 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "a", "b")
		req.Code = code
		req.ExtFields["namespace"], req.ExtFields["key"], req.ExtFields["value"], req.ExtFields["topic"] = "ns", "k", "v", "a"
		if resp := c.call(req); resp.Code != remoting.NoPermission {
			t.Errorf("code %d without permission: %+v", code, resp)
		}
	}
	if tn.Registry().LeaseCount() != 0 {
		t.Fatal("a refused registration registered")
	}
	if _, err := tn.kv.Get("ns", "k"); err == nil {
		t.Fatal("a refused KV put was stored")
	}
	// Reads are always served.
	if resp := c.call(&remoting.Command{Code: remoting.GetAllTopicListFromNameSrv, Opaque: 50}); resp.Code != remoting.Success || string(resp.Body) != `{"topicList":[]}` {
		t.Fatalf("topic list: %+v %s", resp, resp.Body)
	}
}

// TestRemotingUnregisterOnClose: closing the connection a broker registered
// on unregisters that registration, and only that one.
func TestRemotingUnregisterOnClose(t *testing.T) {
	const addr = "127.0.0.1:10911"
	waitGone := func(tn *testNode) {
		t.Helper()
		for range 2000 {
			if _, ok := tn.Registry().Lease("DefaultCluster", addr); !ok {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("broker still registered 10 s after its connection closed")
	}
	t.Run("crash removes the broker", func(t *testing.T) {
		tn := startRemotingNode(t, nil)
		c := dialRemoting(t, tn)
		c.call(registerCmd(t, 1, 0, addr, remoting.DataVersion{Counter: 1}, "a", "b"))
		c.nc.Close()
		waitGone(tn)
		if len(tn.Registry().Topics()) != 0 {
			t.Fatal("topics outlived their only broker")
		}
	})
	t.Run("a newer registration survives an old connection's close", func(t *testing.T) {
		tn := startRemotingNode(t, nil)
		old, fresh := dialRemoting(t, tn), dialRemoting(t, tn)
		old.call(registerCmd(t, 1, 0, addr, remoting.DataVersion{Counter: 1}, "a", "b"))
		fresh.call(registerCmd(t, 2, 0, addr, remoting.DataVersion{Counter: 1}, "a", "b"))
		old.nc.Close()
		// A marker request on a third connection, after the close hook had
		// every chance to run: the close is handled before the server
		// forgets the connection.
		for range 2000 {
			if tn.remoting.srv.Stats().Conns == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, ok := tn.Registry().Lease("DefaultCluster", addr); !ok {
			t.Fatal("closing the old connection removed the newer registration")
		}
		fresh.nc.Close()
		waitGone(tn)
	})
	t.Run("kept when configured", func(t *testing.T) {
		tn := startRemotingNode(t, func(c *Config) { c.RemotingKeepBrokersOnClose = true })
		c := dialRemoting(t, tn)
		c.call(registerCmd(t, 1, 0, addr, remoting.DataVersion{Counter: 1}, "a", "b"))
		c.nc.Close()
		for range 2000 {
			if tn.remoting.srv.Stats().Conns == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, ok := tn.Registry().Lease("DefaultCluster", addr); !ok {
			t.Fatal("broker unregistered on close although configured to keep it")
		}
	})
	t.Run("node shutdown unregisters nobody", func(t *testing.T) {
		tn := startRemotingNode(t, nil)
		c := dialRemoting(t, tn)
		c.call(registerCmd(t, 1, 0, addr, remoting.DataVersion{Counter: 1}, "a", "b"))
		tn.stop()
		if _, ok := tn.Registry().Lease("DefaultCluster", addr); !ok {
			t.Fatal("shutting the node down unregistered its remoting brokers")
		}
	})
}

// TestRemotingAdminAndReads covers the remaining NameServer codes.
func TestRemotingAdminAndReads(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.RemotingAllowAdmin = true })
	c := dialRemoting(t, tn)
	c.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "a", "b", "%RETRY%g"))
	op := int32(100)
	call := func(code int16, ext map[string]string) *remoting.Command {
		op++
		return c.call(&remoting.Command{Code: code, Opaque: op, ExtFields: ext})
	}
	kvExt := map[string]string{"namespace": "ORDER_TOPIC_CONFIG", "key": "a", "value": "broker-a:4"}
	if r := call(remoting.GetKVConfig, kvExt); r.Code != remoting.QueryNotFound || r.Remark != "No config item, Namespace: ORDER_TOPIC_CONFIG Key: a" || r.ExtFields == nil {
		t.Fatalf("missing KV: %+v", r)
	}
	if r := call(remoting.PutKVConfig, kvExt); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if r := call(remoting.GetKVConfig, kvExt); r.Code != remoting.Success || r.Ext("value") != "broker-a:4" {
		t.Fatalf("KV get: %+v", r)
	}
	if r := call(remoting.GetKVListByNamespace, kvExt); string(r.Body) != `{"table":{"a":"broker-a:4"}}` {
		t.Fatalf("KV list: %+v %s", r, r.Body)
	}
	// Brokers get the ordered-topic namespace back on registration.
	if r := c.call(registerCmd(t, 2, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "a", "b")); string(r.Body) != `{"table":{"a":"broker-a:4"}}` {
		t.Fatalf("registration answer body: %s", r.Body)
	}
	if r := call(remoting.DeleteKVConfig, kvExt); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if r := call(remoting.GetKVListByNamespace, kvExt); r.Code != remoting.Success || string(r.Body) != `{"table":{}}` {
		t.Fatalf("KV list after delete: %+v", r)
	}

	if r := call(remoting.WipeWritePermOfBroker, map[string]string{"brokerName": "broker-a"}); r.Ext("wipeTopicCount") != "3" {
		t.Fatalf("wipe: %+v", r)
	}
	if rd, _, _ := tn.Registry().RouteData("a"); rd.Queues[0].Perm != wire.PermRead {
		t.Fatalf("perm after wipe: %+v", rd.Queues)
	}
	if r := call(remoting.AddWritePermOfBroker, map[string]string{"brokerName": "broker-a"}); r.Ext("addTopicCount") != "3" {
		t.Fatalf("add: %+v", r)
	}
	if r := call(remoting.WipeWritePermOfBroker, map[string]string{"brokerName": "nobody"}); r.Code != remoting.Success || r.Ext("wipeTopicCount") != "0" {
		t.Fatalf("wipe of an unknown group: %+v", r)
	}

	list := func(code int16, ext map[string]string) string { return string(call(code, ext).Body) }
	if got := list(remoting.GetAllTopicListFromNameSrv, nil); got != `{"topicList":["%RETRY%g","a","b"]}` {
		t.Fatalf("all topics: %s", got)
	}
	if got := list(remoting.GetTopicsByCluster, map[string]string{"cluster": "DefaultCluster"}); got != `{"topicList":["%RETRY%g","a","b"]}` {
		t.Fatalf("topics by cluster: %s", got)
	}
	if got := list(remoting.GetTopicsByCluster, map[string]string{"cluster": "nosuch"}); got != `{"topicList":[]}` {
		t.Fatalf("topics of an unknown cluster: %s", got)
	}
	if got := list(remoting.GetSystemTopicListFromNS, nil); got != `{"brokerAddr":"127.0.0.1:10911","topicList":["DefaultCluster","broker-a"]}` {
		t.Fatalf("system topics: %s", got)
	}
	for _, code := range []int16{remoting.GetUnitTopicList, remoting.GetHasUnitSubTopicList, remoting.GetHasUnitSubUnunitTopicList} {
		if got := list(code, nil); got != `{"topicList":[]}` {
			t.Fatalf("unit list %d: %s", code, got)
		}
	}
	r := call(remoting.GetBrokerMemberGroup, map[string]string{"clusterName": "DefaultCluster", "brokerName": "broker-a"})
	if r.Remark != "not set any response code" || string(r.Body) != `{"brokerMemberGroup":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}}` {
		t.Fatalf("member group: %+v %s", r, r.Body)
	}
	if r := call(remoting.GetNameSrvConfig, nil); !strings.Contains(string(r.Body), "orderMessageEnable=false\n") {
		t.Fatalf("config: %s", r.Body)
	}
	if r := call(remoting.UpdateNameSrvConfig, nil); r.Code != remoting.NoPermission {
		t.Fatalf("config update: %+v", r)
	}
	if r := call(1234, nil); r.Code != remoting.RequestCodeNotSupported || r.Remark != " request type 1234 not supported" {
		t.Fatalf("unknown code: %+v", r)
	}

	// Topic registration by a 5.x broker (enableSingleTopicRegister).
	rt := &remoting.TopicRouteData{QueueDatas: []remoting.QueueData{{BrokerName: "broker-a", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}}}
	op++
	if r := c.call(remoting.NewRequest(remoting.RegisterTopicInNameSrv, op, map[string]string{"topic": "single"}, rt.Encode(remoting.Standard))); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if rd, _, err := tn.Registry().RouteData("single"); err != nil || rd.Queues[0].ReadQueues != 2 {
		t.Fatalf("registered topic: %+v %v", rd, err)
	}

	if r := call(remoting.DeleteTopicInNameSrv, map[string]string{"topic": "a"}); r.Code != remoting.Success {
		t.Fatal(r)
	}
	if _, _, err := tn.Registry().RouteData("a"); err == nil {
		t.Fatal("topic a still there after delete")
	}
	if r := call(remoting.DeleteTopicInNameSrv, map[string]string{"topic": "never"}); r.Code != remoting.Success {
		t.Fatalf("delete of an unknown topic: %+v", r)
	}
}

// TestRemotingWarmUpKeepsBrokerConnections: a broker that registered on a
// connection and then misses a route there while the node warms up (5.x
// brokers look up routes for forwarding on the same connection) must not
// lose its connection, and with it its registration.
func TestRemotingWarmUpKeepsBrokerConnections(t *testing.T) {
	tn := startRemotingNode(t, func(c *Config) { c.WarmUp = time.Hour })
	c := dialRemoting(t, tn)
	if resp := c.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "known", "other")); resp.Code != remoting.Success {
		t.Fatal(resp)
	}
	c.send(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 2, ExtFields: map[string]string{"topic": "unknown"}})
	// Not answered (the broker's call times out), and the connection lives.
	if resp := c.call(&remoting.Command{Code: remoting.GetBrokerClusterInfo, Opaque: 3}); resp.Code != remoting.Success {
		t.Fatalf("after a warm-up miss on a broker's connection: %+v", resp)
	}
	if _, ok := tn.Registry().Lease("DefaultCluster", "127.0.0.1:10911"); !ok {
		t.Fatal("a warm-up route miss unregistered the broker that asked")
	}
}

// TestRemotingClientFrameCap: without broker registration, frames are held
// to the client request cap (as QUIC caps a client's frames), not 16 MiB.
func TestRemotingClientFrameCap(t *testing.T) {
	big := &remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 1, ExtFields: map[string]string{"topic": "t"},
		Body: make([]byte, 2<<20)}
	clientOnly := startNode(t, func(c *Config) { c.RemotingAddr = "127.0.0.1:0" })
	c := dialRemoting(t, clientOnly)
	frame, err := big.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// The node closes the connection once it has read the length prefix,
	// so the write of the rest may well fail with a reset: that is the
	// point, not an error.
	c.nc.Write(frame)
	c.expectClosed()
	brokers := startRemotingNode(t, nil)
	b := dialRemoting(t, brokers)
	if resp := b.call(big); resp.Code != remoting.TopicNotExist {
		t.Fatalf("a 2 MiB frame where brokers register: %+v", resp)
	}
}

func TestRemotingMetrics(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: 1, ExtFields: map[string]string{"topic": "x"}})
	c.call(&remoting.Command{Code: 4321, Opaque: 2})
	families, err := tn.stats.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetValue() + "}"
			}
			if m.Counter != nil {
				got[key] = m.Counter.GetValue()
			} else if m.Gauge != nil {
				got[key] = m.Gauge.GetValue()
			}
		}
	}
	for key, want := range map[string]float64{
		"edgereg_remoting_requests_total{105}":   1,
		"edgereg_remoting_requests_total{other}": 1,
		"edgereg_remoting_connections":           1,
		"edgereg_route_reads_total{not_found}":   1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}

// FuzzRemotingHandler feeds decoded commands of any code and extFields to
// the node's handler, with brokers and admin allowed: no input may panic or
// answer a two-way request without the request's opaque. Seeds are the
// RocketMQ fixtures.
func FuzzRemotingHandler(f *testing.F) {
	entries, err := os.ReadDir(rocketmqFixtures)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".hex") && !strings.Contains(e.Name(), "body") {
			f.Add(rmqFixture(f, e.Name()))
		}
	}
	tn := startRemotingNode(f, func(c *Config) { c.RemotingAllowAdmin = true })
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, err := remoting.ReadCommand(bytes.NewReader(frame), 1<<20)
		if err != nil || req.IsResponse() {
			return
		}
		resp := tn.remoting.ServeRemoting(context.Background(), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, req)
		if resp == nil {
			return
		}
		if resp.Opaque != req.Opaque || !resp.IsResponse() {
			t.Fatalf("answer %+v to %+v", resp, req)
		}
		if _, err := resp.Encode(); err != nil {
			t.Fatalf("answer does not encode: %v", err)
		}
	})
}

// TestRemotingRouteBodiesFollowChanges: route bodies are cached per version,
// so a changed route is never answered from the cache.
func TestRemotingRouteBodiesFollowChanges(t *testing.T) {
	tn := startRemotingNode(t, nil)
	c := dialRemoting(t, tn)
	c.call(registerCmd(t, 1, 0, "127.0.0.1:10911", remoting.DataVersion{Counter: 1}, "a", "b"))
	ask := func(op int32, version int16) *remoting.TopicRouteData {
		t.Helper()
		resp := c.call(&remoting.Command{Code: remoting.GetRouteInfoByTopic, Opaque: op, Version: version, ExtFields: map[string]string{"topic": "a"}})
		r, err := remoting.DecodeTopicRouteData(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(2, remoting.V4_5_2); r.QueueDatas[0].Perm != 6 {
		t.Fatalf("%+v", r)
	}
	ask(3, remoting.V5_3_3)
	if _, err := tn.Registry().WipeWritePerm("broker-a"); err != nil {
		t.Fatal(err)
	}
	for i, v := range []int16{remoting.V4_5_2, remoting.V5_3_3} {
		if r := ask(int32(4+i), v); r.QueueDatas[0].Perm != remoting.PermRead {
			t.Fatalf("version %d after a perm wipe: %+v", v, r.QueueDatas)
		}
	}
}
