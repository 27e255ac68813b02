package wasm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/edgereg/edgereg/wire"
)

// JSON forms of hook inputs and outputs, with the field names of ABI.md,
// for people: `edgereg policy test --input` takes an input as JSON and
// prints the output as JSON.

// routeJSON is a wire.Route with ABI.md's field names.
type routeJSON struct {
	Queues  []queueJSON  `json:"queues"`
	Brokers []brokerJSON `json:"brokers"`
}

type queueJSON struct {
	BrokerName  string `json:"broker_name"`
	ReadQueues  uint32 `json:"read_queues"`
	WriteQueues uint32 `json:"write_queues"`
	Perm        uint8  `json:"perm"`
	SysFlag     uint32 `json:"sys_flag"`
}

type brokerJSON struct {
	Cluster   string            `json:"cluster"`
	Name      string            `json:"name"`
	Zone      string            `json:"zone,omitempty"`
	Addresses map[string]string `json:"addresses"` // broker id -> address
}

func toRouteJSON(r wire.Route) routeJSON {
	out := routeJSON{Queues: []queueJSON{}, Brokers: []brokerJSON{}}
	for _, q := range r.Queues {
		out.Queues = append(out.Queues, queueJSON{q.BrokerName, q.ReadQueues, q.WriteQueues, q.Perm, q.SysFlag})
	}
	for _, b := range r.Brokers {
		addrs := make(map[string]string, len(b.Addrs))
		for id, a := range b.Addrs {
			addrs[strconv.FormatInt(id, 10)] = a
		}
		out.Brokers = append(out.Brokers, brokerJSON{b.Cluster, b.Name, b.Zone, addrs})
	}
	return out
}

func (r routeJSON) route() (wire.Route, error) {
	var out wire.Route
	for _, q := range r.Queues {
		out.Queues = append(out.Queues, wire.QueueData{BrokerName: q.BrokerName,
			ReadQueues: q.ReadQueues, WriteQueues: q.WriteQueues, Perm: q.Perm, SysFlag: q.SysFlag})
	}
	for _, b := range r.Brokers {
		addrs := make(map[int64]string, len(b.Addresses))
		for id, a := range b.Addresses {
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				return out, fmt.Errorf("broker %q: address id %q is not an integer", b.Name, id)
			}
			addrs[n] = a
		}
		out.Brokers = append(out.Brokers, wire.BrokerData{Cluster: b.Cluster, Name: b.Name, Zone: b.Zone, Addrs: addrs})
	}
	return out, nil
}

type routeInputJSON struct {
	Client ClientInfo `json:"client"`
	Topic  string     `json:"topic"`
	Route  routeJSON  `json:"route"`
	NowMs  int64      `json:"now_ms"`
	Rand   uint64     `json:"rand"`
}

// InputFromJSON turns a hook's input written as JSON with ABI.md's field
// names into the CBOR the hook takes. Unknown fields are errors, so a typo
// is reported rather than silently zero.
func InputFromJSON(h Hook, js []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	bad := func(err error) ([]byte, error) { return nil, fmt.Errorf("%s input as JSON: %w", h, err) }
	switch h {
	case HookRouteFilter:
		var in routeInputJSON
		if err := dec.Decode(&in); err != nil {
			return bad(err)
		}
		r, err := in.Route.route()
		if err != nil {
			return bad(err)
		}
		raw, err := wire.Marshal(&r)
		if err != nil {
			return bad(err)
		}
		return wire.Marshal(&RouteFilterInput{Client: in.Client, Topic: in.Topic, Route: raw, NowMs: in.NowMs, Rand: in.Rand})
	case HookExpiryThreshold:
		var in ThresholdInput
		if err := dec.Decode(&in); err != nil {
			return bad(err)
		}
		return wire.Marshal(&in)
	case HookExpiryConfirm:
		var in ConfirmInput
		if err := dec.Decode(&in); err != nil {
			return bad(err)
		}
		return wire.Marshal(&in)
	}
	return nil, fmt.Errorf("%w: %v", ErrUnknownHook, h)
}

// OutputJSON decodes a hook's CBOR output (as Module.Trial returns it)
// into a value that encoding/json prints with ABI.md's field names.
func OutputJSON(h Hook, out []byte) (any, error) {
	switch h {
	case HookRouteFilter:
		var o RouteFilterOutput
		if err := wire.Unmarshal(out, &o); err != nil {
			return nil, err
		}
		return map[string]any{"route": toRouteJSON(o.Route)}, nil
	case HookExpiryThreshold:
		var o ThresholdOutput
		err := wire.Unmarshal(out, &o)
		return o, err
	case HookExpiryConfirm:
		var o ConfirmOutput
		err := wire.Unmarshal(out, &o)
		if o.Remove == nil {
			o.Remove = []uint32{}
		}
		return o, err
	}
	return nil, fmt.Errorf("%w: %v", ErrUnknownHook, h)
}
