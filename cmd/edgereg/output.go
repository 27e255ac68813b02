package main

import (
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire"
)

// The JSON shapes of -o json. Every key is snake_case and means the same in
// every command and in a node's /status.json; 64-bit counters that a
// float64 cannot hold exactly (epochs, data versions) are decimal strings,
// route versions hex strings; times are RFC 3339 (UTC). See README.md,
// "Output for scripts".

// routeOut is one topic's route.
type routeOut struct {
	Topic   string `json:"topic"`
	Version string `json:"version"`
	// Nodes are the nodes the read reached: a route is the merge of
	// their answers (route, PROTOCOL.md 9.1).
	Nodes        []string           `json:"nodes,omitempty"`
	Queues       []node.StatusQueue `json:"queues"`
	BrokerGroups []groupOut         `json:"broker_groups"`
}

// groupOut is one broker group and the addresses of its brokers.
type groupOut struct {
	Cluster string      `json:"cluster"`
	Name    string      `json:"name"`
	Zone    string      `json:"zone,omitempty"`
	Brokers []memberOut `json:"brokers"`
}

type memberOut struct {
	BrokerID int64  `json:"broker_id"`
	Addr     string `json:"addr"`
}

// clusterOut is one cluster with its broker groups.
type clusterOut struct {
	Name         string     `json:"name"`
	BrokerGroups []groupOut `json:"broker_groups"`
}

// leaseOut is one live broker's lease.
type leaseOut struct {
	Cluster          string         `json:"cluster"`
	BrokerName       string         `json:"broker_name"`
	BrokerID         int64          `json:"broker_id"`
	Addr             string         `json:"addr"`
	Zone             string         `json:"zone,omitempty"`
	Epoch            string         `json:"epoch"`
	DataVersion      dataVersionOut `json:"data_version"`
	LastHeartbeat    time.Time      `json:"last_heartbeat"`
	Deadline         time.Time      `json:"deadline"`
	ThresholdSeconds float64        `json:"threshold_seconds"`
	Heartbeats       uint64         `json:"heartbeats"`
}

type dataVersionOut struct {
	State     string    `json:"state"`
	Timestamp time.Time `json:"timestamp,omitzero"`
	Counter   string    `json:"counter"`
}

func newRouteOut(topic string, version uint64, nodeAddr string, r wire.Route) routeOut {
	out := routeOut{Topic: topic, Version: node.FormatVersion(version),
		Queues: make([]node.StatusQueue, 0, len(r.Queues)), BrokerGroups: make([]groupOut, 0, len(r.Brokers))}
	for _, q := range r.Queues {
		out.Queues = append(out.Queues, node.QueueStatus(q))
	}
	for _, b := range r.Brokers {
		out.BrokerGroups = append(out.BrokerGroups, newGroupOut(b))
	}
	if nodeAddr != "" {
		out.Nodes = []string{nodeAddr}
	}
	return out
}

func newGroupOut(b wire.BrokerData) groupOut {
	g := groupOut{Cluster: b.Cluster, Name: b.Name, Zone: b.Zone, Brokers: []memberOut{}}
	for _, id := range slices.Sorted(maps.Keys(b.Addrs)) {
		g.Brokers = append(g.Brokers, memberOut{BrokerID: id, Addr: b.Addrs[id]})
	}
	return g
}

func newClustersOut(ci wire.ClusterInfo) []clusterOut {
	out := []clusterOut{}
	for _, name := range slices.Sorted(maps.Keys(ci.Clusters)) {
		c := clusterOut{Name: name, BrokerGroups: []groupOut{}}
		for _, g := range ci.Clusters[name] {
			c.BrokerGroups = append(c.BrokerGroups, newGroupOut(ci.Groups[g]))
		}
		out = append(out, c)
	}
	return out
}

func newLeaseOut(l wire.LeaseInfo) leaseOut {
	out := leaseOut{Cluster: l.Cluster, BrokerName: l.BrokerName, BrokerID: l.BrokerID, Addr: l.Addr, Zone: l.Zone,
		Epoch:            strconv.FormatUint(l.Epoch, 10),
		DataVersion:      dataVersionOut{State: strconv.FormatUint(l.DataVersion.State, 10), Counter: strconv.FormatUint(l.DataVersion.Counter, 10)},
		LastHeartbeat:    time.UnixMilli(l.LastHeartbeatMs).UTC(),
		Deadline:         time.UnixMilli(l.DeadlineMs).UTC(),
		ThresholdSeconds: time.Duration(l.ThresholdMs * int64(time.Millisecond)).Seconds(),
		Heartbeats:       l.Heartbeats,
	}
	if l.DataVersion.Timestamp != 0 {
		out.DataVersion.Timestamp = time.UnixMilli(l.DataVersion.Timestamp).UTC()
	}
	return out
}

// termSafe returns s as table and text output shows it: unchanged when
// every rune is printable, else quoted as strconv.Quote does (\x1b, \r, \n,
// \t, \xff). KV keys and values may hold any byte, and names and errors
// come from peers: printed raw, an ESC sequence would drive the operator's
// terminal (clear it, set its title) and \r or \n draw fake table rows.
// A string starting with a quote is quoted too, so a printable `"\x1b"`
// cannot pass for an escaped ESC. The node's text log does the same
// (escapeForTerminal); -o json needs none, JSON escapes.
func termSafe(s string) string {
	if utf8.ValidString(s) && !strings.HasPrefix(s, `"`) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// tablef is fmt.Fprintf for table and text output: the format is the
// program's own, so tabs and newlines in it lay the table out, while every
// argument that prints as text passes through termSafe. Numbers and bools
// print as they are.
func tablef(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, format, termSafeArgs(args)...)
}

// tableln is fmt.Fprintln for table and text output, its arguments made
// safe as tablef's.
func tableln(w io.Writer, args ...any) {
	fmt.Fprintln(w, termSafeArgs(args)...)
}

func termSafeArgs(args []any) []any {
	safe := make([]any, len(args))
	for i, a := range args {
		safe[i] = termSafeArg(a)
	}
	return safe
}

func termSafeArg(a any) any {
	if a == nil {
		return a
	}
	if b, ok := a.([]byte); ok { // as %s prints it, not as a list of numbers
		return termSafe(string(b))
	}
	switch reflect.ValueOf(a).Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return a // digits only, and %d must still see a number
	}
	return termSafe(fmt.Sprint(a)) // fmt.Sprint: as %s and %v print it, String and Error methods included
}
