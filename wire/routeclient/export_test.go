package routeclient

import "time"

// SetLookupHook makes f run when a Route lookup has its answer from the
// nodes, before the answer goes into the cache: a test holds the answer
// there while a watch push lands. Set it before the first Route call.
func SetLookupHook(c *Client, f func(topic string)) { c.onAnswer = f }

// CachedVersion is the version of the topic's cached route, if any.
func CachedVersion(c *Client, topic string) (uint64, bool) {
	e, ok := c.cached(topic)
	if !ok {
		return 0, false
	}
	return e.version, true
}

// AgeCache makes the topic's cached route look confirmed d earlier than
// it was, so a test gets a stale route without waiting.
func AgeCache(c *Client, topic string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.cache[topic]; e != nil {
		e.checked = e.checked.Add(-d)
	}
}

// ReadsInFlight is how many stamped reads are in flight and how many
// drops are kept for them.
func ReadsInFlight(c *Client) (reads, drops int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reading, len(c.dropped)
}
