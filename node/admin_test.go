package node

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminEndpoints(t *testing.T) {
	clk := &testClock{now: time.Now()}
	tn := startNode(t, func(c *Config) {
		c.AdminAddr = "127.0.0.1:0"
		c.WarmUp = time.Minute
		c.Clock = clk
		c.Pprof = true
	})
	base := "http://" + tn.AdminAddr().String()
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if code, _ := httpGet(t, base+"/debug/pprof/"); code != 200 {
		t.Fatalf("/debug/pprof/ with Pprof on = %d", code)
	}
	if code, body := httpGet(t, base+"/readyz"); code != 503 || !strings.Contains(body, "warming up") {
		t.Fatalf("/readyz while warming up = %d %q", code, body)
	}
	ctx := ctxT(t)
	c := tn.dial(pki.RoleOperator)
	c.Route(ctx, "missing", wire.ClientAttrs{}) // a warming-up miss
	clk.advance(2 * time.Minute)
	if code, _ := httpGet(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz after warm-up = %d", code)
	}
	ack, err := c.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t"))
	if err != nil {
		t.Fatal(err)
	}
	c.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch})
	c.Route(ctx, "t", wire.ClientAttrs{})
	c.Route(ctx, "missing", wire.ClientAttrs{})
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		"edgereg_registrations_total 1",
		"edgereg_heartbeats_total 1",
		`edgereg_route_reads_total{result="hit"} 1`,
		`edgereg_route_reads_total{result="not_found"} 1`,
		`edgereg_route_reads_total{result="warming_up"} 1`,
		`edgereg_request_duration_seconds_count{kind="register"} 1`,
		"edgereg_leases 1",
		"edgereg_connections 1",
		"edgereg_ready 1",
		"process_cpu_seconds_total",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// testClock is a settable clock for node tests.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestAdminRefusesHugeHeaders: the admin and status servers took Go's
// default of 1 MB of request headers, so anyone reaching the admin address
// (0.0.0.0 for probes and Prometheus) made the node hold a megabyte per
// connection for the header timeout, on as many connections as they
// opened. Probes and scrapers send a few hundred bytes; more is refused.
func TestAdminRefusesHugeHeaders(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	c := http.Client{Timeout: 5 * time.Second}
	get := func(header int) int {
		req, err := http.NewRequest("GET", "http://"+tn.AdminAddr().String()+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Pad", strings.Repeat("a", header))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(2000); code != http.StatusOK {
		t.Fatalf("/healthz with a 2 KB header = %d", code)
	}
	if code := get(512 << 10); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("/healthz with a 512 KB header = %d, want 431", code)
	}
}

// TestPprofBeyondLoopbackIsWarned: --pprof with a non-loopback admin
// address (the Kubernetes manifest's 0.0.0.0, for probes) serves the
// profiler, which has no authentication, to everyone who reaches it: CPU
// profiles and traces on demand, a forced GC per heap dump. The status
// page's placement was warned of; this was silent. The address is not
// bound here: the warning depends on the configuration alone.
func TestPprofBeyondLoopbackIsWarned(t *testing.T) {
	for _, tc := range []struct {
		admin string
		pprof bool
		warn  bool
	}{
		{"0.0.0.0:9877", true, true},
		{"10.1.2.3:9877", true, true},
		{"0.0.0.0:9877", false, false},
		{"127.0.0.1:9877", true, false},
	} {
		var logs strings.Builder
		n := &Node{cfg: Config{AdminAddr: tc.admin, StatusAddr: AdminOff, Pprof: tc.pprof},
			log: slog.New(slog.NewTextHandler(&logs, nil))}
		(&adminServer{n: n, statusHere: AdminOff}).logPlacement()
		if got := strings.Contains(logs.String(), "profiler"); got != tc.warn {
			t.Errorf("admin %s, pprof %v: warned %v, want %v: %s", tc.admin, tc.pprof, got, tc.warn, logs.String())
		}
	}
}
