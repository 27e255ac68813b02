package wasm

import (
	"context"
	"fmt"
	"time"
)

// FailMode says what a hook's caller gets when its policy cannot answer:
// the guest failed, the pool was busy, the input was over a cap, or the
// request's budget of policy time was spent. Either way the call is
// counted as a fallback.
//
//   - route: FailOpen serves the unfiltered route; FailClosed answers the
//     topic with an error (RouteFilter returns ErrFailedClosed), never an
//     empty route as if it were valid. Default FailOpen: an unfiltered route
//     is a superset of what the client may see, and every broker in it is
//     real.
//   - confirm: FailOpen removes every due lease (the registry's built-in
//     behaviour); FailClosed holds them all back until the next sweep.
//     Default FailClosed: a failing confirm policy then never causes a mass
//     expiry, and the failure rule deactivates it after a few sweeps, so
//     dead brokers are held back for a bounded time only.
//   - threshold: has no choice; a failed call answers the built-in
//     threshold.
type FailMode uint8

// Fail modes; FailDefault takes the hook's default.
const (
	FailDefault FailMode = iota
	FailOpen
	FailClosed
)

// String names the mode as flags spell it.
func (f FailMode) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "default"
}

// ParseFailMode parses "open" or "closed" ("" is FailDefault).
func ParseFailMode(s string) (FailMode, error) {
	switch s {
	case "":
		return FailDefault, nil
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return FailDefault, fmt.Errorf("policy fail mode %q: use open or closed", s)
}

// MarshalText implements encoding.TextMarshaler, for flag.TextVar.
func (f FailMode) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, for flag.TextVar.
func (f *FailMode) UnmarshalText(b []byte) error {
	m, err := ParseFailMode(string(b))
	if err == nil {
		*f = m
	}
	return err
}

func (f FailMode) or(def FailMode) FailMode {
	if f == FailDefault {
		return def
	}
	return f
}

// DefaultReadBudget is the policy time one read may spend by default
// (WithReadBudget): enough for 10,000 topics of a module answering in
// 50 µs with 2 route calls at once (2 cores), or a few dozen calls of one
// that takes most of its 20 ms deadline on each.
const DefaultReadBudget = 250 * time.Millisecond

type readBudgetKey struct{}

// readBudget is the time after which a read starts no more policy calls.
type readBudget struct{ until time.Time }

// WithReadBudget returns a context under which RouteFilter starts policy
// calls only for d from now (memoized answers are free): one request that
// names many topics spends about d of policy time, plus at most one call
// deadline per instance for the calls already started, and every topic
// past the budget is answered by the route hook's FailMode and counted as
// a fallback. Calls in flight at the budget are not cut short, since
// cutting one closes its instance. The budget runs on the real clock, not
// SetConfig.Now: it bounds real time spent.
func WithReadBudget(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, readBudgetKey{}, &readBudget{until: time.Now().Add(d)})
}

// budgetSpent reports whether ctx carries a read budget that is spent.
func budgetSpent(ctx context.Context) bool {
	b, _ := ctx.Value(readBudgetKey{}).(*readBudget)
	return b != nil && !time.Now().Before(b.until)
}
