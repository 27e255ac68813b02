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
