package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgereg/edgereg/node/nodetest"
)

// TestRouteMergesNodes: nodes share nothing, so a node cut off from a
// broker answers "not found" with full confidence. `route` without --watch
// used to read only the first node that answered; it now asks --fanout
// nodes and merges their answers, as the route client does, so a broker
// registered on the second node only is still shown.
func TestRouteMergesNodes(t *testing.T) {
	ca := nodetest.NewCA(t)
	empty, holder := nodetest.Start(t, ca, nil), nodetest.Start(t, ca, nil)
	registerBroker(t, holder.Addr(), holder.Dir(), brokerReg("broker-a", "10.0.0.1:10911", "orders"))
	env := []string{"EDGEREG_DATA=" + empty.Dir(), "EDGEREG_NODES=" + empty.Addr() + "," + holder.Addr()}

	out, stderr, code := run(t, env, "route", "orders", "--wait", "0")
	if code != 0 || !strings.Contains(out, "broker-a") || !strings.Contains(out, "10.0.0.1:10911") {
		t.Fatalf("route with the empty node first: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	out, stderr, code = run(t, env, "route", "orders", "--wait", "0", "-o", "json")
	var routes []routeOut
	if err := json.Unmarshal([]byte(out), &routes); err != nil || code != 0 || len(routes) != 1 ||
		len(routes[0].BrokerGroups) != 1 || routes[0].BrokerGroups[0].Name != "broker-a" || routes[0].Version == "" {
		t.Fatalf("route -o json: exit %d, %v, stdout %q, stderr %q", code, err, out, stderr)
	}
	checkSnakeCase(t, "route (merged)", out)

	// Not found is final only when every node asked says so.
	if _, _, code := run(t, env, "route", "nope", "--wait", "0"); code != exitNotFound {
		t.Errorf("route of a topic no node knows: exit %d, want %d", code, exitNotFound)
	}
	// One topic found, one not: the found one is printed, exit 3.
	out, _, code = run(t, env, "route", "orders", "nope", "--wait", "0")
	if code != exitNotFound || !strings.Contains(out, "broker-a") {
		t.Errorf("route orders nope: exit %d, want %d, stdout %q", code, exitNotFound, out)
	}
	// Exit codes as before: no node answering is 4, a node of another CA 5.
	dead := freeUDPAddr(t)
	if _, stderr, code := run(t, env, "--nodes", dead, "--timeout", "2s", "route", "orders", "--wait", "0"); code != exitUnreachable {
		t.Errorf("route with no node answering: exit %d, want %d: %s", code, exitUnreachable, stderr)
	}
	other := nodetest.Start(t, nodetest.NewCA(t), nil)
	if _, stderr, code := run(t, env, "--nodes", other.Addr(), "route", "orders", "--wait", "0"); code != exitRefused {
		t.Errorf("route on a node of another CA: exit %d, want %d: %s", code, exitRefused, stderr)
	}
	// A watch takes --fanout too, checked the same way.
	if _, _, code := run(t, env, "route", "orders", "--watch", "--fanout", "0"); code != exitUsage {
		t.Errorf("route --watch --fanout 0: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := run(t, env, "route", "orders", "--fanout", "0"); code != exitUsage {
		t.Errorf("route --fanout 0: exit %d, want %d", code, exitUsage)
	}
}

// TestRouteShowsAnEmptyRoute: a route policy may leave a client no broker
// (zone-affinity does, as RocketMQ's hook does, for a zone no broker is
// in). `route` printed the header alone, exit 0, as if the topic had not
// been asked for, and `route --watch` a line ending in "version X: ". Both
// now say the route is empty.
func TestRouteShowsAnEmptyRoute(t *testing.T) {
	addr, dir := cliNode(t)
	registerBroker(t, addr, dir, brokerReg("broker-a", "10.0.0.1:10911", "orders")) // no zone
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	// A route filter that empties every route, as zone-affinity does for a
	// zone no broker is in. (zone-affinity itself is a 2 MB Go module whose
	// compile under -race on a loaded machine took over 2 min; what is
	// checked here is what the CLI prints of the empty route.)
	push := []string{"policy", "push", "../../testdata/wasm/fixtures/empty-route.wasm", "--hook", "route", "--timeout", "2m"}
	if _, stderr, code := run(t, env, push...); code != 0 {
		t.Fatalf("policy push: exit %d: %s", code, stderr)
	}
	out, stderr, code := run(t, env, "route", "orders", "--zone", "zone-1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "orders ") || !strings.Contains(lines[1], "no brokers") {
		t.Errorf("route of a route the policy emptied: exit %d, stdout %q, stderr %q; want a row for orders saying no brokers", code, out, stderr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // only against a hang
	defer cancel()
	watch := exec.CommandContext(ctx, binary, "route", "--watch", "orders", "--zone", "zone-1")
	watch.Env = append(os.Environ(), env...)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { watch.Process.Kill(); watch.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "orders") || !strings.Contains(line, "no brokers") {
		t.Errorf("route --watch of a route the policy emptied: %q, %v; want a line saying no brokers", line, err)
	}
}

// TestRouteNotFoundPrintsNothing: `route` of a topic no node knows printed
// a table header alone on stdout before failing with exit 3, so a script
// reading stdout saw output where there is none. It prints nothing on
// stdout, the error on stderr.
func TestRouteNotFoundPrintsNothing(t *testing.T) {
	addr, dir := cliNode(t)
	env := []string{"EDGEREG_NODES=" + addr, "EDGEREG_DATA=" + dir}
	out, stderr, code := run(t, env, "route", "nope", "--wait", "0")
	if code != exitNotFound || out != "" || !strings.Contains(stderr, "nope") {
		t.Errorf("route of a missing topic: exit %d (want %d), stdout %q (want none), stderr %q", code, exitNotFound, out, stderr)
	}
}
