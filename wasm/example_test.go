package wasm_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/edgereg/edgereg/wasm"
)

// A host validates a module once (size, structure, imports, exports, ABI
// version and a dry run of each hook, compiled in a child process) and then
// calls it under a deadline. The module here is the shipped
// jitter-threshold policy, written in WebAssembly text
// (policies/wat/jitter-threshold.wat): a broker's expiry threshold is the
// node's default plus four times the jitter of its heartbeats, clamped to
// the bounds the host gives (an answer outside them would be a failed
// call, and the node would apply its default).
func ExampleHost_Validate() {
	ctx := context.Background()
	host, err := wasm.NewHost(ctx, wasm.HostConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close(ctx)

	module, err := os.ReadFile("../testdata/wasm/jitter-threshold.wasm")
	if err != nil {
		log.Fatal(err)
	}
	m, err := host.Validate(ctx, module)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	fmt.Println("hooks:", m.Hooks())

	in := wasm.ThresholdInput{
		Broker:    wasm.BrokerInfo{Cluster: "DefaultCluster", Name: "broker-a", Addr: "10.0.0.1:10911"},
		Stats:     wasm.BrokerStats{Heartbeats: 12, MeanIntervalMs: 30_000, JitterMs: 2_500},
		DefaultMs: 120_000, NowMs: time.Now().UnixMilli(),
	}
	for _, hi := range []time.Duration{10 * time.Minute, 2 * time.Minute} {
		d, err := m.ExpiryThreshold(ctx, in, 10*time.Second, hi)
		fmt.Println("threshold:", d, "error:", err)
	}
	// Output:
	// hooks: [expiry]
	// threshold: 2m10s error: <nil>
	// threshold: 2m0s error: <nil>
}
