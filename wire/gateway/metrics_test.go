package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/gateway"
	"github.com/edgereg/edgereg/wire/remoting"
)

// TestHostileBrokerNamesKeepMetricsUp: a REGISTER_BROKER in the ROCKETMQ
// binary header carries its names as raw bytes, and the gateway kept a
// broker whose cluster name was not UTF-8 (the nodes refused it, but the
// gateway's table held it). Its label value made the scrape panic inside
// the Prometheus registry's collector goroutine, so one unauthenticated
// remoting frame, then Prometheus's next scrape, killed the gateway. The
// gateway refuses a name the nodes would refuse (not UTF-8, a control
// character, over 255 bytes) and /metrics keeps answering.
func TestHostileBrokerNamesKeepMetricsUp(t *testing.T) {
	s := startSite(t, 1, nil)
	c := s.dial()
	for field, value := range map[string]string{
		"clusterName":  "bad\xffcluster",
		"brokerName":   "bad\x1b[2Jname",
		"brokerAddr":   "10.0.0.\xff:10911",
		"clusterName ": strings.Repeat("c", 256),
	} {
		reg := fixtureCommand(t, "v5_register_broker_request.hex")
		reg.ExtFields[strings.TrimSpace(field)] = value
		reg.SerializeType = remoting.SerializeRocketMQ
		reg.Opaque = opaque.Add(1)
		if resp := c.call(reg); resp.Code == remoting.Success {
			t.Errorf("%s %q: registration answered SUCCESS", strings.TrimSpace(field), value)
		}
	}
	if n := len(s.gw.Brokers()); n != 0 {
		t.Errorf("the gateway keeps %d brokers with names the nodes refuse: %+v", n, s.gw.Brokers())
	}
	// A name the nodes accept may hold quotes and backslashes: the label
	// value is escaped in the exposition, so the scrape still parses.
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	reg.ExtFields["clusterName"] = `q"b\s`
	if resp := c.call(reg); resp.Code != remoting.Success {
		t.Fatalf("registration with cluster %q: %d %q", reg.ExtFields["clusterName"], resp.Code, resp.Remark)
	}
	resp, err := http.Get(s.admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "edgereg_gateway_brokers 1") ||
		!strings.Contains(string(b), `edgereg_gateway_broker_registered_nodes{addr="127.0.0.1:10911",cluster="q\"b\\s"}`) {
		t.Errorf("/metrics = %d:\n%.2000s", resp.StatusCode, b)
	}
}

// lineBuffer counts log lines by message, for the gateway's logger.
type lineBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, string(p))
	return len(p), nil
}

func (b *lineBuffer) count(msg string) (n int, suppressed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.lines {
		if strings.Contains(l, msg) {
			n++
			suppressed = suppressed || strings.Contains(l, "suppressed_since_last")
		}
	}
	return n, suppressed
}

// TestPeerWarningsAreRateLimited: the remoting listener has no
// authentication, and the gateway wrote a warning per refused registration
// (and per withheld route read, per unwatchable topic): a peer looping on
// one request filled the disk at its own pace. As the node's, the warnings
// peers cause are rate-limited: a burst, then one a second, and the next
// line says how many were left out.
func TestPeerWarningsAreRateLimited(t *testing.T) {
	var logs lineBuffer
	s := startSite(t, 1, func(c *gateway.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	c := s.dial()
	const requests = 300
	start := time.Now()
	for range requests {
		reg := fixtureCommand(t, "v5_register_broker_request.hex")
		reg.ExtFields["clusterName"] = "bad\x1bcluster"
		reg.Opaque = opaque.Add(1)
		if resp := c.call(reg); resp.Code == remoting.Success {
			t.Fatal("a cluster name with a control character registered")
		}
	}
	elapsed := time.Since(start)
	time.Sleep(time.Second) // one more line may come, and it carries the count
	reg := fixtureCommand(t, "v5_register_broker_request.hex")
	reg.ExtFields["clusterName"] = "bad\x1bcluster"
	reg.Opaque = opaque.Add(1)
	c.call(reg)
	n, suppressed := logs.count("broker registration refused")
	// At most the burst, one a second of the loop, and the line after it.
	if limit := 10 + int(elapsed/time.Second) + 2; n > limit || !suppressed {
		t.Errorf("%d refused registrations in %s logged %d warnings (at most %d), suppressed count logged: %v", requests+1, elapsed, n, limit, suppressed)
	}
}
