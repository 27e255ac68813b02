package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/edgereg/edgereg/node"
)

func printConfigJSON(t *testing.T, env []string, args ...string) map[string]configEntry {
	t.Helper()
	out, stderr, code := run(t, env, append([]string{"node", "--print-config", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("print-config: exit %d: %s", code, stderr)
	}
	var entries []configEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("print-config -o json: %v\n%s", err, out)
	}
	m := map[string]configEntry{}
	for _, e := range entries {
		m[e.Setting] = e
	}
	return m
}

// TestPrintConfigSourcesAndEffectiveValues: --print-config used to show
// 0s for the warm-up and 0 workers (the flags' zero values, not what the
// node uses) and "set by flag, VAR or config file" for the source.
func TestPrintConfigSourcesAndEffectiveValues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edgereg.yaml")
	os.WriteFile(file, []byte("# node settings\nmax-conns: 500\nhost:\n  - a.example\n  - b.example\n"), 0o600)
	// The child's default workers follow its GOMAXPROCS: make it this
	// test's, which go test -cpu sets in this process only.
	procs := "GOMAXPROCS=" + strconv.Itoa(runtime.GOMAXPROCS(0))
	m := printConfigJSON(t, []string{"EDGEREG_EXPIRY_THRESHOLD=5m", procs}, "--scan-interval", "2s", "--config", file)
	want := map[string]configEntry{
		"expiry-threshold": {Value: "5m0s", Source: "EDGEREG_EXPIRY_THRESHOLD"},
		"scan-interval":    {Value: "2s", Source: "flag --scan-interval"},
		"max-conns":        {Value: "500", Source: file + ":2"},
		"host":             {Value: "a.example,b.example", Source: file + ":3"},
		"warm-up":          {Value: "30s", Source: "default"},
		"workers":          {Value: strconv.Itoa(node.Config{}.WithDefaults().Workers), Source: "default"},
		"addr":             {Value: node.DefaultAddr, Source: "default"},
	}
	for name, w := range want {
		got, ok := m[name]
		if !ok {
			t.Errorf("print-config has no %s", name)
			continue
		}
		if got.Value != w.Value || got.Source != w.Source || got.Variable != EnvName(name) {
			t.Errorf("%s = %+v, want value %q source %q variable %s", name, got, w.Value, w.Source, EnvName(name))
		}
	}
	if _, ok := m["nodes"]; ok {
		t.Error("print-config lists --nodes, a client setting the node does not use")
	}
	// The table says the same.
	out, _, _ := run(t, []string{"EDGEREG_EXPIRY_THRESHOLD=5m"}, "node", "--print-config", "--warm-up", "-1s")
	for _, want := range []string{"EDGEREG_EXPIRY_THRESHOLD", "flag --warm-up", "disabled"} {
		if !strings.Contains(out, want) {
			t.Errorf("print-config table lacks %q:\n%s", want, out)
		}
	}
}

func TestUnknownVariableWarned(t *testing.T) {
	_, stderr, code := run(t, []string{"EDGEREG_EXPIRY_TRESHOLD=5m"}, "node", "--print-config")
	if code != 0 || !strings.Contains(stderr, "EDGEREG_EXPIRY_TRESHOLD") || !strings.Contains(stderr, "EDGEREG_EXPIRY_THRESHOLD") {
		t.Errorf("a mistyped variable: exit %d, stderr %q; want a warning suggesting EDGEREG_EXPIRY_THRESHOLD", code, stderr)
	}
	// A variable of another command is not unknown.
	_, stderr, _ = run(t, []string{"EDGEREG_TOPICS=a,b"}, "version")
	if strings.Contains(stderr, "EDGEREG_TOPICS") {
		t.Errorf("EDGEREG_TOPICS (edgereg broker --topics) warned about: %q", stderr)
	}
}

// TestConfigFileYAML: the config file is real YAML; every error names the
// file and line.
func TestConfigFileYAML(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("---\n# quoted, flow and block lists, comments\nlog-level: \"debug\"  # loud\nhost: [a.example, 'b.example']\nexpiry-threshold: 3m\n"), 0o600)
	m := printConfigJSON(t, nil, "--config", good)
	if m["log-level"].Value != "debug" || m["host"].Value != "a.example,b.example" || m["expiry-threshold"].Value != "3m0s" {
		t.Errorf("config file read as %+v %+v %+v", m["log-level"], m["host"], m["expiry-threshold"])
	}
	cases := []struct{ name, body, want string }{
		{"unknown", "max-conns: 5\n\nexpiry-treshold: 3m\n", `:3: unknown setting "expiry-treshold" (did you mean "expiry-threshold"?)`},
		{"syntax", "max-conns: 5\nhost: [a, b\n", "line"},
		{"nested", "max-conns: 5\naddr:\n  host: x\n", `:2: addr: want a value or a list`},
		{"duplicate", "max-conns: 5\nmax-conns: 6\n", `:2: max-conns`},
		{"bad value", "max-conns: many\n", `:1: max-conns`},
		{"not a map", "- a\n- b\n", ":1:"},
	}
	for _, tc := range cases {
		path := filepath.Join(dir, tc.name+".yaml")
		os.WriteFile(path, []byte(tc.body), 0o600)
		_, stderr, code := run(t, nil, "node", "--print-config", "--config", path)
		if code != exitUsage || !strings.Contains(stderr, path) || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %q", tc.name, code, stderr, tc.want)
		}
	}
}

// TestMessagesNameRealFlags: every --flag named in a message of the node's
// configuration or the CLI is a flag of some edgereg command.
func TestMessagesNameRealFlags(t *testing.T) {
	flags := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
	flags["help"] = true // cobra adds it to every command
	files, _ := filepath.Glob("*.go")
	more, _ := filepath.Glob("../../node/*.go")
	literal := regexp.MustCompile("\"(?:[^\"\\\\\\n]|\\\\.)*\"|`[^`]*`")
	flag := regexp.MustCompile(`(?:^|[\s(,'"])--([a-z][a-z0-9-]*)`)
	for _, f := range append(files, more...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, _ := os.ReadFile(f)
		for _, lit := range literal.FindAllString(string(b), -1) {
			for _, m := range flag.FindAllStringSubmatch(lit, -1) {
				if !flags[m[1]] {
					t.Errorf("%s: message names --%s, which no command has: %s", f, m[1], lit)
				}
			}
		}
	}
}

// TestValidateNamesFlags: every error node.Config.Validate gives names the
// flag of `edgereg node` that sets the setting at fault (used to be prose,
// "remoting max frame must be ...", which a user cannot grep --help for).
// Each case breaks one setting through the real command's flags; every
// --name in the message must be a flag of `edgereg node`, and the flag
// broken must be among them.
func TestValidateNamesFlags(t *testing.T) {
	cases := []struct {
		set   map[string]string
		after func(*node.Config) // for settings a flag cannot break past WithDefaults
		want  []string
	}{
		{set: map[string]string{"addr": "nope"}, want: []string{"addr"}},
		{set: map[string]string{"admin-addr": "nope"}, want: []string{"admin-addr"}},
		{set: map[string]string{"remoting-addr": "nope"}, want: []string{"remoting-addr"}},
		{set: map[string]string{"remoting-max-frame-size": "1"}, want: []string{"remoting-max-frame-size"}},
		{set: map[string]string{"status-addr": "nope"}, want: []string{"status-addr"}},
		{set: map[string]string{"tls-cert": "x.crt"}, want: []string{"tls-cert", "tls-key", "tls-client-ca"}},
		{set: map[string]string{"heartbeat-interval": "-1s"}, want: []string{"heartbeat-interval"}},
		{set: map[string]string{"expiry-threshold": "-1s"}, want: []string{"expiry-threshold"}},
		{set: map[string]string{"scan-interval": "-1s"}, want: []string{"scan-interval"}},
		{set: map[string]string{"read-timeout": "-1s"}, want: []string{"read-timeout"}},
		{set: map[string]string{"write-timeout": "-1s"}, want: []string{"write-timeout"}},
		{set: map[string]string{"idle-timeout": "-1s"}, want: []string{"idle-timeout"}},
		{set: map[string]string{"policy-call-timeout": "-1s"}, want: []string{"policy-call-timeout"}},
		{set: map[string]string{"min-lease-timeout": "-1s"}, want: []string{"min-lease-timeout"}},
		{set: map[string]string{"max-lease-timeout": "-1s"}, want: []string{"max-lease-timeout"}},
		{set: map[string]string{"min-lease-timeout": "20s", "max-lease-timeout": "10s"}, want: []string{"max-lease-timeout", "min-lease-timeout"}},
		{set: map[string]string{"expiry-threshold": "10s", "heartbeat-interval": "30s"}, want: []string{"expiry-threshold", "heartbeat-interval"}},
		{set: map[string]string{"max-conns": "-1"}, want: []string{"max-conns"}},
		{set: map[string]string{"max-conns-per-host": "-1"}, want: []string{"max-conns-per-host"}},
		{set: map[string]string{"max-streams-per-conn": "-1"}, want: []string{"max-streams-per-conn"}},
		{after: func(c *node.Config) { c.Workers = -1 }, want: []string{"workers"}},
		{set: map[string]string{"max-conns-per-identity": "-1"}, want: []string{"max-conns-per-identity"}},
		{set: map[string]string{"max-broker-conns-per-host": "-1"}, want: []string{"max-broker-conns-per-host"}},
		{set: map[string]string{"max-handshakes-per-host": "-1"}, want: []string{"max-handshakes-per-host"}},
		{set: map[string]string{"max-handshakes": "-1"}, want: []string{"max-handshakes"}},
		{set: map[string]string{"handshake-queue-timeout": "-1s"}, want: []string{"handshake-queue-timeout"}},
		{set: map[string]string{"tls-key-exchange": "rsa"}, want: []string{"tls-key-exchange"}},
		{after: func(c *node.Config) { c.BrokerWorkers = -1 }, want: []string{"broker-workers"}},
		{set: map[string]string{"max-request-size": "-1"}, want: []string{"max-request-size"}},
		{set: map[string]string{"max-broker-frame-size": "-1"}, want: []string{"max-broker-frame-size"}},
		{set: map[string]string{"max-watches-per-conn": "-1"}, want: []string{"max-watches-per-conn"}},
		{set: map[string]string{"max-bytes-in-flight": "-1"}, want: []string{"max-bytes-in-flight"}},
		{set: map[string]string{"max-bytes-in-flight": "1024"}, want: []string{"max-bytes-in-flight", "max-request-size", "max-broker-frame-size"}},
		{set: map[string]string{"max-policy-uploads-per-minute": "-1"}, want: []string{"max-policy-uploads-per-minute"}},
		{set: map[string]string{"policy-dir": filepath.Join(t.TempDir(), "none")}, want: []string{"policy-dir"}},
		{set: map[string]string{"max-broker-frame-size": strconv.Itoa(1 << 30)}, want: []string{"max-broker-frame-size"}},
		{set: map[string]string{"max-request-size": strconv.Itoa(1 << 30)}, want: []string{"max-request-size"}},
	}
	named := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	for _, tc := range cases {
		cmd := newNodeCmd(&globals{})
		nf := &nodeFlags{}
		fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
		addNodeFlags(fs, nf)
		for k, v := range tc.set {
			if err := fs.Set(k, v); err != nil {
				t.Fatalf("--%s %s: %v", k, v, err)
			}
		}
		cfg := nf.cfg.WithDefaults()
		if tc.after != nil {
			tc.after(&cfg)
		}
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%v: Validate accepted it", tc.want)
			continue
		}
		got := map[string]bool{}
		for _, m := range named.FindAllStringSubmatch(err.Error(), -1) {
			got[m[1]] = true
			if cmd.Flags().Lookup(m[1]) == nil {
				t.Errorf("%q names --%s, which edgereg node does not have", err, m[1])
			}
		}
		for _, w := range tc.want {
			if !got[w] {
				t.Errorf("breaking --%s: %q does not name --%s", tc.want[0], err, w)
			}
		}
	}
}

// TestValidateMessagesAllNameAFlag guards the cases above against a new
// check in node.Config.Validate: the format of every error it builds names
// a --flag, or starts with %s filled from a table of --flag names.
func TestValidateMessagesAllNameAFlag(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../node/config.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var validate *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "Validate" && fd.Recv != nil {
			validate = fd
		}
	}
	if validate == nil {
		t.Fatal("node/config.go has no Config.Validate")
	}
	n := 0
	ast.Inspect(validate.Body, func(x ast.Node) bool {
		call, ok := x.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !(sel.Sel.Name == "Errorf" || sel.Sel.Name == "New") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok {
			t.Errorf("%s: an error whose message is not a literal", fset.Position(call.Pos()))
			return true
		}
		n++
		if msg, _ := strconv.Unquote(lit.Value); !strings.HasPrefix(msg, "--") && !strings.HasPrefix(msg, "%s ") {
			t.Errorf("%s: %s names no flag", fset.Position(call.Pos()), lit.Value)
		}
		return true
	})
	if n == 0 {
		t.Fatal("found no error in Validate")
	}
}

// TestPrintConfigResolvesStatusAndRemotingAddr: --print-config showed an
// empty status-addr (the page is served on the admin address when that is
// loopback, else off) and an empty remoting-addr (off), so an operator
// checking where the topology is exposed read nothing; and --remoting-addr
// off, the README's default, was refused ("missing port in address").
func TestPrintConfigResolvesStatusAndRemotingAddr(t *testing.T) {
	for _, c := range []struct {
		args                 []string
		status, remotingAddr string
	}{
		{nil, node.DefaultAdminAddr, "off"},
		{[]string{"--admin-addr", "0.0.0.0:9877"}, "off", "off"},
		{[]string{"--admin-addr", "off"}, "off", "off"},
		{[]string{"--status-addr", "127.0.0.1:9878", "--remoting-addr", ":9876"}, "127.0.0.1:9878", "127.0.0.1:9876"},
		{[]string{"--remoting-addr", "off"}, node.DefaultAdminAddr, "off"}, // the README's default, as an env file may say it
	} {
		m := printConfigJSON(t, nil, c.args...)
		if got := m["status-addr"].Value; got != c.status {
			t.Errorf("%v: status-addr %q, want %q", c.args, got, c.status)
		}
		if got := m["remoting-addr"].Value; got != c.remotingAddr {
			t.Errorf("%v: remoting-addr %q, want %q", c.args, got, c.remotingAddr)
		}
	}
}

// TestConfigFileNullsAndCommandLineOnlyKeys: a YAML null (`host: ~`,
// `tls-cert: null`) was taken as the text "~" or "null" — `host: ~` put a
// host named "~" in the node certificate without a word — and `config:`
// in a config file was refused as 'unknown setting "config" (did you mean
// "config"?)'.
func TestConfigFileNullsAndCommandLineOnlyKeys(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{"host: ~\n", "host has no value"},
		{"max-conns: 100\ntls-cert: null\n", ":2: tls-cert has no value"},
		{"host: [a.example, ~]\n", "host has no value"},
		{"config: other.yaml\n", "config is a command-line flag"},
		{"print-config: true\n", "print-config is a command-line flag"},
	} {
		file := filepath.Join(dir, "edgereg.yaml")
		if err := os.WriteFile(file, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := run(t, nil, "node", "--config", file, "--print-config")
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "did you mean") {
			t.Errorf("config file %q: exit %d, stderr %q; want exit %d naming %q", c.body, code, stderr, exitUsage, c.want)
		}
	}
}
