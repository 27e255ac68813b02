package node

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminHeaderBoundIsTheDocumented16KB: README promises that every HTTP
// server "refuses request headers over 16 KB (431)". Go's server reads
// MaxHeaderBytes plus 4096 bytes of slack before it refuses, so with
// MaxHeaderBytes at 16 KiB a 20 KB header was still served.
func TestAdminHeaderBoundIsTheDocumented16KB(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.AdminAddr = "127.0.0.1:0" })
	c := http.Client{Timeout: 30 * time.Second}
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
	if code := get(12 << 10); code != http.StatusOK {
		t.Fatalf("/healthz with a 12 KB header = %d, want 200", code)
	}
	if code := get(17 << 10); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("/healthz with a 17 KB header = %d, want 431", code)
	}
}
