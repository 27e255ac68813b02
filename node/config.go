package node

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/remoting"
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
	// DefaultMaxWatches bounds watched topics over every connection: a
	// million, about 700 MB of the node's memory (some 670 bytes a watched
	// topic with names of 127 bytes; up to about 930 MB if every name is a
	// consumer group's retry topic of wire.MaxGroupTopicNameLen).
	DefaultMaxWatches       = 1_000_000
	DefaultMaxBytesInFlight = 128 << 20
	DefaultUDPReceiveBuffer = 32 << 20
)

// Default admission limits (see Config).
const (
	// DefaultMaxConnsPerIdentity bounds one reader certificate.
	DefaultMaxConnsPerIdentity = 16
	// DefaultMaxBrokerConnsPerHost is generous: many brokers may share an
	// IP behind NAT, and brokers never compete with readers for it.
	DefaultMaxBrokerConnsPerHost = 1024
	// DefaultMaxBrokerConnsPerIdentity bounds one broker or operator
	// certificate over every source IP: as many as one IP's broker budget,
	// so a gateway's 1,000 brokers behind one certificate fit, while one
	// certificate from many IPs can no longer take every connection of
	// the node (MaxConns) and lock every other broker out.
	DefaultMaxBrokerConnsPerIdentity = DefaultMaxBrokerConnsPerHost
	DefaultMaxHandshakesPerHost      = 128
	// DefaultHandshakeQueueTimeout is how long a handshake may wait for a
	// slot: within the broker agent's dial timeout (wire/broker
	// DefaultDialTimeout, 15 s) with time to spare for the handshake.
	DefaultHandshakeQueueTimeout = 10 * time.Second
)

// DefaultMaxHandshakes returns the default node-wide handshake slots:
// 256 per CPU, enough to keep the CPUs busy when each handshake also waits
// a round trip or two for its client, few enough that each is done within
// a fraction of a second.
func DefaultMaxHandshakes() int { return 256 * maxProcs() }

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
	// StatusAddr is where the status page (/) and /status.json are served:
	// they show the whole topology, so by default ("") they are served with
	// the admin endpoints only when AdminAddr is a loopback address, and not
	// at all otherwise. An address serves them there on a listener of their
	// own (the same address as AdminAddr shares the admin listener); "off"
	// turns them off.
	StatusAddr string
	// DataDir holds the node's identity, keys, TLS material and KV config.
	DataDir string

	// CertFile, KeyFile and ClientCAFile replace the local CA with real
	// credentials; all three or none.
	CertFile, KeyFile, ClientCAFile string
	// RevocationFile names revoked client certificates: X.509 CRLs of the
	// client CAs, or a text list of leaf serials (pki.LoadRevocations);
	// re-read when it changes.
	RevocationFile string
	// Hosts are extra names and addresses for the local CA to put in the
	// node's certificate.
	Hosts []string
	// TLSKeyExchange chooses the handshakes' key exchanges: "hybrid" (the
	// default: post-quantum X25519MLKEM768 when the client offers it) or
	// "x25519" (X25519 alone: less CPU per handshake, no post-quantum
	// protection; see pki.KeyExchangeX25519).
	TLSKeyExchange string
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
	// MinLeaseTimeout and MaxLeaseTimeout bound the heartbeat timeout a
	// broker may ask for in its registration (it is clamped); default 1 s
	// and 10 min. ExpiryThreshold and policies are not clamped.
	MinLeaseTimeout, MaxLeaseTimeout time.Duration

	// MaxConns bounds connections in total (readers may hold at most 90 %
	// of it, so brokers and operators always find room), MaxConnsPerHost a
	// source IP's reader connections (clients, nodes, anonymous peers),
	// MaxStreamsPerConn concurrent streams per connection. An idle stream
	// costs the node about 10 KiB (its goroutine's stack, buffers, QUIC
	// state), so one IP's readers may hold about MaxConnsPerHost x
	// MaxStreamsPerConn x 10 KiB: 64 MiB at the defaults.
	MaxConns, MaxConnsPerHost, MaxStreamsPerConn int
	// MaxConnsPerIdentity bounds the connections of one reader certificate;
	// a certificate at its limit replaces its least recently active
	// connection rather than being refused. Default 16.
	MaxConnsPerIdentity int
	// MaxBrokerConnsPerHost bounds a source IP's broker and operator
	// connections, a budget of their own; a certificate on a full host
	// replaces its own least recently active connection there that holds
	// no live broker session (admission.go). Default 1024.
	MaxBrokerConnsPerHost int
	// MaxBrokerConnsPerIdentity bounds the connections of one broker or
	// operator certificate, over every source IP. At the limit its least
	// recently active connection that holds no live broker session is
	// replaced; when all hold one, the newest is refused (brokers sharing
	// a certificate never push each other out). Default 1024.
	MaxBrokerConnsPerIdentity int
	// MaxHandshakesPerHost bounds handshakes in progress from one source IP,
	// before any certificate is seen. Default 128.
	MaxHandshakesPerHost int
	// MaxHandshakes bounds the TLS handshakes the node works on at once,
	// node-wide; more wait for a slot, first come first served, at most
	// HandshakeQueueTimeout (then the handshake fails). A reconnect storm
	// then completes at the node's full handshake rate instead of every
	// handshake slowing down together past the clients' dial timeout.
	// Default DefaultMaxHandshakes() (256 per CPU).
	MaxHandshakes int
	// HandshakeQueueTimeout bounds the wait for a handshake slot. Default
	// 10 s (DefaultHandshakeQueueTimeout).
	HandshakeQueueTimeout time.Duration
	// MaxRequestLen caps frames from clients; MaxBrokerFrameLen from brokers
	// and operators.
	MaxRequestLen, MaxBrokerFrameLen int
	// MaxBytesInFlight bounds the bytes of request frames being received
	// at once, over all connections of one class: readers (clients, nodes,
	// anonymous peers) have one such budget, brokers and operators another,
	// so readers holding theirs never delay a registration or a heartbeat.
	// A frame's buffer grows only as its bytes arrive and only within its
	// class's budget, so memory follows bytes received, never lengths
	// peers declare. A frame that cannot get budget within the read
	// timeout is cut off as a slow sender. The readers of one source IP
	// hold at most a quarter of their class's budget (at least
	// MaxRequestLen). At least the largest frame size limit. Default 128 MiB (256 MiB for both classes). Each class has as
	// much again for its answers larger than 16 KiB being written, so a
	// peer that reads nothing cannot make the node hold an answer per
	// stream (the readers of one source IP hold at most a quarter of
	// theirs); an answer that cannot get budget within the write timeout
	// has its stream reset as a write that timed out. It is also what
	// brokers' and operators' QUIC connection receive windows may grow by
	// together, past their initial 128 KiB (readers' never grow), since
	// what a peer sent and the node has not read waits in QUIC's buffers
	// (admission.go, allowWindowIncrease).
	MaxBytesInFlight int
	// UDPReceiveBuffer is the receive buffer asked for the node's UDP
	// socket (SO_RCVBUFFORCE where the process may, else SO_RCVBUF up to
	// net.core.rmem_max). The kernel holds a storm's Initials there while
	// the node works through handshakes; at quic-go's 7 MiB, 10,000
	// brokers dialling at once overflowed it, and every dropped Initial
	// cost its broker a doubling retransmission timer. Kernel memory is
	// used only as datagrams wait. Default 32 MiB.
	UDPReceiveBuffer int
	// Workers bounds requests handled at once. Default 8 per CPU.
	Workers int
	// BrokerWorkers is a pool of its own for the requests of brokers and
	// operators (register, heartbeat, leases, ...), so readers that keep
	// every worker busy never delay a heartbeat into an expiry. Default a
	// quarter of Workers, at least 2.
	BrokerWorkers int
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
	// MaxWatches bounds watched topics over every connection (each
	// connection's count, as MaxWatchesPerConn counts them); the readers
	// of one source IP hold at most a quarter of it, brokers and operators
	// only the node's. Default DefaultMaxWatches.
	MaxWatches int

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
	// PolicyReadBudget bounds the route policy time one get-routes request
	// may spend (wasm.WithReadBudget); topics past it are answered by
	// PolicyRouteFailure and counted as fallbacks; default 250 ms.
	PolicyReadBudget time.Duration
	// PolicyRouteFailure says what a topic gets when the route policy
	// cannot answer: open (default) the unfiltered route, closed status
	// policy-failed (wire.StatusPolicyFailed).
	PolicyRouteFailure wasm.FailMode
	// PolicyConfirmFailure says what happens to due leases when the confirm
	// policy cannot answer: closed (default) holds them back until the next
	// scan, open removes them all.
	PolicyConfirmFailure wasm.FailMode

	// PacketConn, when set, is the socket to serve on instead of binding
	// Addr; the node closes it on Shutdown. Tests use it to run nodes on a
	// simulated network.
	PacketConn net.PacketConn

	// RemotingAddr, when set, is a TCP address where the node also speaks
	// RocketMQ's remoting protocol, so unmodified RocketMQ brokers and
	// clients can use it as their NameServer (README, "RocketMQ"). An empty
	// host binds loopback: the protocol has no TLS and no identity. Empty
	// or "off" (AdminOff) means no remoting listener.
	RemotingAddr string
	// RemotingAllowBrokers accepts broker registrations, renewals and
	// unregistrations over remoting; anyone who reaches the port can then
	// register or remove any broker.
	RemotingAllowBrokers bool
	// RemotingAllowAdmin accepts remoting's write and admin codes (KV put
	// and delete, write permission, topic deletion); anyone who reaches the
	// port can then change routes.
	RemotingAllowAdmin bool
	// RemotingKeepBrokersOnClose keeps a remoting broker registered when the
	// TCP connection it registered on closes, until its lease expires. By
	// default it is unregistered then, as a NameServer does, so a crashed
	// broker leaves the routes at once; only the registration made on that
	// connection goes, never a newer one.
	RemotingKeepBrokersOnClose bool
	// RemotingMaxFrame caps a remoting frame; default 16 MiB, RocketMQ's.
	RemotingMaxFrame int

	// Logger receives lifecycle events; default slog.Default().
	Logger *slog.Logger
	// Clock is for tests; default registry.SystemClock, whose monotonic
	// readings time leases (see registry.Clock).
	Clock registry.Clock
}

// WithDefaults returns the config with every unset field at its default.
func (c Config) WithDefaults() Config {
	setDefault(&c.Addr, DefaultAddr)
	setDefault(&c.AdminAddr, DefaultAdminAddr)
	setDefault(&c.DataDir, DefaultDataDir)
	if c.RemotingAddr == AdminOff {
		c.RemotingAddr = "" // README's default, as --admin-addr and --status-addr take it
	}
	setDefault(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	setDefault(&c.WarmUp, c.HeartbeatInterval)
	setDefault(&c.ExpiryThreshold, DefaultExpiryThreshold)
	setDefault(&c.ScanInterval, DefaultScanInterval)
	setDefault(&c.MinLeaseTimeout, registry.DefaultMinThreshold)
	setDefault(&c.MaxLeaseTimeout, registry.DefaultMaxThreshold)
	setDefault(&c.MaxConns, DefaultMaxConns)
	setDefault(&c.MaxConnsPerHost, DefaultMaxConnsPerHost)
	setDefault(&c.MaxConnsPerIdentity, DefaultMaxConnsPerIdentity)
	setDefault(&c.MaxBrokerConnsPerHost, DefaultMaxBrokerConnsPerHost)
	setDefault(&c.MaxBrokerConnsPerIdentity, DefaultMaxBrokerConnsPerIdentity)
	setDefault(&c.MaxHandshakesPerHost, DefaultMaxHandshakesPerHost)
	setDefault(&c.MaxHandshakes, DefaultMaxHandshakes())
	setDefault(&c.HandshakeQueueTimeout, DefaultHandshakeQueueTimeout)
	setDefault(&c.MaxStreamsPerConn, DefaultMaxStreamsPerConn)
	setDefault(&c.MaxRequestLen, wire.DefaultMaxRequestLen)
	setDefault(&c.MaxBrokerFrameLen, wire.DefaultMaxBrokerFrameLen)
	setDefault(&c.ReadTimeout, DefaultReadTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.MaxWatchesPerConn, DefaultMaxWatchesPerConn)
	setDefault(&c.MaxWatches, DefaultMaxWatches)
	setDefault(&c.MaxBytesInFlight, DefaultMaxBytesInFlight)
	setDefault(&c.UDPReceiveBuffer, DefaultUDPReceiveBuffer)
	setDefault(&c.PolicyCallTimeout, 20*time.Millisecond)
	setDefault(&c.PolicyCacheDir, filepath.Join(c.DataDir, "wasm-cache"))
	setDefault(&c.MaxPolicyUploadsPerMinute, DefaultMaxPolicyUploadsPerMinute)
	setDefault(&c.PolicyReadBudget, wasm.DefaultReadBudget)
	setDefault(&c.RemotingMaxFrame, remoting.DefaultMaxFrame)
	if c.Workers <= 0 {
		c.Workers = 8 * maxProcs()
	}
	if c.BrokerWorkers <= 0 {
		c.BrokerWorkers = max(2, c.Workers/4)
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
// names it by the flag of `edgereg node` that sets it (--max-conns), so a
// user of the command knows what to change.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--addr %q: %w", c.Addr, err)
	}
	if c.AdminAddr != AdminOff {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return fmt.Errorf("--admin-addr %q: %w", c.AdminAddr, err)
		}
	} else if c.Pprof {
		return errors.New("--pprof serves the profiler on the admin address, and --admin-addr is off")
	}
	if c.RemotingAddr != "" {
		if _, _, err := net.SplitHostPort(c.RemotingAddr); err != nil {
			return fmt.Errorf("--remoting-addr %q: %w", c.RemotingAddr, err)
		}
	}
	if c.RemotingMaxFrame < 64<<10 || c.RemotingMaxFrame > 1<<30 {
		return fmt.Errorf("--remoting-max-frame-size must be between 64 KiB and 1 GiB (65536 to 1073741824 bytes), got %d", c.RemotingMaxFrame)
	}
	if c.StatusAddr != "" && c.StatusAddr != AdminOff {
		if _, _, err := net.SplitHostPort(c.StatusAddr); err != nil {
			return fmt.Errorf("--status-addr %q: %w", c.StatusAddr, err)
		}
	}
	if _, err := pki.ParseKeyExchange(c.TLSKeyExchange); err != nil {
		return fmt.Errorf("--tls-key-exchange: %w", err)
	}
	if n := countSet(c.CertFile, c.KeyFile, c.ClientCAFile); n != 0 && n != 3 {
		return errors.New("--tls-cert, --tls-key and --tls-client-ca go together: give all three or none")
	}
	// Each setting is named by the flag of `edgereg node` that sets it,
	// so the message points at what to change.
	positive := []struct {
		flag string
		d    time.Duration
	}{
		{"--heartbeat-interval", c.HeartbeatInterval}, {"--expiry-threshold", c.ExpiryThreshold},
		{"--scan-interval", c.ScanInterval}, {"--read-timeout", c.ReadTimeout}, {"--write-timeout", c.WriteTimeout}, {"--idle-timeout", c.IdleTimeout},
		{"--policy-call-timeout", c.PolicyCallTimeout}, {"--policy-read-budget", c.PolicyReadBudget},
		{"--min-lease-timeout", c.MinLeaseTimeout}, {"--max-lease-timeout", c.MaxLeaseTimeout},
		{"--handshake-queue-timeout", c.HandshakeQueueTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%s must be positive, got %s", p.flag, p.d)
		}
	}
	if c.MaxLeaseTimeout < c.MinLeaseTimeout {
		return fmt.Errorf("--max-lease-timeout %s is below --min-lease-timeout %s", c.MaxLeaseTimeout, c.MinLeaseTimeout)
	}
	if c.ExpiryThreshold <= c.HeartbeatInterval {
		return fmt.Errorf("--expiry-threshold %s must exceed --heartbeat-interval %s, or every broker expires between heartbeats", c.ExpiryThreshold, c.HeartbeatInterval)
	}
	limits := []struct {
		flag string
		v    int
	}{
		{"--max-conns", c.MaxConns}, {"--max-conns-per-host", c.MaxConnsPerHost},
		{"--max-streams-per-conn", c.MaxStreamsPerConn}, {"--workers", c.Workers},
		{"--max-conns-per-identity", c.MaxConnsPerIdentity},
		{"--max-broker-conns-per-host", c.MaxBrokerConnsPerHost},
		{"--max-broker-conns-per-identity", c.MaxBrokerConnsPerIdentity},
		{"--max-handshakes-per-host", c.MaxHandshakesPerHost}, {"--broker-workers", c.BrokerWorkers},
		{"--max-handshakes", c.MaxHandshakes},
		{"--max-request-size", c.MaxRequestLen}, {"--max-broker-frame-size", c.MaxBrokerFrameLen},
		{"--max-watches-per-conn", c.MaxWatchesPerConn}, {"--max-watches", c.MaxWatches}, {"--max-bytes-in-flight", c.MaxBytesInFlight},
		{"--udp-receive-buffer", c.UDPReceiveBuffer},
		{"--max-policy-uploads-per-minute", c.MaxPolicyUploadsPerMinute},
	}
	for _, l := range limits {
		if l.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", l.flag, l.v)
		}
	}
	if c.PolicyDir != "" {
		if fi, err := os.Stat(c.PolicyDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--policy-dir %q is not a directory", c.PolicyDir)
		}
	}
	// A credential file that is not there is a setting to correct, named
	// here, not the node's failure to load credentials ("credentials: stat ...").
	for _, f := range []struct{ flag, path string }{
		{"--tls-cert", c.CertFile}, {"--tls-key", c.KeyFile}, {"--tls-client-ca", c.ClientCAFile}, {"--revocations", c.RevocationFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return fmt.Errorf("%s %q: %w", f.flag, f.path, err)
		}
	}
	for _, l := range []struct {
		flag string
		v    int
	}{{"--max-request-size", c.MaxRequestLen}, {"--max-broker-frame-size", c.MaxBrokerFrameLen}} {
		if l.v > wire.MaxFrameLen {
			return fmt.Errorf("%s may not exceed %d bytes (the protocol's frame limit), got %d", l.flag, wire.MaxFrameLen, l.v)
		}
	}
	if largest := max(c.MaxBrokerFrameLen, c.MaxRequestLen); c.MaxBytesInFlight < largest {
		return fmt.Errorf("--max-bytes-in-flight %d is below the largest frame size limit %d (--max-request-size, --max-broker-frame-size): such a frame could never be received", c.MaxBytesInFlight, largest)
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
