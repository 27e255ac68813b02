package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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

// metricsAddedElsewhere are metric names the rules and dashboard use that
// this tree may not define yet: the refusal, TLS and denial counters and
// the policy call histogram come with their own changes. Once a name is in
// the node's source it is checked like any other.
var metricsAddedElsewhere = map[string]bool{
	"edgereg_connections_refused_total":    true,
	"edgereg_tls_handshake_failures_total": true,
	"edgereg_requests_denied_total":        true,
	"edgereg_policy_call_duration_seconds": true,
}

// TestMonitoringNamesExist: every edgereg_ metric a rule or a dashboard
// panel queries is one the node defines, so a renamed metric breaks this
// test instead of an alert silently never firing; every alert has a
// promtool test.
func TestMonitoringNamesExist(t *testing.T) {
	var source strings.Builder
	files, _ := filepath.Glob("../../node/*.go")
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			b, _ := os.ReadFile(f)
			source.Write(b)
		}
	}
	defined := func(name string) bool {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && strings.Contains(source.String(), `"`+base+`"`) {
				return true
			}
		}
		return strings.Contains(source.String(), `"`+name+`"`)
	}
	metric := regexp.MustCompile(`\bedgereg_[a-z0-9_]+`)
	check := func(where, expr string) {
		for _, name := range metric.FindAllString(expr, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			if !defined(name) && !metricsAddedElsewhere[base] {
				t.Errorf("%s queries %s, which the node does not define", where, name)
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
