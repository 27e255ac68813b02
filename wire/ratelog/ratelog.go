// Package ratelog writes the log lines peers cause at a bounded rate: a
// burst, then one line a second. A peer that loops on a refused request
// (or floods handshakes, or sends bad frames) must not fill the disk at its
// own pace; the lines beyond the rate are counted, and the next line
// written says how many were left out ("suppressed_since_last").
package ratelog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// The rate of one Logger's lines: Burst at once, then one per Every.
const (
	Burst = 10
	Every = time.Second
)

// Logger is a rate-limited slog.Logger. Lines of a level the logger does
// not write cost none of the rate. It is safe for concurrent use.
type Logger struct {
	log        *slog.Logger
	allow      *rate.Limiter
	suppressed atomic.Int64
}

// New returns a Logger writing to log at the package's rate.
func New(log *slog.Logger) *Logger {
	return &Logger{log: log, allow: rate.NewLimiter(rate.Every(Every), Burst)}
}

// Warn logs at warning level, within the rate.
func (l *Logger) Warn(msg string, args ...any) { l.Log(slog.LevelWarn, msg, args...) }

// Info logs at info level, within the rate.
func (l *Logger) Info(msg string, args ...any) { l.Log(slog.LevelInfo, msg, args...) }

// Log logs at level, within the rate.
func (l *Logger) Log(level slog.Level, msg string, args ...any) {
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
