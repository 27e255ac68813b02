// Package sdk is the Go guest SDK for edgereg policies: it implements the
// guest side of the ABI (wasm/ABI.md, version 1) so that a policy is a
// plain Go function.
//
// A policy registers its hooks in init and has an empty main:
//
//	package main
//
//	import "github.com/edgereg/edgereg/policies/sdk"
//
//	func init() {
//		sdk.RouteFilter(func(in sdk.RouteInput) (sdk.Route, error) {
//			return in.Route, nil
//		})
//	}
//
//	func main() {}
//
// and is built with the standard toolchain as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o policy.wasm .
//
// The SDK exports every hook entry point plus edgereg_hooks, which tells
// the host which hooks were registered; the host treats the others as
// absent. The exports exist only when building for wasip1; the types and
// Handle build everywhere, so policies can be tested natively.
//
// The SDK has its own small CBOR codec instead of a general one: a Go
// guest with a reflection-based codec is about 4 MB, over the host's
// default size cap, while one with this codec is about 2 MB.
package sdk

import "errors"

// Permission bits of a broker group's queues, as in RocketMQ's PermName.
const (
	PermPriority uint8 = 8
	PermRead     uint8 = 4
	PermWrite    uint8 = 2
	PermInherit  uint8 = 1
)

// MasterID is the broker id of a group's master.
const MasterID int64 = 0

// QueueData is the part of a route that one broker group holds.
type QueueData struct {
	BrokerName  string
	ReadQueues  uint32
	WriteQueues uint32
	Perm        uint8
	SysFlag     uint32
}

// BrokerData describes one broker group: cluster, name, zone, and the
// address of each member by broker id (MasterID is the master).
type BrokerData struct {
	Cluster string
	Name    string
	Zone    string
	Addrs   map[int64]string
}

// Route is where a topic lives.
type Route struct {
	Queues  []QueueData
	Brokers []BrokerData
}

// Client is the client asking for a route.
type Client struct {
	Addr   string
	Zone   string
	Labels map[string]string
}

// RouteInput is what a route filter gets.
type RouteInput struct {
	Client Client
	Topic  string
	Route  Route
	NowMs  int64
	Rand   uint64
}

// Broker identifies the broker a threshold is asked for.
type Broker struct {
	Cluster string
	Name    string
	ID      int64
	Addr    string
	Zone    string
}

// Stats is what the node observed of a broker's heartbeats.
type Stats struct {
	Heartbeats     uint64
	IntervalsMs    []int64 // newest first
	MeanIntervalMs int64
	JitterMs       int64
	RTTMs          int64
	LossPermille   uint32
	Missed         uint32
}

// ThresholdInput is what an expiry threshold policy gets.
type ThresholdInput struct {
	Broker    Broker
	Stats     Stats
	DefaultMs int64 // the node's threshold without a policy
	NowMs     int64
	Rand      uint64
	// MinMs and MaxMs are the range the node accepts (0 when the node does
	// not say); the SDK clamps the policy's answer into it, since an answer
	// outside is a failed call.
	MinMs, MaxMs int64
}

// DueLease is a lease past its deadline.
type DueLease struct {
	Cluster         string
	Addr            string
	Name            string
	ID              int64
	Epoch           uint64
	LastHeartbeatMs int64
	DeadlineMs      int64
}

// ConfirmStats is what the node knows about all its leases.
type ConfirmStats struct {
	Leases                   uint32
	Due                      uint32
	HeartbeatSuccessPermille uint32
}

// ConfirmInput is what an expiry confirm policy gets.
type ConfirmInput struct {
	Due   []DueLease
	Stats ConfirmStats
	NowMs int64
	Rand  uint64
}

// Hook names an ABI hook; the values are the bits of edgereg_hooks.
type Hook uint8

// The hooks of ABI version 1.
const (
	HookRouteFilter Hook = iota
	HookExpiryThreshold
	HookExpiryConfirm
)

var (
	routeFilter     func(RouteInput) (Route, error)
	expiryThreshold func(ThresholdInput) (int64, error)
	expiryConfirm   func(ConfirmInput) ([]int, error)
)

// RouteFilter registers the route filter: it returns the route the client
// may see, which must be a subset of in.Route (the host checks).
func RouteFilter(fn func(in RouteInput) (Route, error)) { routeFilter = fn }

// ExpiryThreshold registers the expiry threshold policy: it returns, in
// milliseconds, how long the broker may stay silent (the SDK clamps it to
// the range the node gives in the input).
func ExpiryThreshold(fn func(in ThresholdInput) (int64, error)) { expiryThreshold = fn }

// ExpiryConfirm registers the expiry confirm policy: it returns the
// indexes into in.Due of the leases to remove now.
func ExpiryConfirm(fn func(in ConfirmInput) ([]int, error)) { expiryConfirm = fn }

// Registered returns the registered hooks as edgereg_hooks reports them.
func Registered() uint32 {
	var mask uint32
	if routeFilter != nil {
		mask |= 1 << HookRouteFilter
	}
	if expiryThreshold != nil {
		mask |= 1 << HookExpiryThreshold
	}
	if expiryConfirm != nil {
		mask |= 1 << HookExpiryConfirm
	}
	return mask
}

// ErrNotRegistered is returned by Handle for a hook with no handler.
var ErrNotRegistered = errors.New("sdk: hook not registered")

// Handle decodes a hook's CBOR input, runs the registered handler and
// encodes its answer, exactly as the wasm exports do.
func Handle(h Hook, input []byte) ([]byte, error) {
	d := &decoder{b: input}
	e := &encoder{b: make([]byte, 0, 256)}
	switch {
	case h == HookRouteFilter && routeFilter != nil:
		in := decodeRouteInput(d)
		if d.err != nil {
			return nil, d.err
		}
		r, err := routeFilter(in)
		if err != nil {
			return nil, err
		}
		e.mapn(1)
		e.uint(1)
		encodeRoute(e, &r)
	case h == HookExpiryThreshold && expiryThreshold != nil:
		in := decodeThresholdInput(d)
		if d.err != nil {
			return nil, d.err
		}
		ms, err := expiryThreshold(in)
		if err != nil {
			return nil, err
		}
		if in.MinMs > 0 {
			ms = max(ms, in.MinMs)
		}
		if in.MaxMs > 0 {
			ms = min(ms, in.MaxMs)
		}
		e.mapn(1)
		e.uint(1)
		e.int(ms)
	case h == HookExpiryConfirm && expiryConfirm != nil:
		in := decodeConfirmInput(d)
		if d.err != nil {
			return nil, d.err
		}
		idx, err := expiryConfirm(in)
		if err != nil {
			return nil, err
		}
		e.mapn(1)
		e.uint(1)
		e.array(len(idx))
		for _, i := range idx {
			e.int(int64(i))
		}
	default:
		return nil, ErrNotRegistered
	}
	return e.b, nil
}
