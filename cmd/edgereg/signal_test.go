package main

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a child's stderr, written by exec's copying goroutine
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a running child and, once it ended, how.
type process struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{} // closed when it ended
	err  error         // Wait's result, once done is closed
}

// startProcess starts the binary with args; Cleanup kills it if the test
// left it running.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary, args...), logs: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitEnd waits up to within for p to end, and fails the test with why
// (what did not happen) and p's logs if it does not.
func (p *process) waitEnd(t *testing.T, within time.Duration, why string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s:\n%s", why, p.logs)
	}
}

// waitExit waits for a process to end after a signal.
func waitExit(t *testing.T, what string, p *process) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s after SIGHUP: %v (want a graceful stop, exit 0); stderr:\n%s", what, p.err, p.logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not stop after SIGHUP", what)
	}
}

// TestSIGHUPStopsGracefully: SIGHUP (a closed terminal, a shell's exit
// with its jobs, or an operator expecting a reload) killed a broker agent
// and a node on the spot, with no log line: the agent never unregistered,
// so producers were sent to its broker for a whole lease (120 s), and a
// node vanished without saying why. Both stop as on SIGTERM.
func TestSIGHUPStopsGracefully(t *testing.T) {
	addr, dir := cliNode(t)
	agent := startProcess(t, "broker", "--data", dir, "--nodes", addr, "--cluster", "C",
		"--name", "broker-h", "--id", "0", "--addr", "10.0.0.9:10911", "--topics", "hup")
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, code := run(t, []string{"EDGEREG_TIMEOUT=2s"}, "--data", dir, "--nodes", addr, "leases")
		if code == 0 && strings.Contains(out, "10.0.0.9:10911") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker agent did not register: %s", agent.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	agent.cmd.Process.Signal(syscall.SIGHUP)
	waitExit(t, "broker agent", agent)
	out, _, _ := run(t, []string{"EDGEREG_TIMEOUT=2s"}, "--data", dir, "--nodes", addr, "leases")
	if strings.Contains(out, "10.0.0.9:10911") {
		t.Errorf("the broker agent's lease outlived its SIGHUP (not unregistered):\n%s", out)
	}

	nodeAddr := freeUDPAddr(t)
	n := startProcess(t, "node", "--data", t.TempDir(), "--addr", nodeAddr, "--admin-addr", "off", "--log-format", "json")
	deadline = time.Now().Add(15 * time.Second)
	for !strings.Contains(n.logs.String(), `"msg":"node started"`) {
		if time.Now().After(deadline) {
			t.Fatalf("node did not start: %s", n.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.cmd.Process.Signal(syscall.SIGHUP)
	waitExit(t, "node", n)
	if !strings.Contains(n.logs.String(), `"msg":"node stopped"`) {
		t.Errorf("node logs lack \"node stopped\" after SIGHUP:\n%s", n.logs)
	}
}

// TestBrokerAgentThatNeverRegisteredSaysSo: an agent stopped before any
// node had registered it (the nodes unreachable, or refusing its
// credential) logged "broker unregistered" and "broker agent stopped:
// unregistered", as if it had held and given up a registration; it says
// that no node had registered the broker.
func TestBrokerAgentThatNeverRegisteredSaysSo(t *testing.T) {
	_, dir := cliNode(t) // only for its CA; the agent is sent elsewhere
	agent := startProcess(t, "broker", "--data", dir, "--nodes", freeUDPAddr(t), "--cluster", "C",
		"--name", "broker-n", "--id", "0", "--addr", "10.0.0.8:10911", "--topics", "never")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(agent.logs.String(), "broker agent starting") {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not start: %s", agent.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	agent.cmd.Process.Signal(syscall.SIGTERM)
	agent.waitEnd(t, 20*time.Second, "the agent did not stop after SIGTERM")
	logs := agent.logs.String()
	if strings.Contains(logs, "unregistered") || !strings.Contains(logs, "no node had registered the broker") {
		t.Errorf("an agent no node ever registered says at its stop:\n%s", logs)
	}
}

// TestHelpNamesEveryStopSignal: node, broker and gateway stop on SIGINT,
// SIGTERM and SIGHUP; the gateway's and the broker agent's help named only
// the first two, so an operator could not tell that closing the terminal
// (SIGHUP) stops them.
func TestHelpNamesEveryStopSignal(t *testing.T) {
	root := newRootCmd()
	for _, name := range []string{"node", "broker", "gateway"} {
		cmd := findCommand(t, root, []string{name})
		if cmd == nil {
			continue
		}
		for _, sig := range []string{"SIGINT", "SIGTERM", "SIGHUP"} {
			if !strings.Contains(strings.Join(strings.Fields(cmd.Long), " "), sig) {
				t.Errorf("`edgereg %s --help` does not name %s, which stops it", name, sig)
			}
		}
	}
}

// TestBrokerAgentSaysWhenItCouldNotUnregister: an agent stopped while its
// node was down logged "broker agent stopped: unregistered" and exited 0,
// so a script (or an operator following the Quick start's `kill %1`) took
// the broker for gone from the routes, where the node that missed the
// unregistration keeps it for its whole lease.
func TestBrokerAgentSaysWhenItCouldNotUnregister(t *testing.T) {
	for _, nodeStop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(nodeStop.String(), func(t *testing.T) {
			dir, nodeAddr := t.TempDir(), freeUDPAddr(t)
			n := startProcess(t, "node", "--data", dir, "--addr", nodeAddr, "--admin-addr", "off", "--warm-up", "-1s", "--log-format", "json")
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(n.logs.String(), `"msg":"node started"`) {
				if time.Now().After(deadline) {
					t.Fatalf("node did not start: %s", n.logs)
				}
				time.Sleep(50 * time.Millisecond)
			}
			agent := startProcess(t, "broker", "--data", dir, "--nodes", nodeAddr, "--cluster", "C",
				"--name", "broker-u", "--id", "0", "--addr", "10.0.0.7:10911", "--topics", "gone", "--log-format", "json")
			deadline = time.Now().Add(15 * time.Second)
			for !strings.Contains(agent.logs.String(), `"msg":"registered with node"`) {
				if time.Now().After(deadline) {
					t.Fatalf("the broker agent did not register: %s\nnode: %s", agent.logs, n.logs)
				}
				time.Sleep(50 * time.Millisecond)
			}
			n.cmd.Process.Signal(nodeStop)
			<-n.done
			agent.cmd.Process.Signal(syscall.SIGTERM)
			agent.waitEnd(t, 30*time.Second, "the agent did not stop after SIGTERM")
			logs := agent.logs.String()
			if agent.err == nil || strings.Contains(logs, "broker agent stopped: unregistered") || !strings.Contains(logs, "not unregistered") {
				t.Errorf("an agent whose node was down at its stop: exit %v, stderr:\n%s", agent.err, logs)
			}
		})
	}
}

// TestBrokerAgentSecondSignalCutsUnregisterShort: a stopped agent
// unregisters from every node, each bounded by the request timeout; its
// signal handler swallowed a second Ctrl-C meanwhile, so an operator
// whose node had gone quiet waited the timeout out. As the node and the
// gateway do, the agent stops at the second signal, says so and exits 1:
// a node it did not reach keeps the broker until its lease runs out.
func TestBrokerAgentSecondSignalCutsUnregisterShort(t *testing.T) {
	dir, nodeAddr := t.TempDir(), freeUDPAddr(t)
	n := startProcess(t, "node", "--data", dir, "--addr", nodeAddr, "--admin-addr", "off", "--warm-up", "-1s", "--log-format", "json")
	waitLog(t, n, `"msg":"node started"`)
	agent := startProcess(t, "broker", "--data", dir, "--nodes", nodeAddr, "--cluster", "C",
		"--name", "broker-s", "--id", "0", "--addr", "10.0.0.9:10911", "--topics", "quiet", "--log-format", "json")
	waitLog(t, agent, `"msg":"registered with node"`)
	// The node stops answering, without closing anything: the agent's
	// unregistration waits for it.
	n.cmd.Process.Signal(syscall.SIGSTOP)
	defer n.cmd.Process.Signal(syscall.SIGCONT)
	agent.cmd.Process.Signal(syscall.SIGTERM)
	waitLog(t, agent, `"msg":"broker agent stopping: unregistering from every node"`)
	agent.cmd.Process.Signal(syscall.SIGTERM)
	agent.waitEnd(t, 30*time.Second, "the agent did not stop after a second SIGTERM")
	logs := agent.logs.String()
	if code := agent.cmd.ProcessState.ExitCode(); code != exitFailure || !strings.Contains(logs, "second signal") {
		t.Errorf("agent stopped by a second signal while unregistering: exit %d (want %d) and logs naming the second signal:\n%s", code, exitFailure, logs)
	}
}
