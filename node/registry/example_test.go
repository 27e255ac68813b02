package registry_test

import (
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
)

// stepClock is a clock that moves only when told, so the example's
// expiry is exact.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

// A master and its slave register a topic; the route joins the topic's
// queues with the group's addresses. Reading it again is answered from
// the cached encoding, with the same version. When the master goes silent
// past its heartbeat timeout, ExpireDue removes it, and the route shows
// the slave as the acting master of the now read-only topic.
func Example() {
	clock := &stepClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	r := registry.New(registry.Config{Clock: clock})

	topics := []wire.TopicConfig{{Name: "orders", ReadQueues: 8, WriteQueues: 8, Perm: wire.PermRead | wire.PermWrite}}
	for id, addr := range []string{"10.0.0.1:10911", "10.0.0.2:10911"} {
		if _, err := r.Register(registry.Registration{
			Cluster: "DefaultCluster", BrokerName: "broker-a", BrokerID: int64(id), Addr: addr,
			ActingMaster: true, DataVersion: wire.DataVersion{Timestamp: 1, Counter: 1}, Topics: topics,
			HeartbeatTimeout: 30 * time.Second,
		}); err != nil {
			log.Fatal(err)
		}
	}
	show := func() {
		route, version, err := r.RouteData("orders")
		if err != nil {
			log.Fatal(err)
		}
		b := route.Brokers[0]
		fmt.Printf("queues %d/%d perm %d, addrs %v, version set: %t\n",
			route.Queues[0].ReadQueues, route.Queues[0].WriteQueues, route.Queues[0].Perm, b.Addrs, version != 0)
	}
	show()

	first, _ := r.Route("orders")
	again, _ := r.Route("orders")
	fmt.Println("cached:", first == again)

	// The slave keeps heartbeating; the master does not.
	clock.now = clock.now.Add(20 * time.Second)
	slave, _ := r.Lease("DefaultCluster", "10.0.0.2:10911")
	if _, err := r.Heartbeat("DefaultCluster", "10.0.0.2:10911", slave.Epoch, slave.DataVersion); err != nil {
		log.Fatal(err)
	}
	clock.now = clock.now.Add(20 * time.Second)
	for _, l := range r.ExpireDue() {
		fmt.Println("expired:", l.Addr)
	}
	show()

	_, err := r.Route("payments")
	fmt.Println("unknown topic:", errors.Is(err, registry.ErrTopicNotFound))
	// Output:
	// queues 8/8 perm 6, addrs map[0:10.0.0.1:10911 1:10.0.0.2:10911], version set: true
	// cached: true
	// expired: 10.0.0.1:10911
	// queues 8/8 perm 4, addrs map[0:10.0.0.2:10911], version set: true
	// unknown topic: true
}
