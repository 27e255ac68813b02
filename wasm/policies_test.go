package wasm

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestZoneAffinity(t *testing.T) {
	m := load(t, newHost(t, HostConfig{}), "zone-affinity.wasm")
	route := encode(t, zonedRoute())
	tests := []struct {
		name   string
		client ClientInfo
		want   []string // broker groups the client sees (queues alike)
	}{
		// Group c has no master: everyone keeps it, to read from its slave.
		{"east sees east and masterless", ClientInfo{Zone: "east"}, []string{"a", "c"}},
		{"west sees west", ClientInfo{Zone: "west"}, []string{"b", "c"}},
		{"zone compared ignoring case", ClientInfo{Zone: "EAST"}, []string{"a", "c"}},
		{"no zone sees everything", ClientInfo{}, []string{"a", "b", "c", "d"}},
		{"blank zone sees everything", ClientInfo{Zone: "  "}, []string{"a", "b", "c", "d"}},
		{"zoneMode=false sees everything", ClientInfo{Zone: "east", Labels: map[string]string{"zoneMode": "false"}}, []string{"a", "b", "c", "d"}},
		{"zoneMode=TRUE filters", ClientInfo{Zone: "east", Labels: map[string]string{"zoneMode": "TRUE"}}, []string{"a", "c"}},
		// RocketMQ returns what matched, even if only masterless groups.
		{"unknown zone sees only masterless", ClientInfo{Zone: "mars"}, []string{"c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.FilterRoute(context.Background(), RouteFilterInput{Client: tt.client, Topic: "T", Route: route})
			if err != nil {
				t.Fatal(err)
			}
			queues, brokers := names(got)
			if !slices.Equal(brokers, tt.want) || !slices.Equal(queues, tt.want) {
				t.Errorf("queues %v brokers %v, want %v", queues, brokers, tt.want)
			}
		})
	}
}

func TestSelfPreservationThreshold(t *testing.T) {
	m := load(t, newHost(t, HostConfig{}), "self-preservation.wasm")
	steady := []int64{30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000}
	tests := []struct {
		name  string
		stats BrokerStats
		want  time.Duration
	}{
		{"new broker keeps the default", BrokerStats{Heartbeats: 1, IntervalsMs: steady[:1], MeanIntervalMs: 30000}, 120 * time.Second},
		{"steady broker keeps the default", BrokerStats{Heartbeats: 50, IntervalsMs: steady, MeanIntervalMs: 30000}, 120 * time.Second},
		// 4 gaps of (30 s + 4*5 s) = 200 s.
		{"jitter stretches", BrokerStats{Heartbeats: 50, IntervalsMs: steady, MeanIntervalMs: 30000, JitterMs: 5000}, 200 * time.Second},
		// 10% loss: ceil(ln 1e-6 / ln 0.1) = 6 gaps of 30 s, plus 2 RTT.
		{"loss stretches", BrokerStats{Heartbeats: 50, IntervalsMs: steady, MeanIntervalMs: 30000, LossPermille: 100, RTTMs: 500}, 181 * time.Second},
		{"clamped by the host", BrokerStats{Heartbeats: 50, IntervalsMs: steady, MeanIntervalMs: 30000, JitterMs: 60000, LossPermille: 900}, 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleThresholdInput()
			in.Stats, in.DefaultMs = tt.stats, 120000
			got, err := m.ExpiryThreshold(context.Background(), in, 10*time.Second, 10*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("threshold %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSelfPreservationConfirm(t *testing.T) {
	m := load(t, newHost(t, HostConfig{}), "self-preservation.wasm")
	due := func(n int) []DueLease {
		out := make([]DueLease, n)
		for i := range out {
			out[i] = DueLease{Cluster: "C", Addr: string(rune('a' + i)), Epoch: uint64(i)}
		}
		return out
	}
	tests := []struct {
		name        string
		leases, due int
		permille    uint32
		want        int
	}{
		{"few due all go", 100, 3, 1000, 3},
		{"at most 15% at once", 100, 40, 1000, 15},
		{"small registry still expires", 3, 2, 1000, 1},
		{"heartbeats missing: self-preservation", 100, 3, 849, 0},
		{"at the renewal threshold", 100, 3, 850, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ConfirmInput{Due: due(tt.due), Stats: ConfirmStats{Leases: uint32(tt.leases), Due: uint32(tt.due), HeartbeatSuccessPermille: tt.permille}, Rand: 7}
			idx, err := m.ConfirmExpiry(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if len(idx) != tt.want {
				t.Errorf("removes %d (%v), want %d", len(idx), idx, tt.want)
			}
		})
	}
}

func TestJitterThresholdWAT(t *testing.T) {
	m := load(t, newHost(t, HostConfig{}), "jitter-threshold.wasm")
	for _, tt := range []struct {
		def, jitter int64
		want        time.Duration
	}{
		{120000, 0, 120 * time.Second},
		{120000, 2500, 130 * time.Second},
		{20, 1, 10 * time.Second},            // clamped up
		{1 << 40, 1 << 40, 10 * time.Minute}, // clamped down, 8-byte integers
		{300000, 0x1234, 300*time.Second + 4*0x1234*time.Millisecond},
	} {
		in := sampleThresholdInput()
		in.DefaultMs, in.Stats.JitterMs = tt.def, tt.jitter
		got, err := m.ExpiryThreshold(context.Background(), in, 10*time.Second, 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("default %d jitter %d: %v, want %v", tt.def, tt.jitter, got, tt.want)
		}
	}
}
