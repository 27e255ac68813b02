package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/client"
	"github.com/edgereg/edgereg/wire/pki"
)

// metricValue sums a metric family's samples whose labels include every
// "name=value" given.
func metricValue(t testing.TB, tn *testNode, name string, labels ...string) float64 {
	t.Helper()
	fams, err := tn.stats.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for _, kv := range labels {
				k, v, _ := strings.Cut(kv, "=")
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// waitMetric polls until a metric reaches at least want (connections are
// admitted by the node after the client's handshake returns).
func waitMetric(t testing.TB, tn *testNode, want float64, name string, labels ...string) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := metricValue(t, tn, name, labels...)
		if v >= want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialOnce connects, reads a route and closes; it reports whether both
// worked.
func dialOnce(tn *testNode, conf *tls.Config, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a hang, not a speed
	defer cancel()
	c, err := client.Dial(ctx, tn.Addr().String(), client.Config{TLS: conf})
	if err != nil {
		return err
	}
	defer c.Close()
	_, _, err = c.Route(ctx, topic, wire.ClientAttrs{})
	return err
}

// TestAttackerOnSameIPCannotLockOutClients: an attacker holding a client
// certificate opens connection after connection from the legitimate
// client's IP while the legitimate client reconnects and reads. Before
// per-identity limits the attacker took every per-host slot and the
// legitimate client's reconnects were refused.
func TestAttackerOnSameIPCannotLockOutClients(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxConnsPerHost = 8
		c.MaxConnsPerIdentity = 4
	})
	ctx := ctxT(t)
	if _, err := tn.dial(pki.RoleBroker).Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t")); err != nil {
		t.Fatal(err)
	}
	legit := tn.tlsFor(pki.RoleClient, "legit")
	attacker := tn.tlsFor(pki.RoleClient, "attacker")
	// The attacker dials in a loop and keeps every connection it gets.
	stop := make(chan struct{})
	var opened atomic.Int64
	var attack sync.WaitGroup
	attack.Go(func() {
		var held []*quic.Conn
		defer func() {
			for _, qc := range held {
				qc.CloseWithError(0, "")
			}
		}()
		for len(held) < 500 {
			select {
			case <-stop:
				return
			default:
			}
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			qc, err := quic.DialAddr(dctx, tn.Addr().String(), attacker, nil)
			cancel()
			if err == nil {
				held = append(held, qc)
				opened.Add(1)
			}
		}
	})
	// Let the attacker fill the host before the legitimate client starts.
	waitMetric(t, tn, 8, "edgereg_connections_replaced_total")
	const rounds = 30
	ok := 0
	for i := range rounds {
		if err := dialOnce(tn, legit, "t"); err == nil {
			ok++
		} else {
			t.Logf("round %d: legitimate reconnect and read failed: %v", i, err)
		}
	}
	close(stop)
	attack.Wait()
	t.Logf("legitimate reconnect-and-read success: %d/%d (%.0f %%); attacker connections opened %d, replaced %v, refused %v",
		ok, rounds, 100*float64(ok)/rounds, opened.Load(),
		metricValue(t, tn, "edgereg_connections_replaced_total"), metricValue(t, tn, "edgereg_connections_refused_total"))
	if ok != rounds {
		t.Errorf("legitimate client succeeded %d of %d times, want every time", ok, rounds)
	}
}

// TestClientsCannotStarveBrokers: readers holding every worker do not delay
// a broker's registration and heartbeat or an operator's leases: brokers
// and operators have workers of their own.
func TestClientsCannotStarveBrokers(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.Workers = 2 })
	broker, op := tn.dial(pki.RoleBroker), tn.dial(pki.RoleOperator)
	for range cap(tn.workers) { // every reader worker is busy
		tn.workers <- struct{}{}
	}
	defer func() {
		for range cap(tn.workers) {
			<-tn.workers
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ack, err := broker.Register(ctx, registration("c1", "b1", 0, "10.0.0.1:1", "t"))
	if err != nil {
		t.Fatalf("registration while readers hold every worker: %v", err)
	}
	if _, err := broker.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: "10.0.0.1:1", Epoch: ack.Lease.Epoch, DataVersion: wire.DataVersion{Counter: 1}}); err != nil {
		t.Fatalf("heartbeat while readers hold every worker: %v", err)
	}
	if _, err := op.Leases(ctx); err != nil {
		t.Fatalf("operator leases while readers hold every worker: %v", err)
	}
}

// flapper is one broker slot that restarts: each life dials from a fresh
// UDP socket, registers, heartbeats, and dies by closing its socket without
// a word, as kill -9 would, leaving the node a connection that looks alive
// until its idle timeout.
type flapper struct {
	tn      *testNode
	conf    *tls.Config
	addr    string
	refused atomic.Int64
	lives   atomic.Int64
}

// live runs one life of beats heartbeats; with until set, it goes on
// heartbeating until until is closed (and then dies like the others).
func (f *flapper) live(ctx context.Context, beats int, until <-chan struct{}) error {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer udp.Close() // the crash: no CONNECTION_CLOSE is ever sent
	tr := &quic.Transport{Conn: udp}
	c, err := client.Dial(ctx, f.tn.Addr().String(), client.Config{TLS: f.conf, Transport: tr})
	if err != nil {
		return err
	}
	reg := registration("c1", "g-"+f.addr, 0, f.addr, "t")
	reg.HeartbeatTimeoutMs = 5000 // generous: a loaded machine must not make an expiry
	ack, err := c.Register(ctx, reg)
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		if i >= beats {
			if until == nil {
				break
			}
			select {
			case <-until:
				until = nil
				continue
			default:
			}
		}
		time.Sleep(20 * time.Millisecond)
		if _, err := c.Heartbeat(ctx, &wire.Heartbeat{Cluster: "c1", Addr: f.addr, Epoch: ack.Lease.Epoch, DataVersion: reg.DataVersion}); err != nil {
			return err
		}
	}
	f.lives.Add(1)
	return nil
}

// TestFlappingBrokersNeitherRefusedNorExpired: 20 broker slots on one IP
// restart 6 times each: 120 connections against the host's budget of 40,
// while every dead one still looks alive. Before, dead connections held
// their slots until the idle timeout and restarts were refused (so leases
// ran out); now each restart replaces a dead connection of its certificate.
func TestFlappingBrokersNeitherRefusedNorExpired(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxConnsPerHost = 40       // the budget before per-class limits
		c.MaxBrokerConnsPerHost = 40 // brokers' own budget
		c.ScanInterval = 50 * time.Millisecond
	})
	conf := tn.tlsFor(pki.RoleBroker, "flapping-brokers") // one certificate for every broker
	op := tn.dial(pki.RoleOperator)
	const slots, restarts = 20, 6
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg, lastLives sync.WaitGroup
	var failures atomic.Int64
	// Each slot's last life heartbeats until every slot has reached its
	// last life, so no lease runs out merely because its slot finished
	// early: any expiry is a broker that could not get back in.
	allLast := make(chan struct{})
	lastLives.Add(slots)
	go func() { lastLives.Wait(); close(allLast) }()
	fl := make([]*flapper, slots)
	for i := range slots {
		fl[i] = &flapper{tn: tn, conf: conf, addr: fmt.Sprintf("10.0.1.%d:10911", i)}
		wg.Go(func() {
			for life := range restarts {
				var until <-chan struct{}
				if life == restarts-1 {
					lastLives.Done()
					until = allLast
				}
				if err := fl[i].live(ctx, 10, until); err != nil {
					failures.Add(1)
					t.Logf("slot %d: %v", i, err)
				}
			}
		})
	}
	leasesOK := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(100 * time.Millisecond):
			if _, err := op.Leases(ctx); err == nil {
				leasesOK++
			} else {
				t.Errorf("operator leases during the flapping: %v", err)
			}
		}
	}
	refused := metricValue(t, tn, "edgereg_connections_refused_total")
	expired := metricValue(t, tn, "edgereg_expiries_total")
	lives := 0
	for _, f := range fl {
		lives += int(f.lives.Load())
	}
	t.Logf("broker lives %d/%d, failed %d, connections refused %v, replaced %v, expiries %v, operator leases served %d",
		lives, slots*restarts, failures.Load(), refused, metricValue(t, tn, "edgereg_connections_replaced_total"), expired, leasesOK)
	if failures.Load() != 0 || refused != 0 || expired != 0 {
		t.Errorf("flapping brokers: %d failed lives, %v refusals, %v expiries; want none", failures.Load(), refused, expired)
	}
}

// TestAdmissionPlace checks the admission rules on their own, without
// sockets: who is refused, who replaces whom, and that nothing is replaced
// for a connection that is refused anyway.
// placeAndCount places a as admit does and, when it is let in, counts it
// and uncounts the connection it replaces, under ad.mu.
func placeAndCount(ad *admission, a *admitted) (replaced *admitted, reason string) {
	ad.mu.Lock()
	defer ad.mu.Unlock()
	v, reason := ad.place(a)
	if reason == "" {
		if v != nil {
			ad.uncount(v)
		}
		ad.countLocked(a)
	}
	return v, reason
}

func TestAdmissionPlace(t *testing.T) {
	ad := newAdmission(Config{MaxConns: 20, MaxConnsPerHost: 2, MaxBrokerConnsPerHost: 3, MaxConnsPerIdentity: 2}.WithDefaults())
	seq := int64(0)
	conn := func(host, ident string, class connClass) *admitted {
		seq++
		a := &admitted{host: host, ident: ident, class: class}
		a.last.Store(seq) // later connections are more recently active
		return a
	}
	admit := func(a *admitted) (*admitted, string) { return placeAndCount(ad, a) }
	// Identity X fills its limit on two hosts.
	x1, x2 := conn("h1", "X", userClass), conn("h2", "X", userClass)
	admit(x1)
	admit(x2)
	// Another reader fills h1.
	admit(conn("h1", "Y", userClass))
	// X on full h1 replaces its own connection there, not the one on h2.
	if v, reason := admit(conn("h1", "X", userClass)); reason != "" || v != x1 {
		t.Fatalf("X on full h1: victim %v, reason %q; want x1 replaced", v, reason)
	}
	// Z has nothing on full h1: refused, nothing replaced.
	if v, reason := admit(conn("h1", "Z", userClass)); reason != refusedPerHost || v != nil {
		t.Fatalf("Z on full h1: victim %v, reason %q; want refused", v, reason)
	}
	// X at its identity limit on a free host replaces its oldest anywhere.
	if v, reason := admit(conn("h3", "X", userClass)); reason != "" || v != x2 {
		t.Fatalf("X at its limit on h3: victim %v, reason %q; want x2 replaced", v, reason)
	}
	// Anonymous peers have no identity: refused on a full host.
	admit(conn("h4", "", userClass))
	admit(conn("h4", "", userClass))
	if v, reason := admit(conn("h4", "", userClass)); reason != refusedPerHost || v != nil {
		t.Fatalf("anonymous on full h4: victim %v, reason %q", v, reason)
	}
	// Brokers on h1 have their own budget: readers filling h1 leave it free.
	for i := range 3 {
		if _, reason := admit(conn("h1", fmt.Sprint("B", i), brokerClass)); reason != "" {
			t.Fatalf("broker %d on h1 refused: %s", i, reason)
		}
	}
	if _, reason := admit(conn("h1", "B9", brokerClass)); reason != refusedPerHost {
		t.Fatalf("fourth broker identity on h1: %q, want refused", reason)
	}
	if ad.clients != 5 || ad.hosts[userClass]["h1"] != 2 || len(ad.idents["X"]) != 2 {
		t.Fatalf("counts: clients %d, h1 readers %d, X %d", ad.clients, ad.hosts[userClass]["h1"], len(ad.idents["X"]))
	}
}

// TestSharedBrokerCertificateDoesNotKickLiveBrokers: many brokers share one
// certificate (a common deployment) on one host whose broker budget is
// full. A newcomer may replace only a connection that holds no live broker
// session (a dead life whose lease was taken over by a newer connection, or
// one that never registered); live brokers are never pushed out, so they
// cannot kick each other in turn. Before, the least recently active live
// broker was replaced, reconnected and replaced the next one.
func TestSharedBrokerCertificateDoesNotKickLiveBrokers(t *testing.T) {
	ad := newAdmission(Config{MaxConns: 20, MaxConnsPerHost: 2, MaxBrokerConnsPerHost: 3, MaxConnsPerIdentity: 2}.WithDefaults())
	live := map[string]bool{}
	ad.leaseLive = func(cluster, addr string) bool { return live[cluster+"/"+addr] }
	seq := int64(0)
	admit := func() (*admitted, *admitted, string) {
		seq++
		a := &admitted{host: "h1", ident: "shared", class: brokerClass}
		a.last.Store(seq)
		v, reason := placeAndCount(ad, a)
		return a, v, reason
	}
	var brokers []*admitted
	for i := range 3 {
		a, _, reason := admit()
		if reason != "" {
			t.Fatalf("broker %d refused: %s", i, reason)
		}
		addr := fmt.Sprintf("10.0.0.%d:10911", i)
		live["c/"+addr] = true
		ad.holdSession(a, "c", addr)
		brokers = append(brokers, a)
	}
	// The host is full of live brokers: a fourth is refused, nobody kicked.
	if _, v, reason := admit(); reason != refusedPerHost || v != nil {
		t.Fatalf("fourth broker on a host full of live sessions: victim %v, reason %q; want refused, nobody replaced", v, reason)
	}
	// Broker 1 restarts: its new connection cannot get in yet, but once a
	// connection it opened elsewhere took its lease over (here: broker 1's
	// lease ends), its old connection is the one replaced.
	delete(live, "c/10.0.0.1:10911")
	if _, v, reason := admit(); reason != "" || v != brokers[1] {
		t.Fatalf("newcomer with a dead session on the host: victim %v, reason %q; want broker 1's old connection replaced", v, reason)
	}
	// A session taken over by another connection frees the old one.
	newer := &admitted{host: "h2", ident: "shared", class: brokerClass}
	ad.holdSession(newer, "c", "10.0.0.2:10911")
	if _, v, reason := admit(); reason != "" || v != brokers[2] {
		t.Fatalf("newcomer when broker 2's session moved: victim %v, reason %q; want broker 2's old connection", v, reason)
	}
}

// deafConn is a client socket that sends and never receives: a peer that
// spoofs its source address (it never sees the node's answers) or simply
// stalls its handshakes.
type deafConn struct {
	net.PacketConn
	closed chan struct{}
}

func (d *deafConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-d.closed
	return 0, nil, net.ErrClosed
}

func (d *deafConn) Close() error {
	select {
	case <-d.closed:
	default:
		close(d.closed)
	}
	return d.PacketConn.Close()
}

// dialDeaf starts n handshakes from peers at 127.0.0.1 that never receive
// what the node sends (what a spoofed source address looks like), on wg,
// until ctx ends.
func dialDeaf(t *testing.T, ctx context.Context, wg *sync.WaitGroup, tn *testNode, n int) {
	t.Helper()
	dialDeafFrom(t, ctx, wg, tn, "127.0.0.1", n)
}

// dialDeafFrom is dialDeaf from the loopback address ip.
func dialDeafFrom(t *testing.T, ctx context.Context, wg *sync.WaitGroup, tn *testNode, ip string, n int) {
	t.Helper()
	for range n {
		udp, err := net.ListenPacket("udp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		dc := &deafConn{PacketConn: udp, closed: make(chan struct{})}
		tr := &quic.Transport{Conn: dc}
		wg.Go(func() {
			defer tr.Close()
			defer dc.Close() // first: tr.Close waits for the read loop
			conf := tn.tlsFor(pki.RoleClient, "silent")
			conf.NextProtos = []string{wire.ALPN}
			_, _ = tr.Dial(ctx, tn.Addr(), conf, &quic.Config{})
		})
	}
}

// TestSilentHandshakesDoNotFillTheNode: peers that send QUIC Initials and
// never answer (a spoofed source address looks exactly like this) used to
// take a connection slot each for the handshake idle timeout, so a few of
// them filled MaxConns and a broker was refused. Once handshakes pile up
// the node asks for source-address validation (a Retry), which a peer
// that never receives cannot pass: the slots stay free.
func TestSilentHandshakesDoNotFillTheNode(t *testing.T) {
	tn := startNode(t, func(c *Config) { c.MaxConns = 8 })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	dialDeaf(t, ctx, &wg, tn, 16)
	// Let the Initials arrive and the node count their handshakes.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tn.adm.mu.Lock()
		n := tn.adm.total
		tn.adm.mu.Unlock()
		if n >= tn.cfg.MaxConns {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the rest of the Initials in flight
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer bcancel()
	b, err := client.Dial(bctx, tn.Addr().String(), client.Config{TLS: tn.tlsFor(pki.RoleBroker, "broker")})
	if err != nil {
		t.Fatalf("a broker while silent peers hold handshakes: %v (refused: %v)", err, metricValue(t, tn, "edgereg_connections_refused_total"))
	}
	defer b.Close()
	if _, err := b.Ping(bctx); err != nil {
		t.Fatalf("broker ping: %v", err)
	}
}

// TestHonestStormIsNotAskedForRetry: a fleet reconnecting at once (every
// broker after a node restart) has thousands of handshakes in progress,
// most waiting for a handshake slot. The node used to ask every peer past
// the 128th in progress to validate its address with a Retry, and quic-go
// queues at most 8 Retries to send and drops the Initials beyond them:
// those brokers waited out their Initial retransmission timers, doubling,
// and a 2,000-broker storm took 15 s instead of 2.3 s. Honest storms are
// validated only when in-progress handshakes reach half of MaxConns.
func TestHonestStormIsNotAskedForRetry(t *testing.T) {
	ad := newAdmission(Config{MaxConns: 10_000, MaxHandshakesPerHost: 128, MaxHandshakes: 512, HandshakeQueueTimeout: time.Second})
	ad.handshakes = 4_999
	if ad.verifySource(nil) {
		t.Fatalf("%d honest handshakes in progress, MaxConns %d: a Retry was asked, want none below half of MaxConns", ad.handshakes, ad.max)
	}
	ad.handshakes = 5_000
	if !ad.verifySource(nil) {
		t.Fatalf("%d handshakes in progress, MaxConns %d: want a Retry", ad.handshakes, ad.max)
	}

	// Once handshakes time out (spoofed addresses never answer), Retries
	// start where they did before: at 128 in progress (one host's worth).
	now := time.Now()
	ad.handshakes = 128
	for range timeoutEvidence - 1 {
		ad.noteTimeout(now)
	}
	if got := ad.validationThreshold(now); got != 5_000 {
		t.Fatalf("%d timeouts: threshold %d, want 5000 (not yet evidence)", timeoutEvidence-1, got)
	}
	ad.noteTimeout(now)
	if !ad.verifySource(nil) {
		t.Fatalf("%d timeouts, 128 handshakes in progress: want a Retry", timeoutEvidence)
	}
	// The evidence lasts one more window, then ages out.
	if got := ad.validationThreshold(now.Add(evidenceWindow + time.Second)); got != 128 {
		t.Fatalf("a window later: threshold %d, want 128", got)
	}
	if got := ad.validationThreshold(now.Add(2*evidenceWindow + 2*time.Second)); got != 5_000 {
		t.Fatalf("two windows later: threshold %d, want 5000", got)
	}
}

// TestTimedOutHandshakesTurnOnRetries: peers that never answer (deafConn)
// start handshakes while few are in progress, so they are not asked for a
// Retry; when those time out, the node takes them as evidence of spoofed
// addresses and asks the next peers for one, which an honest broker
// answers.
func TestTimedOutHandshakesTurnOnRetries(t *testing.T) {
	tn := startNode(t, func(c *Config) {
		c.MaxConns = 64
		c.HandshakeQueueTimeout = time.Second // handshakes time out after 5 s
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	dialDeaf(t, ctx, &wg, tn, timeoutEvidence+4)
	// The handshakes time out (the node's handshake idle timeout); poll, bounded.
	timedOut := func() float64 { return metricValue(t, tn, "edgereg_tls_handshake_failures_total", "reason=timeout") }
	deadline := time.Now().Add(15 * time.Second)
	for timedOut() < timeoutEvidence && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := timedOut(); got < timeoutEvidence {
		t.Fatalf("handshakes timed out: %v, want >= %d", got, timeoutEvidence)
	}
	if got := metricValue(t, tn, "edgereg_address_validations_total"); got != 0 {
		t.Fatalf("Retries asked before the timeouts: %v, want 0 (%d handshakes in progress, MaxConns 64)", got, timeoutEvidence+4)
	}
	// Deaf peers again, now asked for Retries they cannot answer: while
	// they are in progress an honest broker is asked for one too.
	dialDeaf(t, ctx, &wg, tn, timeoutEvidence+4)
	// Let their Initials arrive and the node count their handshakes.
	inProgress := func() int { tn.adm.mu.Lock(); defer tn.adm.mu.Unlock(); return tn.adm.handshakes }
	deadline = time.Now().Add(5 * time.Second)
	for inProgress() < timeoutEvidence && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer bcancel()
	b, err := client.Dial(bctx, tn.Addr().String(), client.Config{TLS: tn.tlsFor(pki.RoleBroker, "broker")})
	if err != nil {
		t.Fatalf("a broker after the timeouts: %v", err)
	}
	defer b.Close()
	if _, err := b.Ping(bctx); err != nil {
		t.Fatalf("broker ping: %v", err)
	}
	if got := metricValue(t, tn, "edgereg_address_validations_total"); got < 1 {
		t.Fatalf("Retries asked after %d timeouts: %v, want some", timeoutEvidence, got)
	}
}

// TestSlowHonestHandshakesAreNotEvidence: evidence of spoofing used to be
// handshakes that held their slot past handshakeSlotHold; in a storm on a
// saturated machine honest ones do too (108-517 of 10,000 in storms here,
// their clients starved of CPU), and counting those turned Retries on for
// the rest of the storm: 22,000-34,000 Retries asked per storm, and one
// storm took 28 s with 5,847 redials. Now only handshakes that time out
// count, and only when they are a large share of those that completed.
func TestSlowHonestHandshakesAreNotEvidence(t *testing.T) {
	ad := newAdmission(Config{MaxConns: 20_000, MaxHandshakesPerHost: 128, MaxHandshakes: 512, HandshakeQueueTimeout: time.Second})
	now := time.Now()
	for i := range 10_000 {
		if i%20 == 0 { // 500 honest timeouts would be many; still no evidence
			ad.noteTimeout(now)
		}
		ad.noteCompleted(now)
	}
	if ad.spoofed(now) {
		t.Fatalf("%d timeouts among %d completed handshakes taken as evidence of spoofing", ad.timeouts, 10_000)
	}
	for range 1_000 { // a flood of deaf peers on top: 1,500 timeouts, 10,000 completed
		ad.noteTimeout(now)
	}
	if !ad.spoofed(now) {
		t.Fatalf("%d timeouts among %d completed handshakes: want evidence", ad.timeouts, 10_000)
	}
}
