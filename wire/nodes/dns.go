package nodes

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Resolver is the part of *net.Resolver the DNS sources use; tests pass a
// fake one so they need no DNS server.
type Resolver interface {
	// LookupHost returns the A and AAAA addresses of host.
	LookupHost(ctx context.Context, host string) ([]string, error)
	// LookupSRV returns the SRV records of _service._proto.name.
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// DNS returns a Source that resolves name's A and AAAA records and pairs
// every address with port. A nil resolver means net.DefaultResolver.
func DNS(name string, port int, r Resolver) Source {
	if r == nil {
		r = net.DefaultResolver
	}
	return &dnsSource{name: name, port: port, r: r}
}

type dnsSource struct {
	name string
	port int
	r    Resolver
}

func (s *dnsSource) Nodes(ctx context.Context) ([]string, error) {
	if s.port <= 0 || s.port > 65535 {
		return nil, fmt.Errorf("dns %s: port %d out of range", s.name, s.port)
	}
	hosts, err := s.r.LookupHost(ctx, s.name)
	if err != nil {
		return nil, fmt.Errorf("dns %s: %w", s.name, err)
	}
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		addrs[i] = net.JoinHostPort(h, strconv.Itoa(s.port))
	}
	out, err := Normalize(addrs)
	if err == nil {
		err = checkCount(out)
	}
	if err != nil {
		return nil, fmt.Errorf("dns %s: %w", s.name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dns %s: %w", s.name, ErrNoNodes)
	}
	return out, nil
}

func (s *dnsSource) String() string { return fmt.Sprintf("dns:%s:%d", s.name, s.port) }

// DNSSRV returns a Source that looks up the SRV records of
// _service._proto.name (with empty service and proto, name itself), as a
// Kubernetes headless service publishes one record per ready pod. Each
// record yields target:port; targets are dialled by name. A nil resolver
// means net.DefaultResolver.
func DNSSRV(service, proto, name string, r Resolver) Source {
	if r == nil {
		r = net.DefaultResolver
	}
	return &srvSource{service: service, proto: proto, name: name, r: r}
}

type srvSource struct {
	service, proto, name string
	r                    Resolver
}

func (s *srvSource) Nodes(ctx context.Context) ([]string, error) {
	_, recs, err := s.r.LookupSRV(ctx, s.service, s.proto, s.name)
	if err != nil {
		return nil, fmt.Errorf("dns srv %s: %w", s, err)
	}
	addrs := make([]string, 0, len(recs))
	for _, rec := range recs {
		target := strings.TrimSuffix(rec.Target, ".")
		if target == "" || rec.Port == 0 {
			continue // "." means the service is decidedly not available here
		}
		addrs = append(addrs, net.JoinHostPort(target, strconv.Itoa(int(rec.Port))))
	}
	out, err := Normalize(addrs)
	if err == nil {
		err = checkCount(out)
	}
	if err != nil {
		return nil, fmt.Errorf("dns srv %s: %w", s, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dns srv %s: %w", s, ErrNoNodes)
	}
	return out, nil
}

func (s *srvSource) String() string {
	if s.service == "" && s.proto == "" {
		return "srv:" + s.name
	}
	return fmt.Sprintf("srv:_%s._%s.%s", s.service, s.proto, s.name)
}
