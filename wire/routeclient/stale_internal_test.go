package routeclient

import (
	"context"
	"log/slog"
	"testing"
)

// TestPushesRecordedOutOfOrderKeepTheLatest: each watch stream's reader
// merges its push under the hub's lock and records the result in the
// route cache after unlocking. Slot 0 merges route (a, b) and, before it
// records it, slot 1's push of (a, b, c) is merged and recorded; then
// slot 0 records its older merge. Before, the cache then held (a, b)
// while the watchers had (a, b, c), and no push came to correct it: Route
// served a route without group c until the next refresh.
func TestPushesRecordedOutOfOrderKeepTheLatest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{ctx: ctx, cancel: cancel, log: slog.New(slog.DiscardHandler), cache: make(map[string]*entry), goneAt: make(map[string]uint64), dropped: make(map[string]uint64), cfg: Config{Fanout: 2}}
	h := newWatchHub(c)
	wt := &watchedTopic{fresh: make([]bool, 2), views: make([]slotView, 2), subs: make(map[*subscription]struct{})}
	h.topics["t"] = wt
	part, partV := testRoute("a", "b")
	full, fullV := testRoute("a", "b", "c")
	overtaken := false
	c.onPushed = func(string) {
		if !overtaken {
			overtaken = true
			h.apply(1, routeEventFrame(t, "t", full, fullV)) // lands between slot 0's merge and its record
		}
	}
	h.apply(0, routeEventFrame(t, "t", part, partV))
	if !overtaken {
		t.Fatal("the hook did not run")
	}
	if wt.last == nil || wt.last.Version != fullV {
		t.Fatalf("watchers got %+v, want (a, b, c) v%x", wt.last, fullV)
	}
	if e := c.cache["t"]; e == nil || e.version != fullV {
		t.Fatalf("the cache holds %v v%x while the watchers have (a, b, c) v%x", names(e.route), e.version, fullV)
	}
}

// TestUnwatchedTopicsLeaveNoPushMarks: what pushes said of a topic is
// kept only while it is watched; a topic once watched, then unwatched and
// found gone by a read, leaves nothing behind (goneAt would otherwise grow
// with every topic ever watched).
func TestUnwatchedTopicsLeaveNoPushMarks(t *testing.T) {
	c := &Client{cache: make(map[string]*entry), goneAt: make(map[string]uint64), dropped: make(map[string]uint64)}
	r, v := testRoute("a")
	c.cacheEvent(&Update{Topic: "t", Route: *r, Version: v}, 1)
	c.cacheEvent(&Update{Topic: "g", Gone: true}, 2)
	c.unwatched([]string{"t", "g"})
	c.mu.Lock()
	c.dropLocked("t", c.stampLocked()) // a read found it gone
	n := len(c.goneAt)
	c.mu.Unlock()
	c.readDone()
	if n != 0 {
		t.Fatalf("goneAt holds %d topics after they were unwatched: %v", n, c.goneAt)
	}
	if len(c.dropped) != 0 {
		t.Fatalf("dropped holds %v with no read in flight", c.dropped)
	}
}
