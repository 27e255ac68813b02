package registry

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/edgereg/edgereg/wire"
)

// TestQuickValidTopic: the table check agrees with wire.ValidTopicName on
// every byte, the length limits and random names.
func TestQuickValidTopic(t *testing.T) {
	names := []string{"", "a", strings.Repeat("a", wire.MaxTopicNameLen), strings.Repeat("a", wire.MaxTopicNameLen+1),
		"TopicTest", "%RETRY%group", "a|b-c_d", "a b", "a/b", "é", "a\x00"}
	for c := range 256 {
		names = append(names, string([]byte{byte(c)}), "ok"+string([]byte{byte(c)}))
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 2000 {
		b := make([]byte, rng.IntN(140))
		for i := range b {
			const alphabet = "aZ09_-%|.: \xff"
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		if got, want := quickValidTopic(n), wire.ValidTopicName(n) == nil; got != want {
			t.Errorf("quickValidTopic(%q) = %v, ValidTopicName says %v", n, got, want)
		}
	}
}

// TestRegisterRevalidatesChanged: Register checks a registration itself,
// whatever Validate said of it before. Each field Validate checks, changed
// to an invalid value after it accepted the registration, and topics of
// another slice, are refused by Register as if Validate had never run.
func TestRegisterRevalidatesChanged(t *testing.T) {
	valid := func() Registration {
		return Registration{Cluster: "c1", BrokerName: "b1", Addr: "10.0.0.1:1", HAAddr: "10.0.0.1:2", Zone: "z",
			DataVersion: wire.DataVersion{Counter: 1}, Topics: []wire.TopicConfig{{Name: "t1", ReadQueues: 1, WriteQueues: 1, Perm: 6}}}
	}
	changes := map[string]func(*Registration){
		"cluster":           func(r *Registration) { r.Cluster = "" },
		"broker name":       func(r *Registration) { r.BrokerName = "" },
		"address":           func(r *Registration) { r.Addr = "no port" },
		"HA address":        func(r *Registration) { r.HAAddr = "no port" },
		"zone":              func(r *Registration) { r.Zone = "a\x00" },
		"broker id":         func(r *Registration) { r.BrokerID = -1 },
		"heartbeat timeout": func(r *Registration) { r.HeartbeatTimeout = -1 },
		"topics":            func(r *Registration) { r.Topics = []wire.TopicConfig{{Name: "bad name"}} },
		"more topics":       func(r *Registration) { r.Topics = append(r.Topics[:1:1], wire.TopicConfig{Name: "bad name"}) },
		"topic in place":    func(r *Registration) { r.Topics[0].Name = "bad name" },
	}
	for name, change := range changes {
		reg := valid()
		if err := reg.Validate(); err != nil {
			t.Fatal(err)
		}
		change(&reg)
		r, _ := newTestRegistry(t)
		if _, err := r.Register(reg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s changed after Validate: Register gave %v, want ErrInvalid", name, err)
		}
		if err := reg.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate gave %v", name, err)
		}
		if _, err := r.Register(reg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s refused by Validate: Register gave %v, want ErrInvalid", name, err)
		}
	}
	r, _ := newTestRegistry(t)
	reg := valid()
	if err := reg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg.MayMove = func(string) error { return nil } // set by the node after Validate: not a checked field
	if _, err := r.Register(reg); err != nil {
		t.Errorf("validated registration: %v", err)
	}
}
