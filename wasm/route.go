package wasm

import (
	"bytes"
	"context"
	"fmt"
	"time"

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
// When the policy cannot answer (it failed, its pool was busy, the
// client's labels are over the caps, or ctx's read budget is spent, see
// WithReadBudget) the call is counted as a fallback and the route hook's
// FailMode (SetConfig.RouteFailure) decides: open returns the unfiltered
// route, with a nil error unless ctx ended (the caller then decides whether
// to send it); closed returns no route and an error wrapping
// ErrFailedClosed, which the caller answers the topic with.
func (s *Set) RouteFilter(ctx context.Context, addr string, client wire.ClientAttrs, topic string, routeVersion uint64, route []byte) ([]byte, uint64, error) {
	b := s.acquire(HookRouteFilter)
	if b == nil {
		return route, routeVersion, nil
	}
	defer s.done(b)
	if err := checkClient(client); err != nil {
		// Not the module's fault: counted as a fallback, not an error.
		return s.routeFallback(ctx, b, 0, err, route, routeVersion)
	}
	now := s.cfg.Now()
	k := s.memo.key(b.module, topic, routeVersion, addr, client.Zone, client.Labels)
	if e := s.memo.get(k, now.UnixNano(), b.module, topic, routeVersion, addr, client.Zone, client.Labels); e != nil {
		return e.body, e.bodyVersion, nil
	}
	if budgetSpent(ctx) {
		return s.routeFallback(ctx, b, 0, ErrBudget, route, routeVersion)
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
	return s.routeFallback(ctx, b, took, err, route, routeVersion)
}

// routeFallback counts a route filter call the policy did not answer and
// answers it by the hook's FailMode.
func (s *Set) routeFallback(ctx context.Context, b *binding, took time.Duration, err error, route []byte, routeVersion uint64) ([]byte, uint64, error) {
	s.failed(ctx, b, took, err)
	if s.cfg.RouteFailure == FailClosed {
		return nil, 0, fmt.Errorf("%w: %w", ErrFailedClosed, err)
	}
	return route, routeVersion, ctx.Err()
}

// Caps on a client's zone and labels: they are part of the memo key and
// of every guest input, and a client chooses them.
const (
	MaxClientLabels     = wire.MaxClientLabels
	MaxClientLabelBytes = wire.MaxClientLabelBytes // key plus value
	MaxClientZoneBytes  = wire.MaxClientZoneBytes
)

// checkClient refuses a zone or labels over the caps; the read is then
// answered by the route hook's FailMode and a fallback is counted.
func checkClient(client wire.ClientAttrs) error {
	if client.OverCapsSent {
		// The decoder kept nothing of attrs over the caps.
		return fmt.Errorf("%w: client zone or labels over the caps (at most %d labels, %d bytes each)", ErrBadInput, MaxClientLabels, MaxClientLabelBytes)
	}
	if len(client.Zone) > MaxClientZoneBytes {
		return fmt.Errorf("%w: client zone %.32q is %d bytes, at most %d", ErrBadInput, client.Zone, len(client.Zone), MaxClientZoneBytes)
	}
	return checkLabels(client.Labels)
}

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
