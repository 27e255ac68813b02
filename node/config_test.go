package node

import (
	"strings"
	"testing"
	"time"
)

// TestConfigRefusesWhatCannotWork: each invalid admission, lease-bound and
// status setting is refused with a message that names it.
func TestConfigRefusesWhatCannotWork(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"identity limit", func(c *Config) { c.MaxConnsPerIdentity = -1 }, "--max-conns-per-identity"},
		{"broker host limit", func(c *Config) { c.MaxBrokerConnsPerHost = -1 }, "--max-broker-conns-per-host"},
		{"handshakes", func(c *Config) { c.MaxHandshakesPerHost = -1 }, "--max-handshakes-per-host"},
		{"handshake slots", func(c *Config) { c.MaxHandshakes = -1 }, "--max-handshakes must be positive"},
		{"handshake queue", func(c *Config) { c.HandshakeQueueTimeout = -time.Second }, "--handshake-queue-timeout"},
		{"key exchange", func(c *Config) { c.TLSKeyExchange = "rsa" }, `--tls-key-exchange: key exchange "rsa"`},
		{"broker workers", func(c *Config) { c.BrokerWorkers = -1 }, ""}, // negative means the default
		{"min lease", func(c *Config) { c.MinLeaseTimeout = -time.Second }, "--min-lease-timeout"},
		{"lease bounds", func(c *Config) { c.MinLeaseTimeout, c.MaxLeaseTimeout = time.Minute, time.Second }, "--max-lease-timeout 1s is below --min-lease-timeout 1m0s"},
		{"status address", func(c *Config) { c.StatusAddr = "nohostport" }, `--status-addr "nohostport"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			tc.edit(&c)
			err := c.WithDefaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	d := Config{}.WithDefaults()
	if d.BrokerWorkers < 2 || d.StatusAddr != "" || d.MaxLeaseTimeout != 10*time.Minute || d.MinLeaseTimeout != time.Second {
		t.Fatalf("defaults: broker workers %d, status %q, lease bounds %s..%s", d.BrokerWorkers, d.StatusAddr, d.MinLeaseTimeout, d.MaxLeaseTimeout)
	}
}
