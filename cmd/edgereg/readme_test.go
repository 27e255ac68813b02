package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The tests in this file hold README.md to the binary: every flag, default,
// command and environment variable it names is one the real command has,
// so the README cannot drift from the code again unnoticed.

// readme returns README.md.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeSection returns the text of the "## heading" section, up to the
// next second-level heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	_, s, ok := strings.Cut(readme(t), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", heading)
	}
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

// tableRows returns the cells of every row of the Markdown tables in text
// whose first cell starts with prefix (a cell's "\|" is a literal bar).
func tableRows(text, prefix string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| "+prefix) {
			continue
		}
		line = strings.ReplaceAll(strings.Trim(line, "| "), `\|`, "\x00")
		var cells []string
		for _, c := range strings.Split(line, " | ") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
		}
		rows = append(rows, cells)
	}
	return rows
}

var backticked = regexp.MustCompile("`([^`]*)`")

// findCommand resolves path (words after "edgereg") to a command, failing
// unless it names exactly that command.
func findCommand(t *testing.T, root *cobra.Command, path []string) *cobra.Command {
	t.Helper()
	cmd, _, err := root.Find(path)
	if err != nil || cmd.CommandPath() != "edgereg "+strings.Join(path, " ") {
		t.Errorf("README names `edgereg %s`, which is no command (found %q: %v)", strings.Join(path, " "), cmd.CommandPath(), err)
		return nil
	}
	return cmd
}

// lookupFlag finds a flag of cmd, its own or inherited.
func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if f := cmd.Flags().Lookup(name); f != nil {
		return f
	}
	return cmd.InheritedFlags().Lookup(name)
}

// readmeDefault says whether the README's default text states a value
// (rather than describing one the node works out) and, if so, spells it as
// pflag prints it for a flag of type typ: `30s`, 100, 1 MiB, false, none.
func readmeDefault(text, typ string) (string, bool) {
	v := strings.Trim(text, "`")
	switch {
	case v == "none" || (v == "off" && typ == "string"):
		if typ == "stringSlice" {
			return "[]", true
		}
		return "", true
	case typ == "duration":
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", false
		}
		return d.String(), true
	case typ == "bool":
		_, err := strconv.ParseBool(v)
		return v, err == nil
	}
	units := map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
	if n, unit, ok := strings.Cut(v, " "); ok && units[unit] != 0 {
		i, err := strconv.ParseInt(n, 10, 64)
		return strconv.FormatInt(i*units[unit], 10), err == nil
	}
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		return v, true
	}
	if strings.HasPrefix(text, "`") && strings.HasSuffix(text, "`") && !strings.Contains(v, " ") {
		return v, true // a literal: an address, a mode
	}
	return "", false
}

// TestReadmeNodeFlagsMatchTheBinary: the Configuration table lists every
// flag of `edgereg node` and only those, each stated default is the flag's
// real default, and a default the README describes in words (the node
// works it out: "8 per CPU", "heartbeat interval") is the flag's zero
// value, which is what tells the node to work it out.
func TestReadmeNodeFlagsMatchTheBinary(t *testing.T) {
	root := newRootCmd()
	nodeCmd := findCommand(t, root, []string{"node"})
	section := readmeSection(t, "Configuration")
	rows := tableRows(section, "`--")
	if len(rows) < 40 {
		t.Fatalf("the Configuration table has %d flag rows", len(rows))
	}
	listed := map[string]bool{}
	for _, row := range rows {
		if len(row) != 3 {
			t.Errorf("row %q: want 3 cells", row)
			continue
		}
		var names []string
		for _, m := range backticked.FindAllStringSubmatch(row[0], -1) {
			names = append(names, strings.TrimPrefix(m[1], "--"))
		}
		defaults := []string{row[1]}
		if len(names) > 1 && strings.Count(row[1], ", ") == len(names)-1 {
			defaults = strings.Split(row[1], ", ") // `1s`, `10m`
		}
		for i, name := range names {
			listed[name] = true
			f := lookupFlag(nodeCmd, name)
			if f == nil {
				t.Errorf("README's Configuration lists --%s, which `edgereg node` does not have", name)
				continue
			}
			text := defaults[min(i, len(defaults)-1)]
			want, stated := readmeDefault(text, f.Value.Type())
			switch {
			case stated && want != f.DefValue:
				t.Errorf("--%s: README says the default is %s, the binary's is %q", name, text, f.DefValue)
			case !stated && !isZeroDefault(f):
				t.Errorf("--%s: README describes the default as %q, but the binary has a fixed one, %q: state it", name, text, f.DefValue)
			}
		}
	}
	nodeCmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" || listed[f.Name] {
			return
		}
		if f.Name == "print-config" && strings.Contains(section, "`edgereg node --print-config`") {
			return
		}
		t.Errorf("`edgereg node --%s` is not in the README's Configuration table", f.Name)
	})

	// "Client commands read EDGEREG_NODES, ..." the same way: each is a
	// flag every client command has.
	_, clientVars, ok := strings.Cut(section, "Client commands read ")
	if !ok {
		t.Fatal("the Configuration section no longer lists the client commands' variables")
	}
	clientVars, _, _ = strings.Cut(clientVars, " the same way")
	vars := backticked.FindAllStringSubmatch(clientVars, -1)
	if len(vars) < 5 {
		t.Fatalf("client variables: %q", clientVars)
	}
	route := findCommand(t, root, []string{"route"})
	for _, m := range vars {
		name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(m[1], "EDGEREG_"), "_", "-"))
		if lookupFlag(route, name) == nil {
			t.Errorf("README: client commands read %s, but they have no --%s", m[1], name)
		}
	}
}

// isZeroDefault says whether a flag's default is its type's zero value.
func isZeroDefault(f *pflag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return true
	}
	return false
}

// TestReadmeCommandsMatchTheBinary: every command of the CLI table is a
// real command, every flag shown with it is one of its flags, and every
// command the binary has is in the table.
func TestReadmeCommandsMatchTheBinary(t *testing.T) {
	root := newRootCmd()
	rows := tableRows(readmeSection(t, "CLI"), "`edgereg ")
	if len(rows) < 15 {
		t.Fatalf("the CLI table has %d command rows", len(rows))
	}
	flagRef := regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	listed := map[string]bool{}
	for _, row := range rows {
		usage := backticked.FindStringSubmatch(row[0])[1]
		words := strings.Fields(strings.TrimPrefix(usage, "edgereg "))
		// The command path: words up to the first argument or flag; one
		// word may list alternatives (kv put|get|del|list).
		var path []string
		alternatives := []string{""}
		for _, w := range words {
			if strings.ContainsAny(w, "[-.") || strings.ToUpper(w) == w {
				break
			}
			if strings.Contains(w, "|") {
				alternatives = strings.Split(w, "|")
				break
			}
			path = append(path, w)
		}
		for _, alt := range alternatives {
			p := slices.Clone(path)
			if alt != "" {
				p = append(p, alt)
			}
			cmd := findCommand(t, root, p)
			if cmd == nil {
				continue
			}
			listed[p[0]] = true
			for _, fl := range flagRef.FindAllString(usage, -1) {
				if lookupFlag(cmd, fl[2:]) == nil {
					t.Errorf("README shows `%s` with %s, which `%s` does not have", usage, fl, cmd.CommandPath())
				}
			}
		}
	}
	for _, c := range root.Commands() {
		if !c.Hidden && c.Name() != "help" && !listed[c.Name()] {
			t.Errorf("`edgereg %s` is not in the README's CLI table", c.Name())
		}
	}
}

// TestReadmeStatedDefaults: defaults the README states in its prose, each
// the real flag's.
func TestReadmeStatedDefaults(t *testing.T) {
	root := newRootCmd()
	text := strings.Join(strings.Fields(readme(t)), " ")
	for _, c := range []struct {
		path       []string
		flag, want string
		claim      string // the README's words that state it
	}{
		{[]string{"route"}, "wait", "3s", "`--wait` (3 s)"},
		{[]string{"route"}, "fanout", "2", "asks `--fanout` nodes\n(default 2)"},
		{[]string{"route"}, "nodes", "[127.0.0.1:9876]", "(default\n`127.0.0.1:9876`)"},
		{[]string{"route"}, "data", "./edgereg-data", "default `./edgereg-data`"},
		{[]string{"gateway"}, "listen", "127.0.0.1:9876", "TCP (default\n`127.0.0.1:9876`)"},
		{[]string{"gateway"}, "admin-addr", "127.0.0.1:9878", "`--admin-addr` (default `127.0.0.1:9878`)"},
		{[]string{"gateway"}, "broker-timeout", "2m0s", "for 120 s (`--broker-timeout`"},
		{[]string{"gateway"}, "poll-interval", "5s", "`--poll-interval` (5 s)"},
		{[]string{"gateway"}, "max-brokers", "1000", "at most 1000 brokers (`--max-brokers`"},
		{[]string{"gateway"}, "max-topics", "10000", "caches at most 10 000 topics"},
		{[]string{"gateway"}, "max-buffered-bytes", "134217728", "128 MiB\nof request frames held across all connections (`--max-buffered-bytes`"},
		{[]string{"gateway"}, "workers", "64", "64 requests handled at once (`--workers`)"},
		{[]string{"cert", "issue"}, "validity", "8760h0m0s", "valid for a year by default\n(`--validity`)"},
	} {
		if !strings.Contains(text, strings.Join(strings.Fields(c.claim), " ")) {
			t.Errorf("README no longer says %q (update this test with it)", c.claim)
		}
		cmd := findCommand(t, root, c.path)
		if cmd == nil {
			continue
		}
		if f := lookupFlag(cmd, c.flag); f == nil || f.DefValue != c.want {
			t.Errorf("README: %q, but `edgereg %s --%s` has %v", c.claim, strings.Join(c.path, " "), c.flag, f)
		}
	}
}

// readmeMetrics returns the edgereg_ metric names README.md mentions, the
// gateway's (edgereg_gateway_) or the others.
func readmeMetrics(t *testing.T, gateway bool) []string {
	t.Helper()
	var names []string
	for _, m := range regexp.MustCompile(`\bedgereg_[a-z0-9_]+`).FindAllString(readme(t), -1) {
		if strings.HasPrefix(m, "edgereg_gateway_") == gateway && !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	if len(names) < 8 {
		t.Fatalf("README names %d metrics: %q", len(names), names)
	}
	return names
}

// metricFamilies returns the metric families a /metrics page describes
// (its # HELP lines), whether or not they have a series yet.
func metricFamilies(t *testing.T, url string) (map[string]bool, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, _, _ := strings.Cut(rest, " ")
			out[name] = true
		}
	}
	return out, nil
}

// TestReadmeMetricNames: every node metric the README names is on a
// node's /metrics page (with remoting on) once one request was denied (a
// denial's series are by role and kind, which only a denial picks): an
// operator who reads the README and writes an alert finds the series.
func TestReadmeMetricNames(t *testing.T) {
	admin, err := freeTCPAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir, addr := t.TempDir(), freeUDPAddr(t)
	cmd := exec.Command(binary, "node", "--data", dir, "--addr", addr, "--admin-addr", admin,
		"--remoting-addr", "127.0.0.1:0", "--log-format", "json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var families map[string]bool
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if families, err = metricFamilies(t, "http://"+admin+"/metrics"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /metrics: %v\n%s", err, logs.String())
		}
	}
	creds := t.TempDir()
	if _, stderr, code := run(t, nil, "cert", "issue", "--data", dir, "--role", "client", "--name", "reader", "--out", creds); code != 0 {
		t.Fatalf("cert issue: %s", stderr)
	}
	if _, _, code := run(t, nil, "kv", "put", "ns", "k", "v", "--nodes", addr, "--cert", creds+"/reader.crt",
		"--key", creds+"/reader.key", "--ca", creds+"/ca.crt"); code != exitRefused {
		t.Fatalf("a client's kv put: exit %d, want %d (refused)", code, exitRefused)
	}
	if families, err = metricFamilies(t, "http://"+admin+"/metrics"); err != nil {
		t.Fatal(err)
	}
	for _, name := range readmeMetrics(t, false) {
		if !families[name] {
			t.Errorf("README names %s, which a node's /metrics does not have", name)
		}
	}
}

// goBlocks returns the ```go blocks of a README section.
func goBlocks(t *testing.T, heading string) []string {
	t.Helper()
	var blocks []string
	rest := readmeSection(t, heading)
	for {
		_, after, ok := strings.Cut(rest, "```go\n")
		if !ok {
			return blocks
		}
		var block string
		block, rest, _ = strings.Cut(after, "\n```")
		blocks = append(blocks, block)
	}
}

// buildOverlay compiles files (name to source) as one package in a
// directory of this module that does not exist on disk (go build
// -overlay), with env added to the go command's.
func buildOverlay(t *testing.T, env []string, files map[string]string) {
	t.Helper()
	tmp := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(wd, "readme_snippet_"+strings.ToLower(t.Name()))
	replace := map[string]string{}
	for name, src := range files {
		real := filepath.Join(tmp, name)
		if err := os.WriteFile(real, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(pkg, name)] = real
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", filepath.Join(tmp, "overlay.json"), "-o", os.DevNull, "./"+filepath.Base(pkg))
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		var numbered []string
		for name, src := range files {
			for i, l := range strings.Split(src, "\n") {
				numbered = append(numbered, fmt.Sprintf("%s:%d\t%s", name, i+1, l))
			}
		}
		t.Fatalf("the README's Go does not compile: %v\n%s\n%s", err, out, strings.Join(numbered, "\n"))
	}
}

// TestReadmeGoSnippetsCompile: the broker and route client code in "Brokers
// and clients in Go" compiles against the real packages, as one function
// (the route client uses the broker's conf); `{ ... }` stands for error
// handling. The Go policy in "Policies" builds for wasip1 as the README
// says to build it.
func TestReadmeGoSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the README's Go")
	}
	blocks := goBlocks(t, "Brokers and clients in Go")
	if len(blocks) != 2 {
		t.Fatalf("Brokers and clients in Go has %d Go blocks, want 2 (broker, route client)", len(blocks))
	}
	body := strings.ReplaceAll(strings.Join(blocks, "\n"), "{ ... }", "{ panic(err) }")
	buildOverlay(t, nil, map[string]string{"main.go": `package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/broker"
	"github.com/edgereg/edgereg/wire/nodes"
	"github.com/edgereg/edgereg/wire/pki"
	"github.com/edgereg/edgereg/wire/routeclient"
)

func main() {
	var brokerCert tls.Certificate
	var caPool *x509.CertPool
	ctx := context.Background()
` + body + `
}
`})

	policy := goBlocks(t, "Policies")
	if len(policy) != 1 || !strings.HasPrefix(policy[0], "package main") {
		t.Fatalf("Policies has %d Go blocks, want one package main", len(policy))
	}
	buildOverlay(t, []string{"GOOS=wasip1", "GOARCH=wasm"}, map[string]string{"main.go": policy[0]})
}

// TestReadmeBenchFlags: every `--flag` the README's load generator
// paragraph names is a flag of `edgereg bench`, and each `--flag N` it
// shows is that flag's default (the paragraph lists the defaults).
func TestReadmeBenchFlags(t *testing.T) {
	root := newRootCmd()
	bench := findCommand(t, root, []string{"bench"})
	_, para, ok := strings.Cut(readmeSection(t, "Operating a node"), "**Load generator.**")
	if !ok {
		t.Fatal("Operating a node has no load generator paragraph")
	}
	para, _, _ = strings.Cut(para, "\n\n")
	// Flags of the node it measures, named as such.
	nodeFlags := []string{"max-conns", "max-conns-per-host", "max-broker-conns-per-host",
		"max-broker-conns-per-identity", "max-handshakes-per-host", "max-handshakes", "handshake-queue-timeout"}
	pair := regexp.MustCompile(`--([a-z][a-z0-9-]*)(?:[ =]([0-9][0-9a-z.]*))?`)
	seen := 0
	for _, m := range backticked.FindAllStringSubmatch(para, -1) {
		for _, p := range pair.FindAllStringSubmatch(m[1], -1) {
			if slices.Contains(nodeFlags, p[1]) {
				continue
			}
			seen++
			f := lookupFlag(bench, p[1])
			if f == nil {
				t.Errorf("README's load generator names --%s, which `edgereg bench` does not have", p[1])
				continue
			}
			if p[2] == "" {
				continue
			}
			want := p[2]
			if d, err := time.ParseDuration(want); err == nil && f.Value.Type() == "duration" {
				want = d.String()
			}
			if want != f.DefValue {
				t.Errorf("README shows `--%s %s`, but its default is %s", p[1], p[2], f.DefValue)
			}
		}
	}
	if seen < 10 {
		t.Errorf("found %d bench flags in the load generator paragraph", seen)
	}
}

// TestReadmeLayout: every directory the Layout table names exists, and
// every package directory of node/ and wire/ (and every top-level one) is
// in it.
func TestReadmeLayout(t *testing.T) {
	rows := tableRows(readmeSection(t, "Layout"), "`")
	listed := map[string]bool{}
	for _, row := range rows {
		dir := strings.TrimSuffix(strings.Trim(row[0], "`"), "/")
		listed[dir] = true
		if fi, err := os.Stat(filepath.Join("..", "..", dir)); err != nil || !fi.IsDir() {
			t.Errorf("README's Layout names %s, which is not a directory: %v", dir, err)
		}
	}
	for _, parent := range []string{".", "node", "wire"} {
		entries, err := os.ReadDir(filepath.Join("..", "..", parent))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := filepath.Join(parent, e.Name())
			if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" || e.Name() == "bin" {
				continue
			}
			if parent == "." && e.Name() == "edgereg-data" {
				continue // make run's data, ignored by git
			}
			covered := listed[name]
			for l := range listed {
				covered = covered || strings.HasPrefix(l, name+"/") // cmd/ as cmd/edgereg/
			}
			if !covered {
				t.Errorf("%s/ is not in the README's Layout table", name)
			}
		}
	}
}
