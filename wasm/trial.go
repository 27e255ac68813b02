package wasm

import (
	"context"
	"fmt"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// SampleInput returns the built-in sample input of a hook, CBOR-encoded:
// what the dry run feeds a module before activation, and what
// `edgereg policy test` uses when no input is given.
func SampleInput(h Hook) ([]byte, error) {
	switch h {
	case HookRouteFilter:
		in, _, err := sampleRouteInput()
		if err != nil {
			return nil, err
		}
		return wire.Marshal(&in)
	case HookExpiryThreshold:
		in := sampleThresholdInput()
		return wire.Marshal(&in)
	case HookExpiryConfirm:
		in := sampleConfirmInput()
		return wire.Marshal(&in)
	}
	return nil, fmt.Errorf("%w: %v", ErrUnknownHook, h)
}

// Trial runs one hook of a module on a CBOR-encoded input, as a dry run
// before activation: the input is decoded as the hook's input type, the
// answer is checked as in real calls (a threshold outside [lo, hi] is an
// error, not clamped) and returned CBOR-encoded as the hook's output type,
// with the call's time.
// Trials run one at a time per Host; one that waits past ctx fails with
// ErrBusy.
func (m *Module) Trial(ctx context.Context, h Hook, input []byte, lo, hi time.Duration) ([]byte, time.Duration, error) {
	if !m.Implements(h) {
		return nil, 0, fmt.Errorf("%w: module %.12s does not implement %v", ErrHookAbsent, m.hash, h)
	}
	// One trial at a time per host: a trial's input is the operator's, so
	// it may drive a module past its dry run into deep recursion.
	select {
	case m.host.trials <- struct{}{}:
		defer func() { <-m.host.trials }()
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("%w: waiting for another policy test: %w", ErrBusy, ctx.Err())
	}
	bad := func(err error) ([]byte, time.Duration, error) {
		return nil, 0, fmt.Errorf("decode %v input: %w", h, err)
	}
	switch h {
	case HookRouteFilter:
		var in RouteFilterInput
		var orig wire.Route
		if err := wire.Unmarshal(input, &in); err != nil {
			return bad(err)
		}
		if err := wire.Unmarshal(in.Route, &orig); err != nil {
			return bad(err)
		}
		// Labels or a zone over the caps never reach the guest in a
		// real call (the fail mode answers it), so not in a test either
		// (TestTrialRefusesLabelsOverTheCaps).
		if err := checkClient(wire.ClientAttrs{Zone: in.Client.Zone, Labels: in.Client.Labels}); err != nil {
			return nil, 0, fmt.Errorf("%v input: %w; a real read with it gets the route hook's fail mode, without a guest call", h, err)
		}
		// The guest gets the route as a real call gives it: the node's
		// canonical encoding, sorted, without keys this version does not
		// define. Before, it got the operator's bytes as given
		// (TestTrialGivesTheRouteAsRealCallsDo).
		canonical(&orig)
		route, err := wire.Marshal(&orig)
		if err != nil {
			return bad(err)
		}
		in.Route = route
		r, took, err := m.filterRoute(ctx, &in, &orig)
		return encodeTrial(&RouteFilterOutput{Route: r}, took, err)
	case HookExpiryThreshold:
		var in ThresholdInput
		if err := wire.Unmarshal(input, &in); err != nil {
			return bad(err)
		}
		d, took, err := m.expiryThreshold(ctx, &in, lo, hi)
		return encodeTrial(&ThresholdOutput{ThresholdMs: d.Milliseconds()}, took, err)
	case HookExpiryConfirm:
		var in ConfirmInput
		if err := wire.Unmarshal(input, &in); err != nil {
			return bad(err)
		}
		idx, took, err := m.confirmExpiry(ctx, &in)
		return encodeTrial(&ConfirmOutput{Remove: idx}, took, err)
	}
	return nil, 0, fmt.Errorf("%w: %v", ErrUnknownHook, h)
}

func encodeTrial(out any, took time.Duration, err error) ([]byte, time.Duration, error) {
	if err != nil {
		return nil, took, err
	}
	b, err := wire.Marshal(out)
	return b, took, err
}
