package wasm

import (
	"fmt"

	"github.com/edgereg/edgereg/wire"
	"github.com/fxamacker/cbor/v2"
)

// ABIVersion is the version of the guest ABI this host implements (ABI.md).
const ABIVersion = 1

// Names of the guest exports, as ABI.md defines them.
const (
	exportMemory     = "memory"
	exportABIVersion = "edgereg_abi_version"
	exportAlloc      = "edgereg_alloc"
	exportFree       = "edgereg_free"
	exportHooks      = "edgereg_hooks"
	exportInitialize = "_initialize"
)

// Hook is one extension point a policy module can implement.
type Hook uint8

// The hooks of ABI version 1.
const (
	// HookRouteFilter decides which part of a topic's route a client sees.
	HookRouteFilter Hook = iota
	// HookExpiryThreshold decides how long a broker may stay silent.
	HookExpiryThreshold
	// HookExpiryConfirm decides which due leases are removed now.
	HookExpiryConfirm

	numHooks = 3
)

// Hooks lists every hook in ABI order.
var Hooks = [numHooks]Hook{HookRouteFilter, HookExpiryThreshold, HookExpiryConfirm}

var hookInfo = [numHooks]struct {
	name   string // used in manifests, CLI, protocol, metrics and logs
	export string // the guest function
	long   string // the long name, also accepted
}{
	{"route", "edgereg_route_filter", "route-filter"},
	{"expiry", "edgereg_expiry_threshold", "expiry-threshold"},
	{"confirm", "edgereg_expiry_confirm", "expiry-confirm"},
}

// String returns the hook's name, the one spelling the CLI, the protocol,
// metrics, manifests and logs use: route, expiry or confirm.
func (h Hook) String() string {
	if h >= numHooks {
		return fmt.Sprintf("hook(%d)", uint8(h))
	}
	return hookInfo[h].name
}

// Export returns the name of the guest function that implements the hook.
func (h Hook) Export() string {
	if h >= numHooks {
		return ""
	}
	return hookInfo[h].export
}

// ParseHook returns the hook named s (as Hook.String prints it; the long
// names route-filter, expiry-threshold and expiry-confirm, which older
// manifests used, are accepted too).
func ParseHook(s string) (Hook, error) {
	for _, h := range Hooks {
		if s == hookInfo[h].name || s == hookInfo[h].long {
			return h, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want route, expiry or confirm)", ErrUnknownHook, s)
}

// ClientInfo is the asking client as a route filter sees it.
type ClientInfo struct {
	// Addr is the client's address as the node passes it (an IP without
	// port, so results can be shared across reconnects).
	Addr   string            `cbor:"1,keyasint,omitempty" json:"addr,omitempty"`
	Zone   string            `cbor:"2,keyasint,omitempty" json:"zone,omitempty"`
	Labels map[string]string `cbor:"3,keyasint,omitempty" json:"labels,omitempty"`
}

// RouteFilterInput is the input of edgereg_route_filter.
type RouteFilterInput struct {
	Client ClientInfo `cbor:"1,keyasint"`
	Topic  string     `cbor:"2,keyasint"`
	// Route is an encoded wire.Route, passed through without re-encoding.
	Route cbor.RawMessage `cbor:"3,keyasint"`
	NowMs int64           `cbor:"4,keyasint"`
	Rand  uint64          `cbor:"5,keyasint"`
}

// RouteFilterOutput is the output of edgereg_route_filter.
type RouteFilterOutput struct {
	Route wire.Route `cbor:"1,keyasint" json:"-"`
}

// BrokerInfo identifies the broker a threshold is asked for.
type BrokerInfo struct {
	Cluster string `cbor:"1,keyasint" json:"cluster"`
	Name    string `cbor:"2,keyasint" json:"name"`
	ID      int64  `cbor:"3,keyasint" json:"id"`
	Addr    string `cbor:"4,keyasint" json:"addr"`
	Zone    string `cbor:"5,keyasint,omitempty" json:"zone,omitempty"`
}

// BrokerStats is what the node observed of a broker's heartbeats.
type BrokerStats struct {
	// Heartbeats counts heartbeats since registration.
	Heartbeats uint64 `cbor:"1,keyasint" json:"heartbeats"`
	// IntervalsMs are the most recent heartbeat intervals, newest first.
	IntervalsMs []int64 `cbor:"2,keyasint" json:"intervals_ms"`
	// MeanIntervalMs is the mean of IntervalsMs (0 when there is none).
	MeanIntervalMs int64 `cbor:"3,keyasint" json:"mean_interval_ms"`
	// JitterMs is the standard deviation of IntervalsMs.
	JitterMs int64 `cbor:"4,keyasint" json:"jitter_ms"`
	// RTTMs is the transport's smoothed round-trip time (0 if unknown).
	RTTMs int64 `cbor:"5,keyasint" json:"rtt_ms"`
	// LossPermille is the estimated heartbeat loss in 1/1000.
	LossPermille uint32 `cbor:"6,keyasint" json:"loss_permille"`
	// Missed is the estimated number of heartbeats lost within IntervalsMs.
	Missed uint32 `cbor:"7,keyasint" json:"missed"`
}

// ThresholdInput is the input of edgereg_expiry_threshold.
type ThresholdInput struct {
	Broker BrokerInfo  `cbor:"1,keyasint" json:"broker"`
	Stats  BrokerStats `cbor:"2,keyasint" json:"stats"`
	// DefaultMs is the threshold the node applies without a policy.
	DefaultMs int64  `cbor:"3,keyasint" json:"default_ms"`
	NowMs     int64  `cbor:"4,keyasint" json:"now_ms"`
	Rand      uint64 `cbor:"5,keyasint" json:"rand"`
	// MinMs and MaxMs are the range an answer must fall in; outside it
	// the call fails. The host sets them on every call.
	MinMs int64 `cbor:"6,keyasint,omitempty" json:"min_ms,omitempty"`
	MaxMs int64 `cbor:"7,keyasint,omitempty" json:"max_ms,omitempty"`
}

// ThresholdOutput is the output of edgereg_expiry_threshold.
type ThresholdOutput struct {
	ThresholdMs int64 `cbor:"1,keyasint" json:"threshold_ms"`
}

// DueLease is one lease past its deadline, offered for removal.
type DueLease struct {
	Cluster         string `cbor:"1,keyasint" json:"cluster"`
	Addr            string `cbor:"2,keyasint" json:"addr"`
	Name            string `cbor:"3,keyasint" json:"name"`
	ID              int64  `cbor:"4,keyasint" json:"id"`
	Epoch           uint64 `cbor:"5,keyasint" json:"epoch"`
	LastHeartbeatMs int64  `cbor:"6,keyasint" json:"last_heartbeat_ms"`
	DeadlineMs      int64  `cbor:"7,keyasint" json:"deadline_ms"`
}

// ConfirmStats is what the node knows about all its leases at a scan.
type ConfirmStats struct {
	Leases uint32 `cbor:"1,keyasint" json:"leases"`
	Due    uint32 `cbor:"2,keyasint" json:"due"`
	// HeartbeatSuccessPermille is heartbeats received over heartbeats
	// expected in the last full window, in 1/1000, capped at 1000 (1000
	// when not known yet).
	HeartbeatSuccessPermille uint32 `cbor:"3,keyasint" json:"heartbeat_success_permille"`
}

// ConfirmInput is the input of edgereg_expiry_confirm.
type ConfirmInput struct {
	Due   []DueLease   `cbor:"1,keyasint" json:"due"`
	Stats ConfirmStats `cbor:"2,keyasint" json:"stats"`
	NowMs int64        `cbor:"3,keyasint" json:"now_ms"`
	Rand  uint64       `cbor:"4,keyasint" json:"rand"`
}

// ConfirmOutput is the output of edgereg_expiry_confirm.
type ConfirmOutput struct {
	// Remove holds indexes into ConfirmInput.Due.
	Remove []uint32 `cbor:"1,keyasint" json:"remove"`
}
