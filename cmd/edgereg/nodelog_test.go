package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
)

// TestLogLevelErrorNamesItsSource: EDGEREG_LOG_LEVEL=verbose was refused
// naming --log-level alone, so an operator who never typed the flag looked
// for it on the command line; every other setting's error names where the
// value came from.
func TestLogLevelErrorNamesItsSource(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"EDGEREG_LOG_LEVEL=verbose"}, nil, "EDGEREG_LOG_LEVEL"},
		{nil, []string{"--log-level", "verbose"}, "flag --log-level"},
		{[]string{"EDGEREG_LOG_FORMAT=xml"}, nil, "EDGEREG_LOG_FORMAT"},
	} {
		_, stderr, code := run(t, c.env, append([]string{"node", "--data", t.TempDir(), "--print-config"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("node %v with %v: exit %d (want %d), stderr %q, want it to name %s", c.args, c.env, code, exitUsage, stderr, c.want)
		}
	}
}

// TestNodeStartedLogSaysWarmUpDisabled: with warm-up off the "node started"
// line said warm_up=-1s, where --print-config says "disabled".
func TestNodeStartedLogSaysWarmUpDisabled(t *testing.T) {
	var logs syncBuffer
	n, err := node.New(node.Config{Addr: "127.0.0.1:0", AdminAddr: node.AdminOff, DataDir: t.TempDir(), WarmUp: -1,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	for i := 0; i < 200 && !strings.Contains(logs.String(), `"node started"`); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), `"warm_up":"disabled"`) {
		t.Errorf("node started log: %s, want warm_up disabled", logs.String())
	}
}
