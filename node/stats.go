package node

import (
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/wire"
)

// stats are the node's counters, read by the admin server.
type stats struct {
	conns         atomic.Int64
	streams       atomic.Int64
	registrations atomic.Uint64
	heartbeats    atomic.Uint64
	expiries      atomic.Uint64
	badFrames     atomic.Uint64
	denied        atomic.Uint64
	timeouts      atomic.Uint64
	errors        atomic.Uint64
	requests      atomic.Uint64
	routeReads    [4]atomic.Uint64 // by wire.RouteStatus
}

func (s *stats) observe(t wire.Type, d time.Duration, err error) {
	s.requests.Add(1)
	if err != nil {
		s.errors.Add(1)
	}
}
