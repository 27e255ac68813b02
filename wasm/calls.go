package wasm

import (
	"context"
	"fmt"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// Calls made directly on a Module return the guest's checked answer or an
// error; they do not fall back. Set wraps them with fallbacks, statistics
// and memoization; they are exported for tools that test a module before
// activating it.

// FilterRoute calls the module's route filter. The result is checked to be
// a subset of in.Route and returned in canonical order.
func (m *Module) FilterRoute(ctx context.Context, in RouteFilterInput) (wire.Route, error) {
	var orig wire.Route
	if err := wire.Unmarshal(in.Route, &orig); err != nil {
		return wire.Route{}, fmt.Errorf("filter route: decode input route: %w", err)
	}
	r, _, err := m.filterRoute(ctx, &in, &orig)
	return r, err
}

func (m *Module) filterRoute(ctx context.Context, in *RouteFilterInput, orig *wire.Route) (wire.Route, time.Duration, error) {
	input, err := wire.Marshal(in)
	if err != nil {
		return wire.Route{}, 0, fmt.Errorf("filter route: encode input: %w", err)
	}
	var res struct {
		Route *wire.Route `cbor:"1,keyasint"`
	}
	took, err := m.invoke(ctx, HookRouteFilter, input, maxRouteOutput(len(in.Route)), func(out []byte) error {
		if err := wire.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, err)
		}
		if res.Route == nil {
			// {} or only unknown keys: one typo would hide every broker.
			return fmt.Errorf("%w: no route (key 1) in the output", ErrBadOutput)
		}
		return checkSubset(orig, res.Route)
	})
	if err != nil {
		return wire.Route{}, took, err
	}
	canonical(res.Route)
	return *res.Route, took, nil
}

// routeOutputFactor bounds a route filter's output by the route it
// filters: a subset re-encoded in canonical form is no larger than the
// route, and 16 times leaves room for any encoder's longer integer forms.
// Without it, 1 MiB of empty entries, whatever the route, decoded to over
// 100 MiB before the subset check refused the first one.
const routeOutputFactor = 16

func maxRouteOutput(routeLen int) int { return routeOutputFactor*routeLen + 4096 }

// outputCapReason names the rule behind a hook's output cap.
func outputCapReason(h Hook) string {
	if h == HookRouteFilter {
		return fmt.Sprintf("the output cap, or %d times the input route plus 4 KiB", routeOutputFactor)
	}
	return "the output cap"
}

// ExpiryThreshold calls the module's expiry threshold hook; an answer
// outside [lo, hi] is an error (ErrBadOutput), not clamped.
func (m *Module) ExpiryThreshold(ctx context.Context, in ThresholdInput, lo, hi time.Duration) (time.Duration, error) {
	d, _, err := m.expiryThreshold(ctx, &in, lo, hi)
	return d, err
}

func (m *Module) expiryThreshold(ctx context.Context, in *ThresholdInput, lo, hi time.Duration) (time.Duration, time.Duration, error) {
	in.MinMs, in.MaxMs = lo.Milliseconds(), hi.Milliseconds()
	input, err := wire.Marshal(in)
	if err != nil {
		return 0, 0, fmt.Errorf("expiry threshold: encode input: %w", err)
	}
	var d time.Duration
	took, err := m.invoke(ctx, HookExpiryThreshold, input, m.host.cfg.MaxOutputSize, func(out []byte) error {
		var res struct {
			ThresholdMs *int64 `cbor:"1,keyasint"`
		}
		if err := wire.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, err)
		}
		if res.ThresholdMs == nil {
			return fmt.Errorf("%w: no threshold (key 1) in the output", ErrBadOutput)
		}
		d, err = checkThreshold(*res.ThresholdMs, lo, hi)
		return err
	})
	return d, took, err
}

// ConfirmExpiry calls the module's expiry confirmation hook and returns
// the checked indexes into in.Due of the leases to remove.
func (m *Module) ConfirmExpiry(ctx context.Context, in ConfirmInput) ([]uint32, error) {
	idx, _, err := m.confirmExpiry(ctx, &in)
	return idx, err
}

func (m *Module) confirmExpiry(ctx context.Context, in *ConfirmInput) ([]uint32, time.Duration, error) {
	input, err := wire.Marshal(in)
	if err != nil {
		return nil, 0, fmt.Errorf("expiry confirm: encode input: %w", err)
	}
	var res struct {
		Remove *[]uint32 `cbor:"1,keyasint"`
	}
	took, err := m.invoke(ctx, HookExpiryConfirm, input, m.host.cfg.MaxOutputSize, func(out []byte) error {
		if err := wire.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, err)
		}
		if res.Remove == nil {
			return fmt.Errorf("%w: no remove list (key 1) in the output", ErrBadOutput)
		}
		return checkIndexes(*res.Remove, len(in.Due))
	})
	if err != nil {
		return nil, took, err
	}
	return *res.Remove, took, nil
}
