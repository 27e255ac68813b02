package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchRemotingRoute runs the remoting-route workload briefly against
// the fresh node bench starts itself: route reads through the node's
// remoting listener, then through a gateway's cache.
func TestBenchRemotingRoute(t *testing.T) {
	out, stderr, code := run(t, nil, "bench", "remoting-route",
		"--duration", "1s", "--warmup", "200ms", "--workers", "2", "--conns", "1",
		"--topics", "20", "--groups", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	var results []benchResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("bench -o json: %v\n%s", err, out)
	}
	if len(results) != 2 || results[0].Workload != "remoting-route/node" || results[1].Workload != "remoting-route/gateway" {
		t.Fatalf("results: %s", out)
	}
	if !strings.Contains(results[1].Note, "gateway CPU") {
		t.Errorf("the gateway row does not give the gateway's CPU: %q", results[1].Note)
	}
	for _, r := range results {
		if r.Ops == 0 || r.Errors != 0 || r.OpsPerSec <= 0 || r.P99Ms < r.P50Ms {
			t.Errorf("%s: %+v", r.Workload, r)
		}
	}
}
