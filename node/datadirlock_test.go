package node

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDataDirHeldByOneNode: two nodes started on one data directory (make
// run twice with other ports, a unit and a hand-started node) both ran,
// with the same node id and one KV file that each rewrote from its own
// memory, losing the other's writes. The second is refused, naming the
// directory; once the first stops, the directory can be used again.
func TestDataDirHeldByOneNode(t *testing.T) {
	cfg := Config{Addr: "127.0.0.1:0", AdminAddr: AdminOff, DataDir: t.TempDir(), WarmUp: -1,
		PolicyCacheDir: sharedPolicyCache, Logger: quietLogger()}
	shutdown := func(n *Node) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := New(cfg); err == nil {
		shutdown(second)
		shutdown(first)
		t.Fatal("a second node started on a data directory a running node holds")
	} else if !strings.Contains(err.Error(), cfg.DataDir) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second node: %v; want an error naming the directory as in use", err)
	}
	shutdown(first)
	again, err := New(cfg)
	if err != nil {
		t.Fatalf("after the first node stopped: %v", err)
	}
	shutdown(again)
}

// TestPprofOffByDefault: the profiler (heap contents, command line,
// goroutine stacks with their arguments) is served only with Pprof; a node
// started with defaults answers 404 under /debug/pprof/ while its other
// admin endpoints work.
func TestPprofOffByDefault(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	base := "http://" + tn.AdminAddr().String()
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		if code, _ := httpGet(t, base+path); code != http.StatusNotFound {
			t.Errorf("%s without Pprof = %d, want 404", path, code)
		}
	}
}

// TestPprofNeedsTheAdminAddress: --pprof with --admin-addr off started a
// node with no profiler and no word about it; the combination is refused.
func TestPprofNeedsTheAdminAddress(t *testing.T) {
	err := Config{Pprof: true, AdminAddr: AdminOff}.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "--pprof") || !strings.Contains(err.Error(), "--admin-addr") {
		t.Fatalf("Validate = %v, want a refusal naming --pprof and --admin-addr", err)
	}
}

// TestPprofRefusesRebindingOnLoopback: on a loopback admin address the
// profiler answered any Host, so a hostile web page in a browser on the
// same machine could, through DNS rebinding, start CPU profiles and traces
// and read goroutine dumps; it gets the status page's guard (IP or
// localhost only).
func TestPprofRefusesRebindingOnLoopback(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0"; c.Pprof = true })
	url := "http://" + tn.AdminAddr().String() + "/debug/pprof/heap"
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "rebind.example:9877"
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("/debug/pprof/ for Host rebind.example = %d, want 403", resp.StatusCode)
	}
	if code, _ := httpGet(t, url); code != 200 {
		t.Errorf("/debug/pprof/heap by IP = %d, want 200", code)
	}
}
