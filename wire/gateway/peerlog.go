package gateway

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Peer log limits, as the node's: a burst, then one line a second.
const (
	peerLogBurst = 10
	peerLogEvery = time.Second
)

// peerLog writes the lines remoting peers' requests cause (a refused
// registration, a withheld route read, a topic that cannot be watched).
// The remoting listener has no authentication, so a peer looping on one
// request must not fill the disk at its own pace: lines beyond the rate are
// counted, and the next line written says how many were left out.
type peerLog struct {
	log        *slog.Logger
	allow      *rate.Limiter
	suppressed atomic.Int64
}

func newPeerLog(log *slog.Logger) *peerLog {
	return &peerLog{log: log, allow: rate.NewLimiter(rate.Every(peerLogEvery), peerLogBurst)}
}

// Warn logs at warning level, within the rate.
func (l *peerLog) Warn(msg string, args ...any) { l.write(slog.LevelWarn, msg, args) }

// Info logs at info level, within the rate.
func (l *peerLog) Info(msg string, args ...any) { l.write(slog.LevelInfo, msg, args) }

func (l *peerLog) write(level slog.Level, msg string, args []any) {
	if !l.log.Enabled(context.Background(), level) {
		return
	}
	if !l.allow.Allow() {
		l.suppressed.Add(1)
		return
	}
	if n := l.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	l.log.Log(context.Background(), level, msg, args...)
}
