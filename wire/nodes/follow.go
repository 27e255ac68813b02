package nodes

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"
)

// Defaults of Follow and Backoff.
const (
	DefaultRefreshInterval = 30 * time.Second
	DefaultLookupTimeout   = 10 * time.Second
	DefaultBackoffMin      = 200 * time.Millisecond
	DefaultBackoffMax      = 30 * time.Second
)

// Backoff is an exponential retry schedule with full jitter: the wait
// before retry n (counting from 0) is uniform in [0, min(Max, Min·2ⁿ)).
// Full jitter spreads a crowd of brokers that lost the same node over the
// whole window instead of letting them retry in lockstep. The zero value
// means the defaults, 200 ms and 30 s.
type Backoff struct {
	Min time.Duration
	Max time.Duration
}

// WithDefaults returns b with unset fields at their defaults and Max at
// least Min.
func (b Backoff) WithDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = DefaultBackoffMin
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	b.Max = max(b.Max, b.Min)
	return b
}

// Ceiling returns the longest wait before retry n, without jitter.
func (b Backoff) Ceiling(n int) time.Duration {
	b = b.WithDefaults()
	d := b.Min
	for range min(n, 62) {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}

// Delay returns the wait before retry n: uniform in [0, Ceiling(n)).
func (b Backoff) Delay(n int) time.Duration {
	return rand.N(b.Ceiling(n))
}

// FollowConfig configures Follow.
type FollowConfig struct {
	// Interval is how often the source is read again. Default 30 s.
	Interval time.Duration
	// LookupTimeout bounds one read of the source. Default 10 s.
	LookupTimeout time.Duration
	// Backoff schedules the retries after a failed read, each capped at
	// Interval.
	Backoff Backoff
	// Logger receives failed reads; default slog.Default().
	Logger *slog.Logger
}

// Follow reads src now and then every Interval (at once after a Set on a
// Notifier source), calling apply with the list whenever it differs from
// the one applied before. A failed read, or one that finds no node, keeps
// the last list and is retried with backoff. apply runs on Follow's
// goroutine. Follow returns when ctx ends.
func Follow(ctx context.Context, src Source, cfg FollowConfig, apply func([]string)) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultRefreshInterval
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	notifier, _ := src.(Notifier)
	var (
		last     []string
		failures int
		timer    = time.NewTimer(0)
		changed  <-chan struct{} // nil, never ready, without a notifier
	)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-changed:
		}
		if notifier != nil {
			// Taken before reading the list: a change after this read
			// closes this channel and wakes the next wait.
			changed = notifier.Changed()
		}
		lctx, cancel := context.WithTimeout(ctx, cfg.LookupTimeout)
		addrs, err := src.Nodes(lctx)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = ErrNoNodes
		}
		if err == nil {
			addrs, err = Normalize(addrs)
		}
		if err == nil {
			err = checkCount(addrs)
		}
		next := cfg.Interval
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			cfg.Logger.Warn("edgereg node list lookup failed, keeping the last list",
				"source", describe(src), "nodes", last, "err", err)
			next = min(cfg.Backoff.Delay(failures), cfg.Interval)
			failures++
		default:
			failures = 0
			if !slices.Equal(addrs, last) {
				last = addrs
				apply(slices.Clone(addrs))
			}
		}
		timer.Reset(next) // since Go 1.23 a Reset timer never delivers a stale tick
	}
}

func describe(src Source) string {
	if s, ok := src.(interface{ String() string }); ok {
		return s.String()
	}
	return "source"
}
