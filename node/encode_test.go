package node

import (
	"reflect"
	"testing"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// TestStreamReusesRouteSet: reads on one stream reuse its last answer's
// memory, and each answer is still exactly what a fresh stream gets for
// the same request: nothing of the last one (results, groups) shows
// through, whatever the sizes in turn.
func TestStreamReusesRouteSet(t *testing.T) {
	tn := startNode(t, nil)
	ctx := ctxT(t)
	op := tn.dial(pki.RoleOperator)
	for _, r := range []*wire.Register{
		registration("c1", "b1", 0, "10.0.0.1:1", "t1", "t2"),
		registration("c1", "b2", 0, "10.0.0.2:1", "t2", "t3"),
	} {
		if _, err := op.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	c := tn.dial(pki.RoleClient)
	var v1 uint64
	{
		var rs wire.Routes
		if err := c.CallOnce(ctx, wire.TypeGetRoutes, &wire.GetRoutes{Topics: []wire.TopicVersion{{Topic: "t1"}}}, &rs); err != nil {
			t.Fatal(err)
		}
		v1 = rs.Results[0].Version
	}
	polls := [][]wire.TopicVersion{
		{{Topic: "t2"}, {Topic: "t3"}, {Topic: "t1"}},
		{{Topic: "t1", Version: v1}},
		{{Topic: "nope"}},
		{{Topic: "t1"}, {Topic: "nope"}},
		{{Topic: "t3"}},
		{{Topic: "t1", Version: v1}, {Topic: "t2"}, {Topic: "t3"}, {Topic: "t1"}},
		{{Topic: "nope"}, {Topic: "nope"}},
	}
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for round := range 2 {
		for i, topics := range polls {
			q := &wire.GetRoutes{Topics: topics}
			var got, want wire.Routes
			if err := st.Call(ctx, wire.TypeGetRoutes, q, &got); err != nil {
				t.Fatal(err)
			}
			if err := c.CallOnce(ctx, wire.TypeGetRoutes, q, &want); err != nil {
				t.Fatal(err)
			}
			// Ages may differ by the time between the two reads.
			for _, rs := range []*wire.Routes{&got, &want} {
				for k := range rs.Groups {
					rs.Groups[k].AgeMs, rs.Groups[k].DeadlineInMs = 0, 0
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d poll %d on a long stream:\n%+v\na fresh stream:\n%+v", round, i, got, want)
			}
		}
	}
}

// TestAppendAnswer: every kind of answer, encoded in one pass into the
// stream's buffer, is the frame the node sent before, AppendFrame of the
// message encoded by MarshalBody; a message that cannot be encoded is an
// internal error answer, as it was when handle encoded it.
func TestAppendAnswer(t *testing.T) {
	tn := startNode(t, nil)
	cs := &connState{peer: peer{Identity: pki.Identity{Role: pki.RoleOperator}}}
	var watch *watcher
	reg := registration("c1", "b1", 0, "10.0.0.1:1", "t1", "t2")
	reg.HAAddr = "10.0.0.1:2"
	call := func(ty wire.Type, id uint64, body any) answer {
		t.Helper()
		f, err := wire.NewRequest(ty, id, body)
		if err != nil {
			t.Fatal(err)
		}
		a := tn.handle(cs, f, nil, &watch)
		if a.Error != nil {
			t.Fatalf("%s: %v", ty, a.Error)
		}
		return a
	}
	registered := call(wire.TypeRegister, 300, reg)
	ack := registered.body.(wire.RegisterAck)
	answers := []answer{
		registered,
		call(wire.TypeHeartbeat, 1<<33, &wire.Heartbeat{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch, DataVersion: reg.DataVersion}),
		call(wire.TypeUpdateTopics, 0, &wire.UpdateTopics{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch,
			DataVersion: wire.DataVersion{Counter: 9}, Upsert: []wire.TopicConfig{{Name: "t3", ReadQueues: 4, WriteQueues: 4, Perm: 6}}}),
		call(wire.TypeClusterInfo, 7, nil),
		call(wire.TypeTopics, 8, &wire.TopicsQuery{Kind: wire.TopicsAll}),
		call(wire.TypePing, 9, nil),
		call(wire.TypeUnregister, 10, &wire.Unregister{Cluster: "c1", Addr: reg.Addr, Epoch: ack.Lease.Epoch}), // no body
	}
	for _, a := range answers {
		var body []byte
		if a.body != nil {
			var err error
			if body, err = wire.MarshalBody(a.body); err != nil {
				t.Fatal(err)
			}
		}
		want, err := wire.AppendFrame([]byte{0xee}, &wire.Frame{Type: a.Type, ID: a.ID, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendAnswer([]byte{0xee}, &a)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s answer (%T):\n%x, %v\nAppendFrame:\n%x", a.Type, a.body, got, err, want)
		}
	}

	bad := answer{Frame: wire.Frame{Type: wire.TypeKVGet, ID: 5}, body: make(chan int)}
	got, err := appendAnswer(nil, &bad)
	if err != nil {
		t.Fatal(err)
	}
	var f wire.Frame
	if err := wire.DecodeFrame(got[wire.FrameHeaderLen:], &f); err != nil || f.Type != wire.TypeKVGet || f.ID != 5 ||
		f.Error == nil || f.Error.Code != wire.CodeInternal || len(f.Body) != 0 {
		t.Errorf("unencodable answer: %+v, %v; want an internal error", f, err)
	}
}
