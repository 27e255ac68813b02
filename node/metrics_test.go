package node

import (
	"regexp"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire/pki"
)

// TestMetricLabelsOneSpelling: label values that name a code, result,
// reason or hook are snake_case, so a query says code="not_found" and
// never has to guess between "not found" and "not-found"; a kind is the
// protocol's type name (get-routes), as in logs and errors.
func TestMetricLabelsOneSpelling(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	ctx := ctxT(t)
	c := tn.dial(pki.RoleOperator)
	if _, err := c.KVGet(ctx, "no-such-namespace", "no-such-key"); err == nil {
		t.Fatal("KVGet of a missing key succeeded")
	}
	if _, err := c.Leases(ctx); err != nil {
		t.Fatal(err)
	}
	_, body := httpGet(t, "http://"+tn.AdminAddr().String()+"/metrics")
	label := regexp.MustCompile(`\b(code|result|reason|hook)="([^"]*)"`)
	snake := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)
	sawCode := false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "edgereg_") {
			continue
		}
		for _, m := range label.FindAllStringSubmatch(line, -1) {
			if !snake.MatchString(m[2]) {
				t.Errorf("label %s=%q is not snake_case: %s", m[1], m[2], line)
			}
			if m[1] == "code" && m[2] == "not_found" {
				sawCode = true
			}
		}
	}
	if !sawCode {
		t.Errorf("no edgereg_request_errors_total{code=\"not_found\"} after a missing KV key:\n%s", grepLines(body, "request_errors"))
	}
	if !strings.Contains(body, `edgereg_build_info{alpn="edgereg/1",commit=`) {
		t.Errorf("no edgereg_build_info:\n%s", grepLines(body, "build_info"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestEveryRefusalReasonIsPresentAtZero: every reason a connection can be
// refused for has its series from the start, so an alert on a rate of
// refusals by reason sees a new one from its first refusal.
func TestEveryRefusalReasonIsPresentAtZero(t *testing.T) {
	tn := startNode(t, nil)
	reasons := []string{refusedMaxConns, refusedHandshakes, refusedPerHost, refusedClientShare,
		refusedPerIdentity, refusedNoIdentity, refusedQueue}
	fams, err := tn.stats.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		if f.GetName() != "edgereg_connections_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					have[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range reasons {
		if !have[r] {
			t.Errorf("edgereg_connections_refused_total{reason=%q} is missing before any refusal", r)
		}
	}
}
