package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

func TestBurstThenSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	for range 3 * Burst {
		l.Warn("refused")
	}
	if n := strings.Count(buf.String(), "refused"); n != Burst {
		t.Fatalf("%d lines of %d at once, want the burst of %d:\n%s", n, 3*Burst, Burst, buf.String())
	}
	if n := l.suppressed.Load(); n != 2*Burst {
		t.Fatalf("%d lines counted as left out, want %d", n, 2*Burst)
	}
	l.allow = rate.NewLimiter(rate.Inf, 0) // the rate has refilled
	buf.Reset()
	l.Info("refused")
	if !strings.Contains(buf.String(), "suppressed_since_last=20") {
		t.Errorf("the next line after %d left out: %q, want suppressed_since_last=20", 2*Burst, buf.String())
	}
}

func TestDisabledLevelCostsNoRate(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	for range 3 * Burst {
		l.Info("below the level")
	}
	l.Warn("written")
	if !strings.Contains(buf.String(), "written") || strings.Contains(buf.String(), "suppressed") {
		t.Errorf("after %d info lines on a warn logger: %q, want the warning written and nothing suppressed", 3*Burst, buf.String())
	}
}
