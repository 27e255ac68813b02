package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/edgereg/edgereg/wire/remoting"
)

// benchRemotingRoute runs the remoting-route workload: route reads in
// RocketMQ's remoting protocol, as rocketmq-client-go sends them, first
// straight to the node's remoting listener, then through an `edgereg
// gateway` child process whose watched cache answers them, in front of the
// same node. Both rows carry the node's CPU per read, so the gateway's row
// shows what a site's reads still cost the node (its watches, not its
// reads); its note gives the gateway's own CPU per read.
func benchRemotingRoute(cmd *cobra.Command, g *globals, bf *benchFlags) ([]benchResult, error) {
	remAddr := bf.remotingAddr
	var extra []string
	if bf.spawn {
		a, err := freeTCPAddr()
		if err != nil {
			return nil, err
		}
		remAddr, extra = a, []string{"--remoting-addr", a}
	} else if remAddr == "" {
		return nil, usageError{errors.New("remoting-route with --spawn=false needs --remoting-addr, the node's remoting listener")}
	}
	tgt, err := startTarget(g, bf, extra...)
	if err != nil {
		return nil, err
	}
	defer tgt.stop()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	conns, err := dialN(ctx, tgt, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	if _, _, err := prepareRoute(ctx, conns[0], bf); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	names := benchTopicNames(bf.topics)

	direct, err := measureRemoting(ctx, cmd.ErrOrStderr(), "remoting-route/node", remAddr, tgt.pid, 0, bf, names)
	if err != nil {
		return nil, fmt.Errorf("remoting-route through the node's listener: %w", err)
	}
	direct.Note = "GET_ROUTEINFO_BY_TOPIC to the node's remoting listener"

	gw, err := startBenchGateway(g, bf, tgt)
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	if err := warmGateway(ctx, gw.addr, names); err != nil {
		return nil, fmt.Errorf("warm the gateway's cache: %w", err)
	}
	cached, err := measureRemoting(ctx, cmd.ErrOrStderr(), "remoting-route/gateway", gw.addr, tgt.pid, gw.pid, bf, names)
	if err != nil {
		return nil, fmt.Errorf("remoting-route through the gateway: %w", err)
	}
	cached.Note = fmt.Sprintf("the same reads answered by an edgereg gateway's watched cache (%d topics)%s", len(names), cached.Note)
	return []benchResult{direct, cached}, nil
}

// startBenchGateway starts `edgereg gateway` as a child process in front of
// the target node, so its CPU is measured apart from the load generator's,
// and waits until it answers. It uses the spawned node's local credential,
// or the bench command's own.
func startBenchGateway(g *globals, bf *benchFlags, tgt *benchTarget) (*benchTarget, error) {
	addr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"gateway", "--nodes", tgt.addr, "--listen", addr, "--admin-addr", "off",
		"--workers", strconv.Itoa(max(bf.workers, remoting.DefaultWorkers)), "--log-format", "json", "--log-level", "warn"}
	switch {
	case tgt.dir != "":
		args = append(args, "--data", tgt.dir)
	case g.cert != "":
		args = append(args, "--cert", g.cert, "--key", g.key, "--ca", g.ca)
	default:
		args = append(args, "--data", g.data)
	}
	child := exec.Command(self, args...)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return nil, err
	}
	gw := &benchTarget{addr: addr, pid: child.Process.Pid, stop: func() {
		child.Process.Signal(os.Interrupt)
		child.Wait()
	}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return gw, nil
		}
		if time.Now().After(deadline) {
			gw.stop()
			return nil, fmt.Errorf("bench gateway did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// benchTopicNames are the topics prepareRoute registers.
func benchTopicNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("rmq_bench_topic_%04d", i)
	}
	return names
}

func freeTCPAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// warmGateway reads every topic once, so the measured reads are the cached
// ones a site's clients make after their first.
func warmGateway(ctx context.Context, addr string, names []string) error {
	c, err := dialRemoting(ctx, addr)
	if err != nil {
		return err
	}
	defer c.close()
	for _, name := range names {
		if err := routeRead(ctx, c, name); err != nil {
			return err
		}
	}
	return nil
}

// routeRead is one GET_ROUTEINFO_BY_TOPIC as rocketmq-client-go sends it.
func routeRead(ctx context.Context, c *remotingClient, topic string) error {
	req := remoting.NewRequest(remoting.GetRouteInfoByTopic, 0, map[string]string{"topic": topic}, nil)
	req.Language, req.Version = "GO", remoting.V4_5_2
	resp, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	if resp.Code != remoting.Success || len(resp.Body) == 0 {
		return fmt.Errorf("route of %s: code %d %q", topic, resp.Code, resp.Remark)
	}
	return nil
}

// measureRemoting runs route reads on bf.workers workers over bf.conns
// connections to addr: a warm-up, then the measured window. The result's
// CPU is nodePID's; gatewayPID's, if any, goes in its note.
func measureRemoting(ctx context.Context, progressOut io.Writer, name, addr string, nodePID, gatewayPID int, bf *benchFlags, names []string) (benchResult, error) {
	conns := make([]*remotingClient, 0, bf.conns)
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	for range max(bf.conns, 1) {
		c, err := dialRemoting(ctx, addr)
		if err != nil {
			return benchResult{}, err
		}
		conns = append(conns, c)
	}
	res, cpu := measureLoop(ctx, progressOut, name, bf, func() []float64 { return []float64{procCPU(nodePID), procCPU(gatewayPID)} },
		func(ctx context.Context, w int, l *closedLoop) []time.Duration {
			c := conns[w%len(conns)]
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			return l.run(ctx, func() error { return routeRead(ctx, c, names[rng.IntN(len(names))]) })
		})
	if gatewayPID > 0 && res.Ops > 0 {
		res.Note = fmt.Sprintf("; gateway CPU %.1f us/op", cpu[1]/float64(res.Ops)*1e6)
	}
	return res, nil
}

// remotingClient is a pipelined remoting connection: many requests in
// flight, answers matched by opaque.
type remotingClient struct {
	nc   net.Conn
	wmu  sync.Mutex // one frame written at a time
	next atomic.Int32

	mu      sync.Mutex
	pending map[int32]chan *remoting.Command
	err     error
	done    chan struct{}
}

func dialRemoting(ctx context.Context, addr string) (*remotingClient, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &remotingClient{nc: nc, pending: make(map[int32]chan *remoting.Command), done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

func (c *remotingClient) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		resp, err := remoting.ReadCommand(br, 0)
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("remoting connection: %w", err)
			c.mu.Unlock()
			close(c.done)
			return
		}
		c.mu.Lock()
		ch := c.pending[resp.Opaque]
		delete(c.pending, resp.Opaque)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp // buffered: the caller may have given up
		}
	}
}

// call sends req with a fresh opaque and waits for its answer.
func (c *remotingClient) call(ctx context.Context, req *remoting.Command) (*remoting.Command, error) {
	req.Opaque = c.next.Add(1)
	ch := make(chan *remoting.Command, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.pending[req.Opaque] = ch
	c.mu.Unlock()
	frame, err := req.Encode()
	if err == nil {
		c.wmu.Lock()
		_, err = c.nc.Write(frame)
		c.wmu.Unlock()
	}
	if err != nil {
		c.forget(req.Opaque)
		return nil, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		c.forget(req.Opaque)
		return nil, ctx.Err()
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return nil, c.err
	}
}

func (c *remotingClient) forget(opaque int32) {
	c.mu.Lock()
	delete(c.pending, opaque)
	c.mu.Unlock()
}

func (c *remotingClient) close() {
	c.nc.Close()
	<-c.done
}
