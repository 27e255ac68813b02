package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
)

// Defaults a node gets with no configuration.
const (
	DefaultAddr              = "127.0.0.1:9876"
	DefaultAdminAddr         = "127.0.0.1:9877"
	DefaultDataDir           = "./edgereg-data"
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultExpiryThreshold   = registry.DefaultThreshold
	DefaultScanInterval      = 5 * time.Second
	DefaultMaxConns          = 10_000
	DefaultMaxConnsPerHost   = 64
	DefaultMaxStreamsPerConn = 100
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultMaxWatchesPerConn = 10_000
	DefaultMaxBytesInFlight  = 256 << 20
)

// AdminOff as Config.AdminAddr turns the admin HTTP server off.
const AdminOff = "off"

// Config configures a Node. The zero value, after Defaults, runs a node on
// 127.0.0.1:9876 with its data in ./edgereg-data and a local CA.
type Config struct {
	// Addr is the UDP address to listen on.
	Addr string
	// AdminAddr is the HTTP address for /healthz, /readyz and /metrics;
	// "off" turns it off. Default 127.0.0.1:9877.
	AdminAddr string
	// DataDir holds the node's identity, keys, TLS material and KV config.
	DataDir string

	// CertFile, KeyFile and ClientCAFile replace the local CA with real
	// credentials; all three or none.
	CertFile, KeyFile, ClientCAFile string
	// RevocationFile lists revoked client certificate serials (hex, one a
	// line); re-read at start.
	RevocationFile string
	// Hosts are extra names and addresses for the local CA to put in the
	// node's certificate.
	Hosts []string
	// AllowAnonymousClients lets peers without a certificate read routes.
	AllowAnonymousClients bool
	// Pprof serves Go's profiler under /debug/pprof/ on the admin address.
	Pprof bool

	// HeartbeatInterval is the brokers' heartbeat period; the warm-up window
	// defaults to it. Default 30 s.
	HeartbeatInterval time.Duration
	// WarmUp is how long after start a route miss says "warming up" rather
	// than "not found". Default HeartbeatInterval; negative disables.
	WarmUp time.Duration
	// ExpiryThreshold is how long a broker may stay silent by default.
	// Default 120 s.
	ExpiryThreshold time.Duration
	// ScanInterval is how often expired leases are looked for. Default 5 s.
	ScanInterval time.Duration

	// MaxConns bounds connections in total, MaxConnsPerHost per source IP,
	// MaxStreamsPerConn concurrent streams per connection.
	MaxConns, MaxConnsPerHost, MaxStreamsPerConn int
	// MaxRequestLen caps frames from clients; MaxBrokerFrameLen from brokers
	// and operators.
	MaxRequestLen, MaxBrokerFrameLen int
	// MaxBytesInFlight bounds the bytes of request frames being received
	// at once, over all connections: a frame's buffer grows only as its
	// bytes arrive and only within this budget, so memory follows bytes
	// received, never lengths peers declare. A frame that cannot get
	// budget within the read timeout is cut off as a slow sender. At least
	// the largest frame size limit. Default 256 MiB.
	MaxBytesInFlight int
	// Workers bounds requests handled at once. Default 8 per CPU.
	Workers int
	// ReadTimeout bounds how long a started frame may take to arrive; a slow
	// sender is cut off. Default 10 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds how long a frame the node writes may wait for
	// the peer to take it (QUIC flow control): a peer that stops reading
	// gets its stream reset with code 0x20. Default 10 s.
	WriteTimeout time.Duration
	// IdleTimeout closes a stream that sends nothing for this long. Default
	// 5 min (a broker heartbeats every 30 s).
	IdleTimeout time.Duration
	// MaxWatchesPerConn bounds watched topics per connection.
	MaxWatchesPerConn int

	// PolicyDir, when set, is a directory of policy modules (route.wasm,
	// expiry.wasm, confirm.wasm; see wasm.ReadDir) loaded at start and
	// whenever its files change, such as a mounted Kubernetes ConfigMap.
	PolicyDir string
	// PolicyCacheDir holds compiled policy modules, so a restart does not
	// compile them again; default DataDir/wasm-cache.
	PolicyCacheDir string
	// PolicyCallTimeout bounds each policy call; default 20 ms.
	PolicyCallTimeout time.Duration
	// MaxPolicyUploadsPerMinute bounds policy pushes and tests; default 10.
	MaxPolicyUploadsPerMinute int

	// PacketConn, when set, is the socket to serve on instead of binding
	// Addr; the node closes it on Shutdown. Tests use it to run nodes on a
	// simulated network.
	PacketConn net.PacketConn

	// Logger receives lifecycle events; default slog.Default().
	Logger *slog.Logger
	// Clock is for tests; default the wall clock.
	Clock registry.Clock
}

// WithDefaults returns the config with every unset field at its default.
func (c Config) WithDefaults() Config {
	setDefault(&c.Addr, DefaultAddr)
	setDefault(&c.AdminAddr, DefaultAdminAddr)
	setDefault(&c.DataDir, DefaultDataDir)
	setDefault(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	setDefault(&c.WarmUp, c.HeartbeatInterval)
	setDefault(&c.ExpiryThreshold, DefaultExpiryThreshold)
	setDefault(&c.ScanInterval, DefaultScanInterval)
	setDefault(&c.MaxConns, DefaultMaxConns)
	setDefault(&c.MaxConnsPerHost, DefaultMaxConnsPerHost)
	setDefault(&c.MaxStreamsPerConn, DefaultMaxStreamsPerConn)
	setDefault(&c.MaxRequestLen, wire.DefaultMaxRequestLen)
	setDefault(&c.MaxBrokerFrameLen, wire.DefaultMaxBrokerFrameLen)
	setDefault(&c.ReadTimeout, DefaultReadTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.MaxWatchesPerConn, DefaultMaxWatchesPerConn)
	setDefault(&c.MaxBytesInFlight, DefaultMaxBytesInFlight)
	setDefault(&c.PolicyCallTimeout, 20*time.Millisecond)
	setDefault(&c.PolicyCacheDir, filepath.Join(c.DataDir, "wasm-cache"))
	setDefault(&c.MaxPolicyUploadsPerMinute, DefaultMaxPolicyUploadsPerMinute)
	if c.Workers <= 0 {
		c.Workers = 8 * maxProcs()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = registry.SystemClock{}
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports the first setting that cannot work, with a message that
// names it.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("listen address %q: %w", c.Addr, err)
	}
	if c.AdminAddr != AdminOff {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return fmt.Errorf("admin address %q: %w", c.AdminAddr, err)
		}
	}
	if n := countSet(c.CertFile, c.KeyFile, c.ClientCAFile); n != 0 && n != 3 {
		return errors.New("--tls-cert, --tls-key and --tls-client-ca go together: give all three or none")
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"heartbeat interval", c.HeartbeatInterval}, {"expiry threshold", c.ExpiryThreshold},
		{"scan interval", c.ScanInterval}, {"read timeout", c.ReadTimeout}, {"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout},
		{"policy call timeout", c.PolicyCallTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%s must be positive, got %s", p.name, p.d)
		}
	}
	if c.ExpiryThreshold <= c.HeartbeatInterval {
		return fmt.Errorf("expiry threshold %s must exceed the heartbeat interval %s, or every broker expires between heartbeats", c.ExpiryThreshold, c.HeartbeatInterval)
	}
	limits := []struct {
		name string
		v    int
	}{
		{"max connections", c.MaxConns}, {"max connections per host", c.MaxConnsPerHost},
		{"max streams per connection", c.MaxStreamsPerConn}, {"workers", c.Workers},
		{"max request size", c.MaxRequestLen}, {"max broker frame size", c.MaxBrokerFrameLen},
		{"max watches per connection", c.MaxWatchesPerConn}, {"max bytes in flight", c.MaxBytesInFlight},
		{"max policy uploads per minute", c.MaxPolicyUploadsPerMinute},
	}
	for _, l := range limits {
		if l.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", l.name, l.v)
		}
	}
	if c.PolicyDir != "" {
		if fi, err := os.Stat(c.PolicyDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("policy directory %q is not a directory", c.PolicyDir)
		}
	}
	if c.MaxBrokerFrameLen > wire.MaxFrameLen || c.MaxRequestLen > wire.MaxFrameLen {
		return fmt.Errorf("frame size limits may not exceed %d bytes", wire.MaxFrameLen)
	}
	if largest := max(c.MaxBrokerFrameLen, c.MaxRequestLen); c.MaxBytesInFlight < largest {
		return fmt.Errorf("max bytes in flight %d is below the largest frame size limit %d: such a frame could never be received", c.MaxBytesInFlight, largest)
	}
	return nil
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}
