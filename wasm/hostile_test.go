package wasm

import (
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgereg/edgereg/wasm/wasmtest"
)

// rssBytes reads the process's resident set size.
func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// peakRSS samples the RSS while fn runs and returns the largest growth.
func peakRSS(t testing.TB, fn func()) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	base := rssBytes(t)
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), rssBytes(t)-base))
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	<-sampled
	return max(peak.Load(), rssBytes(t)-base)
}

// TestHostileStructureRefused uploads each shape to a host: each is
// refused, with a message naming the limit, before wazero decodes it, and
// the process's memory stays where it was.
func TestHostileStructureRefused(t *testing.T) {
	h := newHost(t, HostConfig{CacheDir: t.TempDir()})
	for _, sh := range wasmtest.HostileShapes() {
		if f := os.Getenv("HOSTILE_ONLY"); f != "" && !strings.Contains(f, sh.Name) {
			continue
		}
		var err error
		var took time.Duration
		grew := peakRSS(t, func() {
			start := time.Now()
			var m *Module
			m, err = h.Validate(context.Background(), sh.Module)
			took = time.Since(start)
			if m != nil {
				m.Close()
			}
		})
		t.Logf("%-22s %8d bytes: refused in %v, RSS +%d MiB: %v", sh.Name, len(sh.Module), took.Round(time.Microsecond), grew>>20, err)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), sh.Limit) {
			t.Errorf("%s: Validate = %v, want a refusal naming %q", sh.Name, err, sh.Limit)
		}
		if grew > 64<<20 {
			t.Errorf("%s: RSS grew by %d MiB during the refusal", sh.Name, grew>>20)
		}
	}
}
