// Package nodes says where the edgereg nodes are: a Source yields the list
// of node addresses (host:port) that brokers register with and route
// clients read from. Sources are a fixed list (Static), a list a program
// changes (List), DNS A/AAAA records (DNS), DNS SRV records such as a
// Kubernetes headless service's (DNSSRV), and an HTTP address service
// (HTTP), like RocketMQ's name-server address server.
//
// Consumers re-read their Source periodically with Follow, which keeps the
// last good list when a lookup fails or finds nothing, so a DNS or HTTP
// outage never empties a consumer's node list.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrNoNodes is returned by a Source that found no node address.
var ErrNoNodes = errors.New("no edgereg node addresses")

// MaxNodes caps the node addresses a list may hold. Every broker registrar
// and route client dials every listed node, and a gateway runs a registrar
// per broker: the list decides how many QUIC connections a process holds,
// and an address service or DNS answer (64 KiB is thousands of short
// entries) must not decide that. Deployments list a handful of nodes.
const MaxNodes = 64

// ErrTooManyNodes is returned for a list of more than MaxNodes addresses.
var ErrTooManyNodes = fmt.Errorf("a node list holds at most %d addresses", MaxNodes)

// checkCount refuses a normalized list past MaxNodes, whole: a source that
// lists too many is broken or hostile, and keeping the last good list
// beats dialling the first 64 of its choosing.
func checkCount(addrs []string) error {
	if len(addrs) > MaxNodes {
		return fmt.Errorf("%w, got %d", ErrTooManyNodes, len(addrs))
	}
	return nil
}

// Source yields the current list of node addresses, each host:port. A
// Source is safe for concurrent use. Nodes may do I/O and must honour ctx.
type Source interface {
	Nodes(ctx context.Context) ([]string, error)
}

// Notifier is implemented by sources that know when their list changes
// (List). Changed returns a channel that is closed at the next change, so
// a consumer can re-read at once instead of at its next refresh.
type Notifier interface {
	Changed() <-chan struct{}
}

// Normalize checks that every address is host:port with a numeric port,
// trims spaces, drops empty entries and duplicates, and sorts the result.
// Addresses are written one way, so one node written two ways is one entry:
// the port in decimal without leading zeros, an IP address in its canonical
// form (RFC 5952 for IPv6), a host name in lower case (DNS names are
// case-insensitive).
func Normalize(addrs []string) ([]string, error) {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("node address %q: %w", a, err)
		}
		if host == "" {
			return nil, fmt.Errorf("node address %q: no host", a)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("node address %q: port must be 1 to 65535", a)
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.String()
		} else {
			host = strings.ToLower(host)
		}
		out = append(out, net.JoinHostPort(host, strconv.FormatUint(p, 10)))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Static returns a Source that always yields addrs. Invalid addresses are
// reported by every call to Nodes.
func Static(addrs ...string) Source {
	return staticSource(slices.Clone(addrs))
}

type staticSource []string

func (s staticSource) Nodes(context.Context) ([]string, error) {
	out, err := Normalize(s)
	if err == nil && len(out) == 0 {
		err = ErrNoNodes
	}
	return out, err
}

func (s staticSource) String() string { return "static:" + strings.Join(s, ",") }

// List is a Source whose addresses a program sets, for example from its
// own configuration or an admin command. Consumers following it see a Set
// at once (List is a Notifier). The zero value is an empty list.
type List struct {
	mu      sync.Mutex
	addrs   []string
	changed chan struct{}
}

// NewList returns a List holding addrs.
func NewList(addrs ...string) *List {
	return &List{addrs: slices.Clone(addrs)}
}

// Set replaces the list's addresses and wakes every consumer.
func (l *List) Set(addrs ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs = slices.Clone(addrs)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// Nodes returns the list's addresses, normalized.
func (l *List) Nodes(context.Context) ([]string, error) {
	l.mu.Lock()
	addrs := slices.Clone(l.addrs)
	l.mu.Unlock()
	return staticSource(addrs).Nodes(context.Background())
}

// Changed returns a channel closed at the next Set.
func (l *List) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// String describes the source for logs.
func (l *List) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return "list:" + strings.Join(l.addrs, ",")
}
