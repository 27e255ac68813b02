package broker_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
)

// cpuSeconds returns the process's user plus system CPU time. Node and
// brokers share the process, so a figure taken around a storm is the CPU of
// both sides together: an upper bound on what the node spent.
func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// BenchmarkRegistrationStorm starts 1000 brokers with 100 topics each at
// once against one node, each over its own QUIC connection, and measures
// the time until every one is registered (acknowledged), and the CPU the
// process spent meanwhile.
func BenchmarkRegistrationStorm(b *testing.B) {
	const brokers, topicsPerBroker = 1000, 100
	ca := newTestCA(b)
	cred := ca.TLS(b, pki.RoleBroker, "storm")
	for b.Loop() {
		b.StopTimer()
		tn := startNode(b, ca, func(c *node.Config) { c.MaxConnsPerHost = 2 * brokers })
		regs := make([]*broker.Registrar, brokers)
		for i := range regs {
			names := make([]string, topicsPerBroker)
			for j := range names {
				names[j] = fmt.Sprintf("topic-%d-%d", i, j)
			}
			r, err := broker.New(broker.Config{
				Identity:       broker.Identity{Cluster: "storm", BrokerName: fmt.Sprintf("b%d", i), Addr: fmt.Sprintf("10.1.%d.%d:10911", i/250, i%250)},
				Topics:         topics(names...),
				Nodes:          nodes.Static(tn.Addr()),
				TLS:            cred,
				RequestTimeout: broker.MaxRequestTimeout,
				Logger:         testLogger(),
			})
			if err != nil {
				b.Fatal(err)
			}
			regs[i] = r
		}
		cpu0, start := cpuSeconds(b), time.Now()
		b.StartTimer()
		for _, r := range regs {
			if err := r.Start(); err != nil {
				b.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var wg sync.WaitGroup
		for _, r := range regs {
			wg.Go(func() {
				if err := r.WaitSynced(ctx); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		cancel()
		b.StopTimer()
		elapsed, cpu := time.Since(start), cpuSeconds(b)-cpu0
		if got := tn.Node().Registry().TopicCount(); got != brokers*topicsPerBroker {
			b.Fatalf("%d topics registered, want %d", got, brokers*topicsPerBroker)
		}
		var dials, registrations uint64
		for _, r := range regs {
			st := r.Nodes()[0]
			dials += st.Dials
			registrations += st.Registrations
		}
		b.ReportMetric(float64(dials)/brokers, "dials/broker")
		b.ReportMetric(float64(registrations)/brokers, "registrations/broker")
		b.ReportMetric(elapsed.Seconds(), "s-all-registered")
		b.ReportMetric(cpu, "cpu-s(node+brokers)")

		// Stopping them all at once is an unregistration storm.
		start = time.Now()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		for _, r := range regs {
			wg.Go(func() {
				if err := r.Stop(sctx); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		cancel()
		b.ReportMetric(time.Since(start).Seconds(), "s-all-unregistered")
		if n := tn.Node().Registry().LeaseCount(); n != 0 {
			b.Fatalf("%d leases left after every broker stopped", n)
		}
		tn.Stop()
		b.StartTimer()
	}
}
