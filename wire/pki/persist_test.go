package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// setClock makes the local CA read the time from at, for one test.
func setClock(t *testing.T, at func() time.Time) {
	old := clock
	clock = at
	t.Cleanup(func() { clock = old })
}

// TestClockBehindKeepsCredentials: an edge machine without a battery-backed
// clock restarts with its clock years behind (before NTP corrects it). The
// node's and operator's credentials, valid in real time, must survive that
// start untouched; before, EnsureLocal found them "not valid yet", issued
// new ones dated by the wrong clock over them, and once the clock was
// corrected the node served a certificate that had expired, and the
// operator credential every CLI command uses had too.
func TestClockBehindKeepsCredentials(t *testing.T) {
	dir := t.TempDir()
	if _, err := EnsureLocal(dir, nil); err != nil {
		t.Fatal(err)
	}
	files := []string{"ca.crt", "ca.key", "node.crt", "node.key", "operator.crt", "operator.key"}
	read := func() map[string][]byte {
		m := map[string][]byte{}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(TLSDir(dir), f))
			if err != nil {
				t.Fatal(err)
			}
			m[f] = b
		}
		return m
	}
	before := read()
	behind := time.Now().Add(-2 * 365 * 24 * time.Hour)
	setClock(t, func() time.Time { return behind })
	l, err := EnsureLocal(dir, nil)
	if err != nil {
		t.Fatalf("start with the clock behind: %v", err)
	}
	after := read()
	for _, f := range files {
		if !bytes.Equal(before[f], after[f]) {
			t.Errorf("%s was replaced while the clock was 2 years behind", f)
		}
	}
	if !bytes.Equal(l.Node.Leaf.Raw, mustLeaf(t, before["node.crt"])) {
		t.Error("the node serves another certificate than the one on disk")
	}
	// What has to be issued while the clock is behind is refused, saying
	// why, rather than dated by a clock that is known wrong.
	_, err = EnsureLocal(dir, []string{"new.example"})
	if err == nil || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("a new host while the clock is behind: %v, want an error about the clock", err)
	}
	if !bytes.Equal(before["node.crt"], read()["node.crt"]) {
		t.Error("node.crt replaced by a refused issue")
	}
}

func mustLeaf(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.crt")
	if err := os.WriteFile(path, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := readCertFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return c.Raw
}
