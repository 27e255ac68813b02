package node

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wire/remoting"
)

// levelRecorder is a slog.Handler that keeps every record's level and
// message, so a test can check what a normal stop logs.
type levelRecorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func newLevelRecorder() levelRecorder {
	return levelRecorder{mu: &sync.Mutex{}, recs: &[]slog.Record{}}
}

func (h levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h levelRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.recs = append(*h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelRecorder) WithGroup(string) slog.Handler      { return h }

func (h levelRecorder) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range *h.recs {
		if r.Level >= slog.LevelWarn {
			var b strings.Builder
			b.WriteString(r.Level.String() + " " + r.Message)
			r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
			out = append(out, b.String())
		}
	}
	return out
}

// TestRemotingShutdownLogsNoError: a normal stop of a node with a remoting
// listener logs nothing at WARN or above (it used to log "remoting listener
// stopped … use of closed network connection" at ERROR).
func TestRemotingShutdownLogsNoError(t *testing.T) {
	for i := range 5 { // the race is between closing the listener and Serve's Accept
		rec := newLevelRecorder()
		tn := startRemotingNode(t, func(c *Config) { c.Logger = slog.New(rec) })
		c := dialRemoting(t, tn)
		if resp := c.call(&remoting.Command{Code: remoting.GetAllTopicListFromNameSrv, Opaque: 1}); resp.Code != remoting.Success {
			t.Fatal(resp)
		}
		tn.stop()
		if errs := rec.errors(); len(errs) > 0 {
			t.Fatalf("run %d: a normal stop logged:\n%s", i, strings.Join(errs, "\n"))
		}
	}
	_ = time.Second
}
