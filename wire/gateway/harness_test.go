package gateway_test

import (
	"bufio"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
)

// The tests run real nodes from node/nodetest (test files only: the package
// itself never imports node), a real remoting.Server on loopback TCP in
// front of the gateway, and speak remoting to it as brokers and clients do.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// site is an edge site: a gateway with its remoting listener and admin
// handler, in front of real nodes.
type site struct {
	t     testing.TB
	ca    *nodetest.CA
	nodes []*nodetest.Node
	gw    *gateway.Gateway
	addr  string
	admin *httptest.Server
	ops   map[*nodetest.Node]*client.Conn
}

func startSite(t testing.TB, n int, edit func(*gateway.Config)) *site {
	t.Helper()
	return startSiteNodes(t, n, nil, edit)
}

// startSiteNodes is startSite with nodeEdit changing every node's config.
func startSiteNodes(t testing.TB, n int, nodeEdit func(*node.Config), edit func(*gateway.Config)) *site {
	t.Helper()
	s := &site{t: t, ca: nodetest.NewCA(t), ops: make(map[*nodetest.Node]*client.Conn)}
	var addrs []string
	for range n {
		tn := nodetest.Start(t, s.ca, nodeEdit)
		s.nodes = append(s.nodes, tn)
		addrs = append(addrs, tn.Addr())
	}
	s.startGateway(addrs, edit)
	return s
}

// startGateway starts the site's gateway in front of the nodes at addrs
// (theirs, or proxies of them), with edit changing its config.
func (s *site) startGateway(addrs []string, edit func(*gateway.Config)) {
	t := s.t
	t.Helper()
	cfg := gateway.Config{
		Nodes:               nodes.Static(addrs...),
		NodeRefreshInterval: 50 * time.Millisecond,
		TLS:                 s.ca.TLS(t, pki.RoleBroker, "gateway"),
		ProbeInterval:       50 * time.Millisecond,
		PollInterval:        50 * time.Millisecond,
		RequestTimeout:      2 * time.Second,
		UpstreamTimeout:     3 * time.Second,
		Backoff:             nodes.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:              nodetest.Logger(),
	}
	if edit != nil {
		edit(&cfg)
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.gw = gw
	s.addr = serve(t, gw)
	s.admin = httptest.NewServer(gw.AdminHandler())
	t.Cleanup(func() {
		s.admin.Close()
		gw.Close()
	})
}

// serve runs a remoting server for h on loopback and returns its address;
// it is shut down when the test ends.
func serve(t testing.TB, h remoting.Handler) string {
	t.Helper()
	_, addr := serveGateway(t, h)
	return addr
}

// rmqConn is a remoting connection as a broker or client holds one.
type rmqConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (s *site) dial() *rmqConn {
	s.t.Helper()
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { nc.Close() })
	return &rmqConn{t: s.t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rmqConn) send(req *remoting.Command) {
	c.t.Helper()
	if _, err := req.WriteTo(c.nc); err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next frame, failing the test after a generous deadline:
// only against a hang. (20 s was not: under -race on a loaded machine the
// gateway inflating and decoding a registration of megabytes took longer,
// in TestCompressedRegistrationPinsNoInflatedBytes.)
func (c *rmqConn) next() *remoting.Command {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Minute))
	resp, err := remoting.ReadCommand(c.br, 0)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return resp
}

// call sends req and returns the response with its opaque.
func (c *rmqConn) call(req *remoting.Command) *remoting.Command {
	c.t.Helper()
	c.send(req)
	for {
		resp := c.next()
		if resp.Opaque == req.Opaque {
			if !resp.IsResponse() {
				c.t.Fatalf("frame with opaque %d is not a response", resp.Opaque)
			}
			return resp
		}
	}
}

var opaque atomic.Int32

func request(code int16, ext map[string]string, body []byte) *remoting.Command {
	return remoting.NewRequest(code, opaque.Add(1), ext, body)
}

// goRouteRequest is GET_ROUTEINFO_BY_TOPIC as rocketmq-client-go sends it.
func goRouteRequest(topic string) *remoting.Command {
	req := request(remoting.GetRouteInfoByTopic, map[string]string{"topic": topic}, nil)
	req.Language, req.Version = "GO", remoting.V4_5_2
	return req
}

// fixture reads a file of testdata/rocketmq, hex-decoding *.hex files.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "rocketmq", name))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, ".hex") {
		if b, err = hex.DecodeString(strings.TrimSpace(string(b))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return b
}

func fixtureCommand(t *testing.T, name string) *remoting.Command {
	t.Helper()
	c, err := remoting.DecodeFrame(fixture(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

func encode(t *testing.T, c *remoting.Command) []byte {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// operator dials a node with an operator credential, to look at it from
// the QUIC side.
func (s *site) operator(tn *nodetest.Node) *client.Conn {
	s.t.Helper()
	if c := s.ops[tn]; c != nil {
		select {
		case <-c.Done():
		default:
			return c
		}
	}
	c, err := client.Dial(nodetest.Context(s.t), tn.Addr(), client.Config{TLS: s.ca.TLS(s.t, pki.RoleOperator, "op")})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	s.ops[tn] = c
	return c
}

// registerQUIC registers a master with topics on every node, over QUIC.
func (s *site) registerQUIC(reg *wire.Register) {
	s.t.Helper()
	for _, tn := range s.nodes {
		if _, err := s.operator(tn).Register(nodetest.Context(s.t), reg); err != nil {
			s.t.Fatal(err)
		}
	}
}

// metric reads one sample of the gateway's /metrics; labels as written,
// e.g. `edgereg_gateway_route_reads_total{result="hit"}`.
func (s *site) metric(sample string) float64 {
	s.t.Helper()
	resp, err := http.Get(s.admin.URL + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				s.t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

func topicConfigs(queues uint32, names ...string) []wire.TopicConfig {
	out := make([]wire.TopicConfig, len(names))
	for i, n := range names {
		out[i] = wire.TopicConfig{Name: n, ReadQueues: queues, WriteQueues: queues, Perm: wire.PermRead | wire.PermWrite}
	}
	return out
}
