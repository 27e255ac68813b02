package main

import (
	"context"
	"errors"
	"io"
	"maps"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/spf13/pflag"
)

// perfFlags are the parameters of the refresh and watch workloads.
type perfFlags struct {
	refreshTopics int     // topics each refresh worker holds and polls
	watchers      int     // watch streams
	watchTopics   int     // topics every watcher watches
	changeRate    float64 // route changes per second during watch
	watchersPer   int     // watch streams per connection
}

func addPerfFlags(f *pflag.FlagSet, pf *perfFlags) {
	f.IntVar(&pf.refreshTopics, "refresh-topics", 100, "refresh workload: topics each worker holds and polls in one request")
	f.IntVar(&pf.watchers, "watchers", 1000, "watch workload: watch streams")
	f.IntVar(&pf.watchTopics, "watch-topics", 1, "watch workload: topics every watcher watches")
	f.Float64Var(&pf.changeRate, "change-rate", 20, "watch workload: route changes per second")
	f.IntVar(&pf.watchersPer, "watchers-per-conn", 50, "watch workload: watch streams per connection (the node allows --max-streams-per-conn)")
}

// perfWorkloads are the workloads with a runner of their own rather than
// the closed loop of measure.
var perfWorkloads = map[string]func(ctx context.Context, progress io.Writer, tgt *benchTarget, bf *benchFlags) (benchResult, error){
	"watch": runWatchBench,
}

// stormRedials counts a storm's redials by cause.
type stormRedials struct {
	mu sync.Mutex
	by map[string]int64
}

func (r *stormRedials) add(err error) {
	cause := stormCause(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = make(map[string]int64)
	}
	r.by[cause]++
}

func (r *stormRedials) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.by {
		n += v
	}
	return n
}

func (r *stormRedials) causes() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.by)
}

// stormDialError marks a storm broker's failure to connect, as opposed to
// a failed registration on a connection made.
type stormDialError struct{ error }

func (e stormDialError) Unwrap() error { return e.error }

// stormCause names why a storm broker's attempt failed: the node refused
// the connection (its accept queue was full, or a connection limit), the
// handshake or the request timed out, or something else; "dial_" when no
// connection was made, "register_" when the registration on it failed.
func stormCause(err error) string {
	prefix := "register_"
	if errors.As(err, new(stormDialError)) {
		prefix = "dial_"
	}
	return prefix + stormReason(err)
}

func stormReason(err error) string {
	var te *quic.TransportError
	var he *quic.HandshakeTimeoutError
	var ie *quic.IdleTimeoutError
	switch {
	case errors.As(err, &te) && te.ErrorCode == quic.ConnectionRefused:
		return "refused"
	case errors.As(err, &he):
		return "handshake_timeout"
	case errors.As(err, &ie):
		return "idle_timeout"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "other"
}
