package wire

import "time"

// IntervalWindow is how many recent heartbeat intervals a lease remembers
// for threshold policies.
const IntervalWindow = 8

// LeaseSnapshot is a snapshot of one broker's lease as a node holds it:
// what the registry keeps and what expiry policies decide on (LeaseInfo is
// the part the leases request answers with). It lives here, at the bottom of the
// dependency order, so that both the registry (node/registry) and the
// policy host (wasm) speak of the same type without the policy host
// importing the node.
type LeaseSnapshot struct {
	Cluster          string
	Addr             string
	BrokerName       string
	BrokerID         int64
	HAAddr           string
	Zone             string
	Epoch            uint64
	DataVersion      DataVersion
	Registered       time.Time
	LastHeartbeat    time.Time
	Deadline         time.Time
	RequestedTimeout time.Duration // what the broker asked for; zero if nothing
	Threshold        time.Duration // what applies now
	// Heartbeats counts heartbeats since registration.
	Heartbeats uint64
	// Intervals holds the most recent heartbeat intervals, newest first;
	// min(Heartbeats, IntervalWindow) of them are valid.
	Intervals [IntervalWindow]time.Duration
}

// ExpiryStats is what an expiry confirmer knows about the whole node at a
// scan.
type ExpiryStats struct {
	Leases int // live leases, due ones included
	Due    int // leases past their deadline
}
