package wasm

import (
	"bytes"
	"context"
	"fmt"

	"github.com/edgereg/edgereg/wire"
)

// RouteFilter returns the route of topic that the client at addr with
// attributes client may see, with its version: the encoded route itself
// when no route filter is active, otherwise the active policy's answer,
// checked to be a subset of the route and re-encoded canonically. Results
// are memoized by (policy, topic, route version, addr, zone, labels) for
// up to SetConfig.MemoTTL, so a repeated read costs a hash and a map
// lookup. Pass addr without a port, so a client's reconnects share results.
//
// A failing policy never fails the read: the unfiltered route is returned
// and the failure counted. The error is non-nil only when ctx ended before
// the policy answered; the route is then unfiltered too, and the caller
// decides whether to send it.
func (s *Set) RouteFilter(ctx context.Context, addr string, client wire.ClientAttrs, topic string, routeVersion uint64, route []byte) ([]byte, uint64, error) {
	b := s.acquire(HookRouteFilter)
	if b == nil {
		return route, routeVersion, nil
	}
	defer s.done(b)
	if err := checkLabels(client.Labels); err != nil {
		// Not the module's fault: counted as a fallback, not an error.
		s.failed(ctx, b, 0, err)
		return route, routeVersion, nil
	}
	now := s.cfg.Now()
	k := s.memo.key(b.module, topic, routeVersion, addr, client.Zone, client.Labels)
	if e := s.memo.get(k, now.UnixNano(), b.module, topic, routeVersion, addr, client.Zone, client.Labels); e != nil {
		return e.body, e.bodyVersion, nil
	}
	var orig wire.Route
	if err := wire.Unmarshal(route, &orig); err != nil {
		return route, routeVersion, fmt.Errorf("filter route of %s: decode route: %w", topic, err)
	}
	in := RouteFilterInput{
		Client: ClientInfo{Addr: addr, Zone: client.Zone, Labels: client.Labels},
		Topic:  topic, Route: route, NowMs: now.UnixMilli(), Rand: s.cfg.Rand(),
	}
	res, took, err := b.module.filterRoute(ctx, &in, &orig)
	if err == nil {
		var body []byte
		if body, err = wire.Marshal(&res); err == nil {
			s.succeeded(b, took)
			version := routeVersion
			if !bytes.Equal(body, route) {
				version = versionOf(body)
			}
			s.memo.put(k, &memoEntry{
				module: b.module, topic: topic, version: routeVersion, addr: addr, zone: client.Zone, labels: client.Labels,
				body: body, bodyVersion: version, expires: now.Add(s.cfg.MemoTTL).UnixNano(),
			})
			return body, version, nil
		}
	}
	s.failed(ctx, b, took, err)
	return route, routeVersion, ctx.Err()
}

// Caps on a client's labels: they are part of the memo key and of every
// guest input, and a client chooses them.
const (
	MaxClientLabels     = 16
	MaxClientLabelBytes = 256 // key plus value
)

// checkLabels refuses labels over the caps; the read then gets the
// unfiltered route (the route filter fails open) and a fallback is counted.
func checkLabels(labels map[string]string) error {
	if len(labels) > MaxClientLabels {
		return fmt.Errorf("%w: %d client labels, at most %d", ErrBadInput, len(labels), MaxClientLabels)
	}
	for k, v := range labels {
		if len(k)+len(v) > MaxClientLabelBytes {
			return fmt.Errorf("%w: client label %.32q is %d bytes, at most %d", ErrBadInput, k, len(k)+len(v), MaxClientLabelBytes)
		}
	}
	return nil
}
