package sdk

import (
	"reflect"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// The SDK's codec must read what the host writes (wire.Marshal, core
// deterministic CBOR) and write what the host reads (wire.Unmarshal).

type hostClient struct {
	Addr   string            `cbor:"1,keyasint,omitempty"`
	Zone   string            `cbor:"2,keyasint,omitempty"`
	Labels map[string]string `cbor:"3,keyasint,omitempty"`
}

type hostRouteInput struct {
	Client hostClient `cbor:"1,keyasint"`
	Topic  string     `cbor:"2,keyasint"`
	Route  wire.Route `cbor:"3,keyasint"`
	NowMs  int64      `cbor:"4,keyasint"`
	Rand   uint64     `cbor:"5,keyasint"`
	Future []string   `cbor:"99,keyasint"` // a field a later host may add
}

func TestRouteRoundTrip(t *testing.T) {
	route := wire.Route{
		Queues: []wire.QueueData{
			{BrokerName: "a", ReadQueues: 8, WriteQueues: 8, Perm: 6},
			{BrokerName: "b", ReadQueues: 300, Perm: 4, SysFlag: 1},
		},
		Brokers: []wire.BrokerData{
			{Cluster: "c", Name: "a", Zone: "z", Addrs: map[int64]string{0: "x:1", 1: "y:1"}},
			{Cluster: "c", Name: "b", Addrs: map[int64]string{2: "w:1", -1: "neg"}},
		},
	}
	in, err := wire.Marshal(hostRouteInput{
		Client: hostClient{Addr: "1.2.3.4", Zone: "z", Labels: map[string]string{"k": "v"}},
		Topic:  "T", Route: route, NowMs: -5, Rand: 1 << 63, Future: []string{"x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got RouteInput
	RouteFilter(func(ri RouteInput) (Route, error) { got = ri; return ri.Route, nil })
	defer RouteFilter(nil)
	out, err := Handle(HookRouteFilter, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Client.Addr != "1.2.3.4" || got.Client.Labels["k"] != "v" || got.Topic != "T" || got.NowMs != -5 || got.Rand != 1<<63 {
		t.Errorf("decoded input %+v", got)
	}
	var res struct {
		Route wire.Route `cbor:"1,keyasint"`
	}
	if err := wire.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Route, route) {
		t.Errorf("round trip:\n got %+v\nwant %+v", res.Route, route)
	}
	if want, _ := wire.Marshal(struct {
		Route wire.Route `cbor:"1,keyasint"`
	}{route}); string(want) != string(out) {
		t.Errorf("SDK output is not the host's deterministic encoding:\n got %x\nwant %x", out, want)
	}
}

func TestHandleErrors(t *testing.T) {
	RouteFilter(nil)
	if _, err := Handle(HookRouteFilter, []byte{0xa0}); err != ErrNotRegistered {
		t.Errorf("unregistered hook: %v", err)
	}
	ExpiryThreshold(func(ThresholdInput) (int64, error) { return 1, nil })
	defer ExpiryThreshold(nil)
	for _, in := range [][]byte{{}, {0xa1}, {0xbf}, {0xa1, 0x01, 0x7f}, {0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		if _, err := Handle(HookExpiryThreshold, in); err == nil {
			t.Errorf("input %x: no error", in)
		}
	}
}
