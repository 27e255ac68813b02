package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/nodes"
)

// Defaults a Registrar gets for unset Config fields.
const (
	DefaultHeartbeatInterval = 30 * time.Second
	// DefaultProbeInterval is how often an idle session pings its node.
	DefaultProbeInterval  = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	// DefaultDialTimeout is Config.DialTimeout with the default
	// RequestTimeout: three times it.
	DefaultDialTimeout = 3 * DefaultRequestTimeout
	// MaxRequestTimeout caps Config.RequestTimeout: a request that has not
	// been answered in a minute is retried, not waited for.
	MaxRequestTimeout = time.Minute
)

// ErrInvalidConfig is wrapped by every error New returns for a bad Config,
// and by the topic methods for a bad topic.
var ErrInvalidConfig = errors.New("invalid broker registrar config")

// Identity is who the broker is: the fields of every registration.
type Identity struct {
	// Cluster is the broker's cluster name. Required.
	Cluster string
	// BrokerName is the broker group (master and slaves share it). Required.
	BrokerName string
	// BrokerID is wire.MasterID (0) for the master, above it for slaves.
	BrokerID int64
	// Addr is where producers and consumers reach the broker, host:port.
	// Required; with Cluster it keys the broker's lease on every node.
	Addr string
	// HAAddr is where slaves replicate from this broker, host:port.
	HAAddr string
	// Zone is the broker's zone, for zone-aware route policies.
	Zone string
	// ActingMaster lets the group's lowest-id slave stand in (read-only)
	// when the group has no master.
	ActingMaster bool
	// StateVersion orders the broker's configurations across restarts
	// (RocketMQ's stateVersion); it is sent as DataVersion.State.
	StateVersion uint64
}

// Config configures a Registrar.
type Config struct {
	// Identity names the broker. Required.
	Identity Identity
	// Topics is the broker's topic configuration at start.
	Topics []wire.TopicConfig
	// Nodes says which nodes to register with. Required.
	Nodes nodes.Source
	// NodeRefreshInterval is how often Nodes is read again. Default 30 s.
	NodeRefreshInterval time.Duration
	// TLS is the client TLS configuration (pki.ClientConfig with a broker
	// certificate). Required. A session cache is added when it has none, so
	// reconnects resume TLS sessions.
	TLS *tls.Config
	// HeartbeatInterval is how often each node's lease is renewed. Default 30 s.
	HeartbeatInterval time.Duration
	// ProbeInterval is how often a session that sent nothing else pings its
	// node. A node that crashed and came back answers the ping's packet
	// (padded for that: quic-go answers no packet of 42 bytes or less) with
	// a QUIC stateless reset, so the broker reconnects and registers within
	// a probe interval and a few round trips of the node's return, instead
	// of at its next heartbeat (QUIC's own keep-alives are too small to
	// draw a reset). While probing is on, Backoff.Max is capped at half of
	// it, so a node whose connection had already timed out is dialled
	// again often enough to be found within about a probe interval too.
	// Default 5 s; negative turns probing off.
	ProbeInterval time.Duration
	// HeartbeatTimeout is how long the broker asks each node to keep its
	// lease without a heartbeat; it must exceed HeartbeatInterval. Zero
	// means the node's default (120 s unless configured otherwise).
	HeartbeatTimeout time.Duration
	// RequestTimeout bounds each request. Default 5 s, at most
	// MaxRequestTimeout. A request carrying topics (a full registration,
	// a topic update) may take a millisecond per topic longer, so that a
	// large registration crosses a slow, lossy link instead of being cut
	// and started over at every attempt. Run also bounds its graceful
	// unregistration (dial included) by it.
	RequestTimeout time.Duration
	// DialTimeout bounds each dial of a session, the QUIC handshake.
	// Default three times RequestTimeout (DefaultDialTimeout, 15 s), at
	// most MaxRequestTimeout. A node busy with a reconnect storm keeps
	// handshakes waiting for a slot, first come first served (node
	// --max-handshakes, --handshake-queue-timeout, 10 s by default), and
	// says nothing meanwhile: a broker that gave up sooner would only
	// join the back of the queue again, and the node's work on its first
	// handshake would be lost. Only the first dial after a working
	// connection (or the first of the session) is this patient: after a
	// failed dial the node is more likely down than busy, and the next
	// dials wait RequestTimeout, so a node back from an outage is found
	// within a dial's first retransmissions instead of QUIC's backed-off
	// later ones.
	DialTimeout time.Duration
	// Backoff schedules retries of failed requests and reconnects, per
	// node. Default 200 ms to 30 s with full jitter; at most half the
	// ProbeInterval while probing is on.
	Backoff nodes.Backoff
	// Logger receives registrations, node list changes and failures;
	// default slog.Default().
	Logger *slog.Logger
	// Now tells the time for data version timestamps and NodeState; default
	// time.Now. Timers (heartbeats, backoff) use the runtime's clock.
	Now func() time.Time
	// OnStateChange, when set, is called with a node's state each time its
	// session connects, disconnects, registers (or resumes its lease),
	// loses its registration, or is refused for good (NodeState.Refused).
	// It is called from that node's session goroutine, in order for one
	// node and one call at a time, without the Registrar's lock held: it
	// may call the Registrar, and should return quickly. A session of a
	// node dropped from the node list reports nothing more, even if the
	// node is listed again.
	OnStateChange func(NodeState)
	// Transport, when set, is the QUIC transport to dial nodes from (see
	// client.Config.Transport); tests use it for a simulated network.
	Transport *quic.Transport
}

// withDefaults returns the config with unset fields at their defaults.
func (c Config) withDefaults() Config {
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	c.RequestTimeout = min(c.RequestTimeout, MaxRequestTimeout)
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * c.RequestTimeout
	}
	c.DialTimeout = min(c.DialTimeout, MaxRequestTimeout)
	if c.NodeRefreshInterval <= 0 {
		c.NodeRefreshInterval = nodes.DefaultRefreshInterval
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.TLS = wire.ClientTLS(c.TLS)
	c.Topics = slices.Clone(c.Topics)
	return c
}

// validate reports the first setting that cannot work.
func (c *Config) validate() error {
	id := c.Identity
	switch {
	case id.Cluster == "":
		return fmt.Errorf("%w: no cluster name", ErrInvalidConfig)
	case id.BrokerName == "":
		return fmt.Errorf("%w: no broker name", ErrInvalidConfig)
	case id.BrokerID < 0:
		return fmt.Errorf("%w: negative broker id %d", ErrInvalidConfig, id.BrokerID)
	case c.Nodes == nil:
		return fmt.Errorf("%w: no node source", ErrInvalidConfig)
	case c.TLS == nil:
		return fmt.Errorf("%w: no TLS config (use pki.ClientConfig with a broker certificate)", ErrInvalidConfig)
	case c.HeartbeatTimeout < 0:
		return fmt.Errorf("%w: negative heartbeat timeout %s", ErrInvalidConfig, c.HeartbeatTimeout)
	case c.HeartbeatTimeout > 0 && c.HeartbeatTimeout <= c.HeartbeatInterval:
		return fmt.Errorf("%w: heartbeat timeout %s must exceed the heartbeat interval %s, or the lease lapses between heartbeats",
			ErrInvalidConfig, c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	if err := errors.Join(validName("cluster name", id.Cluster), validName("broker name", id.BrokerName),
		validName("zone", id.Zone)); err != nil {
		return err
	}
	if err := validAddr("broker address", id.Addr, true); err != nil {
		return err
	}
	if err := validAddr("HA address", id.HAAddr, false); err != nil {
		return err
	}
	return validateTopics(c.Topics)
}

// maxNameLen is the node's bound on cluster, broker group, zone and address
// names (RocketMQ's).
const maxNameLen = 255

// validName applies the node's rule for names: at most maxNameLen bytes of
// UTF-8 without control characters. A gateway builds identities from
// remoting frames, whose binary header carries raw bytes: a name every node
// would refuse is refused here, before the gateway holds it (its metrics
// label brokers by name, and a label that is not UTF-8 failed every scrape).
func validName(what, s string) error {
	switch {
	case len(s) > maxNameLen:
		return fmt.Errorf("%w: %s of %d bytes exceeds %d", ErrInvalidConfig, what, len(s), maxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidConfig, what, s)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f }):
		return fmt.Errorf("%w: %s %q contains a control character", ErrInvalidConfig, what, s)
	}
	return nil
}

func validAddr(what, addr string, required bool) error {
	if addr == "" {
		if required {
			return fmt.Errorf("%w: no %s", ErrInvalidConfig, what)
		}
		return nil
	}
	if err := validName(what, addr); err != nil {
		return err
	}
	if err := wire.CheckHostPort(addr); err != nil {
		return fmt.Errorf("%w: %s %v", ErrInvalidConfig, what, err)
	}
	return nil
}

func validateTopics(ts []wire.TopicConfig) error {
	for i := range ts {
		if err := validTopicName(ts[i].Name); err != nil {
			return err
		}
	}
	return nil
}

// validTopicName applies the node's rule, so a refusal the node would send
// becomes an error at the call that caused it.
func validTopicName(name string) error {
	if err := wire.ValidTopicName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
