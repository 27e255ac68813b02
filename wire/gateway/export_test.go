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
