package wasm_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire"
)

// A host validates a module once (size, structure, imports, exports, ABI
// version and a dry run of each hook, compiled in a child process) and then
// calls it under a deadline. Here the shipped zone-affinity policy keeps a
// client in zone-1 to the broker group of its zone.
func ExampleHost_Validate() {
	ctx := context.Background()
	host, err := wasm.NewHost(ctx, wasm.HostConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close(ctx)

	module, err := os.ReadFile("../testdata/wasm/zone-affinity.wasm")
	if err != nil {
		log.Fatal(err)
	}
	m, err := host.Validate(ctx, module)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	fmt.Println("hooks:", m.Hooks())

	route, err := wire.Marshal(wire.Route{
		Queues: []wire.QueueData{{BrokerName: "broker-a", ReadQueues: 8, WriteQueues: 8, Perm: 6},
			{BrokerName: "broker-b", ReadQueues: 8, WriteQueues: 8, Perm: 6}},
		Brokers: []wire.BrokerData{
			{Cluster: "DefaultCluster", Name: "broker-a", Zone: "zone-0", Addrs: map[int64]string{0: "10.0.0.1:10911"}},
			{Cluster: "DefaultCluster", Name: "broker-b", Zone: "zone-1", Addrs: map[int64]string{0: "10.0.1.1:10911"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	kept, err := m.FilterRoute(ctx, wasm.RouteFilterInput{Client: wasm.ClientInfo{Zone: "zone-1"},
		Topic: "orders", Route: route, NowMs: time.Now().UnixMilli()})
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range kept.Brokers {
		fmt.Println("kept:", b.Name, b.Zone)
	}
	// Output:
	// hooks: [route]
	// kept: broker-b zone-1
}
