package gateway

import (
	"testing"
	"time"
)

// SetRoundGap sets, until the test ends, how long a topic must have been
// listed at a data version before a registration listing it again may
// complete a round of the broker's registrations.
func SetRoundGap(t testing.TB, d time.Duration) {
	old := roundGap.Swap(int64(d))
	t.Cleanup(func() { roundGap.Store(old) })
}

// RoutesCached is how many routes the gateway's route client caches.
func RoutesCached(g *Gateway) int { return g.routes.Stats().Cached }

// ForgetIdle forgets the topics nobody asked for within idle, as the
// janitor does every minute.
func ForgetIdle(g *Gateway, idle time.Duration) { g.cache.forget(idle) }

// SetExpireHook makes f run when a silent broker's unregistration starts.
// Set it before the broker registers.
func SetExpireHook(g *Gateway, f func()) {
	g.brokers.mu.Lock()
	g.brokers.onExpire = f
	g.brokers.mu.Unlock()
}
