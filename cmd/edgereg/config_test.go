package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
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
	m := printConfigJSON(t, []string{"EDGEREG_EXPIRY_THRESHOLD=5m"}, "--scan-interval", "2s", "--config", file)
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
