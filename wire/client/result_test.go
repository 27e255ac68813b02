package client

import (
	"errors"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// TestDecodeResultEveryStatus: every route status a node may send turns
// into a route or into the error it stands for, with the wire code callers
// branch on; a status this client does not know is an error, never a route.
func TestDecodeResultEveryStatus(t *testing.T) {
	body, err := wire.Marshal(&wire.Route{Queues: []wire.QueueData{{BrokerName: "b", ReadQueues: 4, WriteQueues: 4, Perm: 6}},
		Brokers: []wire.BrokerData{{Cluster: "c", Name: "b", Addrs: map[int64]string{0: "10.0.0.1:10911"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		res     wire.RouteResult
		code    wire.Code // 0: no wire error
		wantErr bool
		version uint64
	}{
		{res: wire.RouteResult{Topic: "t", Status: wire.StatusOK, Version: 7, Route: body}, version: 7},
		{res: wire.RouteResult{Topic: "t", Status: wire.StatusNotModified, Version: 7}, version: 7},
		{res: wire.RouteResult{Topic: "t", Status: wire.StatusNotFound}, code: wire.CodeNotFound, wantErr: true},
		{res: wire.RouteResult{Topic: "t", Status: wire.StatusWarmingUp}, code: wire.CodeWarmingUp, wantErr: true},
		{res: wire.RouteResult{Topic: "t", Status: wire.StatusPolicyFailed}, code: wire.CodeUnavailable, wantErr: true},
		{res: wire.RouteResult{Topic: "t", Status: 99}, wantErr: true},
	} {
		route, v, err := DecodeResult(&tc.res)
		if (err != nil) != tc.wantErr {
			t.Errorf("status %d: err %v, want error %v", tc.res.Status, err, tc.wantErr)
			continue
		}
		var we *wire.Error
		if tc.code != 0 && (!errors.As(err, &we) || we.Code != tc.code) {
			t.Errorf("status %d: %v, want wire code %d", tc.res.Status, err, tc.code)
		}
		if v != tc.version {
			t.Errorf("status %d: version %d, want %d", tc.res.Status, v, tc.version)
		}
		if tc.res.Status == wire.StatusOK && len(route.Brokers) != 1 {
			t.Errorf("status ok: route %+v", route)
		}
	}
}
