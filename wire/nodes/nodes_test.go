package nodes_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgereg/edgereg/wire/nodes"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNormalize(t *testing.T) {
	tests := []struct {
		in      []string
		want    []string
		wantErr bool
	}{
		{in: []string{" b:1 ", "a:2", "", "b:1"}, want: []string{"a:2", "b:1"}},
		{in: []string{"[::1]:9876", "127.0.0.1:9876"}, want: []string{"127.0.0.1:9876", "[::1]:9876"}},
		{in: []string{"nohost"}, wantErr: true},
		{in: []string{":9876"}, wantErr: true},
		{in: []string{"a:0"}, wantErr: true},
		{in: []string{"a:70000"}, wantErr: true},
		{in: []string{"a:http"}, wantErr: true},
		{in: nil, want: []string{}},
		// One node written two ways is one entry: a leading zero in the
		// port, a host name's case, an IPv6 address's spelling.
		{in: []string{"node1:9876", "Node1:09876", "NODE1:9876"}, want: []string{"node1:9876"}},
		{in: []string{"[0:0::1]:9876", "[::1]:9876", "[::0001]:9876"}, want: []string{"[::1]:9876"}},
		{in: []string{"[2001:DB8::1]:1", "[2001:db8::1]:1"}, want: []string{"[2001:db8::1]:1"}},
	}
	for _, tt := range tests {
		got, err := nodes.Normalize(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !slices.Equal(got, tt.want)) {
			t.Errorf("Normalize(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestStaticAndList(t *testing.T) {
	ctx := context.Background()
	if got, err := nodes.Static("b:1", "a:1").Nodes(ctx); err != nil || !slices.Equal(got, []string{"a:1", "b:1"}) {
		t.Errorf("Static = %q, %v", got, err)
	}
	if _, err := nodes.Static().Nodes(ctx); !errors.Is(err, nodes.ErrNoNodes) {
		t.Errorf("empty Static: %v", err)
	}
	l := nodes.NewList("a:1")
	ch := l.Changed()
	l.Set("c:1", "b:1")
	select {
	case <-ch:
	default:
		t.Fatal("Set did not close the Changed channel")
	}
	if got, _ := l.Nodes(ctx); !slices.Equal(got, []string{"b:1", "c:1"}) {
		t.Errorf("List after Set = %q", got)
	}
	var zero nodes.List
	if _, err := zero.Nodes(ctx); !errors.Is(err, nodes.ErrNoNodes) {
		t.Errorf("zero List: %v", err)
	}
}

type fakeResolver struct {
	hosts []string
	srv   []*net.SRV
	err   error
	asked []string
}

func (f *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	f.asked = append(f.asked, host)
	return f.hosts, f.err
}

func (f *fakeResolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	f.asked = append(f.asked, service+"/"+proto+"/"+name)
	return name, f.srv, f.err
}

func TestDNS(t *testing.T) {
	ctx := context.Background()
	r := &fakeResolver{hosts: []string{"10.0.0.2", "10.0.0.1", "fd00::1"}}
	got, err := nodes.DNS("edgereg.test", 9876, r).Nodes(ctx)
	if err != nil || !slices.Equal(got, []string{"10.0.0.1:9876", "10.0.0.2:9876", "[fd00::1]:9876"}) {
		t.Errorf("DNS = %q, %v", got, err)
	}
	if r.asked[0] != "edgereg.test" {
		t.Errorf("asked %q", r.asked)
	}
	r.hosts = nil
	if _, err := nodes.DNS("edgereg.test", 9876, r).Nodes(ctx); !errors.Is(err, nodes.ErrNoNodes) {
		t.Errorf("no records: %v", err)
	}
	r.err = errors.New("SERVFAIL")
	if _, err := nodes.DNS("edgereg.test", 9876, r).Nodes(ctx); err == nil || !strings.Contains(err.Error(), "SERVFAIL") {
		t.Errorf("lookup error: %v", err)
	}
	if _, err := nodes.DNS("edgereg.test", 0, r).Nodes(ctx); err == nil {
		t.Error("port 0 accepted")
	}
}

func TestDNSSRV(t *testing.T) {
	ctx := context.Background()
	r := &fakeResolver{srv: []*net.SRV{
		{Target: "edgereg-1.edgereg.ns.svc.cluster.local.", Port: 9876},
		{Target: "edgereg-0.edgereg.ns.svc.cluster.local.", Port: 9876},
		{Target: ".", Port: 9876}, // "no such service here"
	}}
	got, err := nodes.DNSSRV("quic", "udp", "edgereg.ns.svc.cluster.local", r).Nodes(ctx)
	want := []string{"edgereg-0.edgereg.ns.svc.cluster.local:9876", "edgereg-1.edgereg.ns.svc.cluster.local:9876"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("DNSSRV = %q, %v", got, err)
	}
	if r.asked[0] != "quic/udp/edgereg.ns.svc.cluster.local" {
		t.Errorf("asked %q", r.asked)
	}
	r.srv = r.srv[2:]
	if _, err := nodes.DNSSRV("", "", "x", r).Nodes(ctx); !errors.Is(err, nodes.ErrNoNodes) {
		t.Errorf("only a '.' record: %v", err)
	}
}

func TestHTTP(t *testing.T) {
	var mu sync.Mutex
	status, body := http.StatusOK, ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	src := nodes.HTTP(srv.URL, srv.Client())
	set := func(s int, b string) { mu.Lock(); status, body = s, b; mu.Unlock() }
	tests := []struct {
		status  int
		body    string
		want    []string
		wantErr bool
	}{
		{status: 200, body: "10.0.0.1:9876;10.0.0.2:9876", want: []string{"10.0.0.1:9876", "10.0.0.2:9876"}},
		{status: 200, body: "10.0.0.2:9876\n10.0.0.1:9876\n", want: []string{"10.0.0.1:9876", "10.0.0.2:9876"}},
		{status: 200, body: " 10.0.0.1:9876 , 10.0.0.3:9876 ", want: []string{"10.0.0.1:9876", "10.0.0.3:9876"}},
		{status: 200, body: "10.0.0.1:9876;garbage", wantErr: true},
		{status: 200, body: "", wantErr: true},
		{status: 503, body: "10.0.0.1:9876", wantErr: true},
		{status: 200, body: strings.Repeat("10.0.0.1:9876;", nodes.MaxHTTPBody/14+1), wantErr: true},
	}
	for _, tt := range tests {
		set(tt.status, tt.body)
		got, err := src.Nodes(context.Background())
		if (err != nil) != tt.wantErr || (!tt.wantErr && !slices.Equal(got, tt.want)) {
			t.Errorf("status %d body %.40q: %q, %v", tt.status, tt.body, got, err)
		}
	}
}

// flaky is a source whose answers the test scripts.
type flaky struct {
	mu    sync.Mutex
	addrs []string
	err   error
	calls int
}

func (f *flaky) Nodes(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return slices.Clone(f.addrs), f.err
}

func (f *flaky) set(addrs []string, err error) {
	f.mu.Lock()
	f.addrs, f.err = addrs, err
	f.mu.Unlock()
}

func (f *flaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func TestFollowKeepsTheLastGoodList(t *testing.T) {
	src := &flaky{addrs: []string{"a:1"}}
	applied := make(chan []string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		nodes.Follow(ctx, src, nodes.FollowConfig{Interval: 5 * time.Millisecond, Backoff: nodes.Backoff{Min: time.Millisecond}},
			func(a []string) { applied <- a })
	}()
	defer func() { cancel(); <-done }()
	recv := func() []string {
		select {
		case a := <-applied:
			return a
		case <-time.After(30 * time.Second):
			t.Fatal("no list applied")
			return nil
		}
	}
	if got := recv(); !slices.Equal(got, []string{"a:1"}) {
		t.Fatalf("first list %q", got)
	}
	// Failures and empty answers keep the list: nothing is applied.
	src.set(nil, errors.New("down"))
	calls := src.count()
	for src.count() < calls+3 {
		time.Sleep(time.Millisecond)
	}
	src.set(nil, nil)
	calls = src.count()
	for src.count() < calls+3 {
		time.Sleep(time.Millisecond)
	}
	src.set([]string{"b:1", "a:1"}, nil)
	if got := recv(); !slices.Equal(got, []string{"a:1", "b:1"}) {
		t.Fatalf("next list %q", got)
	}
	select {
	case a := <-applied:
		t.Fatalf("an unchanged list was applied again: %q", a)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestFollowWakesOnNotifier(t *testing.T) {
	l := nodes.NewList("a:1")
	applied := make(chan []string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		nodes.Follow(ctx, l, nodes.FollowConfig{Interval: time.Hour}, func(a []string) { applied <- a })
	}()
	defer func() { cancel(); <-done }()
	<-applied
	l.Set("b:1")
	select {
	case got := <-applied:
		if !slices.Equal(got, []string{"b:1"}) {
			t.Fatalf("applied %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Set did not wake Follow")
	}
}

func TestBackoff(t *testing.T) {
	b := nodes.Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for n, w := range want {
		if got := b.Ceiling(n); got != w*time.Millisecond {
			t.Errorf("Ceiling(%d) = %s, want %s", n, got, w*time.Millisecond)
		}
		for range 100 {
			if d := b.Delay(n); d < 0 || d >= b.Ceiling(n) {
				t.Fatalf("Delay(%d) = %s outside [0, %s)", n, d, b.Ceiling(n))
			}
		}
	}
	if got := b.Ceiling(1000); got != time.Second {
		t.Errorf("Ceiling(1000) = %s", got)
	}
	def := nodes.Backoff{}.WithDefaults()
	if def.Min != nodes.DefaultBackoffMin || def.Max != nodes.DefaultBackoffMax {
		t.Errorf("defaults %+v", def)
	}
}
