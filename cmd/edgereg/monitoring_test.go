package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

const monitoringDir = "deploy/monitoring"

// TestAlertRulesWithPromtool runs `promtool check rules` and `promtool test
// rules` on the shipped alerts. .ci/run installs promtool (Debian's
// prometheus package); in CI a missing promtool fails the test rather than
// skipping it, so the rules cannot go unchecked unnoticed.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found; .ci/run installs it (apt-get install prometheus)")
		}
		t.Skip("promtool not found (apt-get install prometheus); CI runs this test")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = monitoringDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// enumeratedLabels take a fixed set of values, each of which a node
// exports (the scrape below makes it produce the lazily created ones).
var enumeratedLabels = map[string]bool{"reason": true, "result": true, "kind": true, "role": true}

// targetLabels are added by Prometheus from the scrape target, not by the
// node.
var targetLabels = map[string]bool{"instance": true, "job": true}

// TestMonitoringNamesExist: every edgereg_ metric a rule or a dashboard
// panel queries, with every label it matches on or aggregates by, is one a
// real node exports on /metrics, so a renamed metric or label breaks this
// test instead of an alert silently never firing; every alert has a
// promtool test.
func TestMonitoringNamesExist(t *testing.T) {
	exported := scrapeExercisedNode(t)
	labelsOf := func(name string) (map[string]bool, bool) {
		if l, ok := exported[name]; ok {
			return l, true
		}
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if l, ok := exported[base]; ok {
					if suffix == "_bucket" {
						l = maps.Clone(l)
						l["le"] = true
					}
					return l, true
				}
			}
		}
		return nil, false
	}
	metric := regexp.MustCompile(`\b(edgereg_[a-z0-9_]+)(\{[^}]*\})?`)
	matcher := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	by := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	check := func(where, expr string) {
		// The labels an expression groups by must be on each of its
		// edgereg metrics (expressions here aggregate one kind of metric
		// at a time, or only by instance).
		var grouped []string
		for _, m := range by.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !targetLabels[l] {
					grouped = append(grouped, l)
				}
			}
		}
		for _, m := range metric.FindAllStringSubmatch(expr, -1) {
			name := m[1]
			labels, ok := labelsOf(name)
			if !ok {
				t.Errorf("%s queries %s, which a node does not export", where, name)
				continue
			}
			used := slices.Clone(grouped)
			for _, mm := range matcher.FindAllStringSubmatch(m[2], -1) {
				if !targetLabels[mm[1]] {
					used = append(used, mm[1])
				}
			}
			for _, l := range used {
				if !labels[l] {
					t.Errorf("%s uses label %q of %s, which has %v", where, l, name, slices.Sorted(maps.Keys(labels)))
				}
			}
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(monitoringDir, "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			check("alert "+r.Alert, r.Expr)
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") && !strings.Contains(string(tests), "alertname: "+r.Alert+",") {
				t.Errorf("alert %s has no test in alerts_test.yaml", r.Alert)
			}
		}
	}
	// The unit tests' input series are named and labelled as a node's
	// are, so a passing promtool test means the alert fires on real data:
	// a label that takes a fixed set of values (reason, result, kind,
	// role) holds one of the values the node exports.
	var unit struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(tests, &unit); err != nil {
		t.Fatal(err)
	}
	pair := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"`)
	for _, ut := range unit.Tests {
		for _, in := range ut.InputSeries {
			name, labels, _ := strings.Cut(in.Series, "{")
			if !strings.HasPrefix(name, "edgereg_") {
				continue
			}
			check("alerts_test.yaml series "+in.Series, in.Series)
			have, _ := labelsOf(name)
			for l := range have {
				if !strings.Contains(labels, l+"=") {
					t.Errorf("alerts_test.yaml series %s lacks label %q, which the node sets", in.Series, l)
				}
			}
			for _, m := range pair.FindAllStringSubmatch(labels, -1) {
				if enumeratedLabels[m[1]] && !exported[""][m[1]+"="+m[2]] {
					t.Errorf("alerts_test.yaml series %s: %s=%q is not a value the node exports", in.Series, m[1], m[2])
				}
			}
		}
	}
	for _, want := range []string{"EdgeregNodeDown", "EdgeregNotReady", "EdgeregExpiryWave", "EdgeregPolicyFallbacks",
		"EdgeregConnectionsRefused", "EdgeregRequestsDenied"} {
		if !strings.Contains(string(b), "alert: "+want+"\n") {
			t.Errorf("no alert %s", want)
		}
	}

	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	db, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(db, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] || len(p.Targets) == 0 {
			t.Errorf("panel %q: duplicate id or no query", p.Title)
		}
		ids[p.ID] = true
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr)
		}
	}
	if dash.UID == "" || len(dash.Panels) < 10 || alerts < 6 {
		t.Errorf("dashboard uid %q with %d panels, %d alerts", dash.UID, len(dash.Panels), alerts)
	}
}

// scrapeExercisedNode starts a real node, makes it produce every kind of
// series the monitoring queries (a registration, heartbeats, an expiry, a
// route read, an error, a denied request, a refused TLS handshake, a
// policy), scrapes /metrics and returns each metric's label names.
func scrapeExercisedNode(t *testing.T) map[string]map[string]bool {
	t.Helper()
	ca := nodetest.NewCA(t)
	tn := nodetest.Start(t, ca, func(c *node.Config) {
		c.AdminAddr = "127.0.0.1:0"
		c.HeartbeatInterval, c.ExpiryThreshold, c.ScanInterval = 200*time.Millisecond, time.Second, 50*time.Millisecond
	})
	ctx := nodetest.Context(t)
	dial := func(conf *tls.Config) *client.Conn {
		c, err := client.Dial(ctx, tn.Addr(), client.Config{TLS: conf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	op := dial(ca.TLS(t, pki.RoleOperator, "ops"))
	reg := brokerReg("broker-a", "10.0.0.1:10911", "orders")
	ack, err := op.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Heartbeat(ctx, &wire.Heartbeat{Cluster: reg.Cluster, Addr: reg.Addr, Epoch: ack.Lease.Epoch, DataVersion: reg.DataVersion}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.Route(ctx, "orders", wire.ClientAttrs{}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.KVGet(ctx, "ns", "missing"); err == nil {
		t.Fatal("kv get of a missing key succeeded")
	}
	module, err := os.ReadFile(filepath.Join("..", "..", "testdata", "wasm", "jitter-threshold.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.PolicyPush(ctx, "expiry", module); err != nil {
		t.Fatal(err)
	}
	for _, role := range []pki.Role{pki.RoleClient, pki.RoleBroker} {
		if err := dial(ca.TLS(t, role, "peer-"+string(role))).KVPut(ctx, "ns", "k", "v"); err == nil {
			t.Fatalf("a %s credential wrote the KV config", role)
		}
	}
	if c, err := client.Dial(ctx, tn.Addr(), client.Config{TLS: nodetest.NewCA(t).TLS(t, pki.RoleOperator, "stranger")}); err == nil {
		c.Close()
		t.Fatal("a node accepted a credential of another CA")
	}

	metricsURL := "http://" + tn.Node().AdminAddr().String() + "/metrics"
	var exported map[string]map[string]bool
	nodetest.WaitFor(t, "the broker to expire and the series to appear", func() bool {
		exported = scrape(t, metricsURL)
		return exported["edgereg_expiries_total"] != nil && exported["edgereg_requests_denied_total"] != nil
	})
	return exported
}

// scrape reads a /metrics page in Prometheus' text format and returns each
// metric's label names, and every value each label name has on any edgereg
// metric (under the key "").
func scrape(t *testing.T, url string) map[string]map[string]bool {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	out := map[string]map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		var labels string
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name, labels = line[:i], line[i:]
		}
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, m := range label.FindAllStringSubmatch(labels, -1) {
			out[name][m[1]] = true
			if strings.HasPrefix(name, "edgereg_") {
				if out[""] == nil {
					out[""] = map[string]bool{}
				}
				out[""][m[1]+"="+m[2]] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// A histogram's series are name_bucket, _count and _sum: file them
	// under the histogram's name too.
	for name, l := range out {
		if base, ok := strings.CutSuffix(name, "_bucket"); ok && out[base+"_count"] != nil {
			m := maps.Clone(l)
			delete(m, "le")
			out[base] = m
		}
	}
	return out
}
