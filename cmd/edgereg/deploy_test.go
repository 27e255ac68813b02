package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// commandFor finds the edgereg subcommand args run and parses its flags
// (with the root's persistent ones) as cobra would, so a renamed or
// mistyped flag, or a wrong number of arguments, in a deployment file
// fails here.
func commandFor(t *testing.T, where string, args []string) *pflag.FlagSet {
	t.Helper()
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Fatalf("%s: args %v run no edgereg command: %v", where, args, err)
	}
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(cmd.InheritedFlags())
	for i, a := range rest {
		rest[i] = strings.ReplaceAll(a, "$(POD_NAME)", "edgereg-0")
	}
	if err := fs.Parse(rest); err != nil {
		t.Fatalf("%s: %v: %v", where, args, err)
	}
	if cmd.Args != nil {
		if err := cmd.Args(cmd, fs.Args()); err != nil {
			t.Fatalf("%s: %v: %v", where, args, err)
		}
	}
	return fs
}

// containers returns every container and init container of every pod
// template in a YAML stream, with where each is.
func containers(t *testing.T, file string) map[string]map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		walkContainers(doc, func(list string, c map[string]any) {
			meta, _ := doc["metadata"].(map[string]any)
			out[fmt.Sprintf("%s %s %v %s %v", file, doc["kind"], meta["name"], list, c["name"])] = c
		})
	}
	return out
}

func walkContainers(v any, fn func(string, map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if list, ok := x.([]any); ok && (k == "containers" || k == "initContainers") {
				for _, c := range list {
					if cm, ok := c.(map[string]any); ok {
						fn(k, cm)
					}
				}
				continue
			}
			walkContainers(x, fn)
		}
	case []any:
		for _, x := range v {
			walkContainers(x, fn)
		}
	}
}

// TestKubernetesManifestsUseRealFlags runs every container's arguments and
// EDGEREG_* variables of every manifest past the real command. The
// manifests' structure (API types, security profile, services) is checked
// in the deploy module (cmd/edgereg/deploy), which has k8s.io/api.
func TestKubernetesManifestsUseRealFlags(t *testing.T) {
	files, _ := filepath.Glob("deploy/*.yaml")
	checked := 0
	for _, file := range files {
		for where, c := range containers(t, file) {
			var args []string
			raw, _ := c["args"].([]any)
			for _, a := range raw {
				args = append(args, fmt.Sprint(a))
			}
			fs := commandFor(t, where, args)
			env, _ := c["env"].([]any)
			for _, e := range env {
				name := fmt.Sprint(e.(map[string]any)["name"])
				if !strings.HasPrefix(name, "EDGEREG_") {
					continue
				}
				f := flagForEnv(fs, name)
				if f == nil {
					t.Errorf("%s: env %s sets no flag of %s", where, name, args[0])
					continue
				}
				// The value parses as the flag's, as bindEnv would set it.
				if v, ok := e.(map[string]any)["value"]; ok {
					if err := setFlag(f, fmt.Sprint(v)); err != nil {
						t.Errorf("%s: env %s=%v: %v", where, name, v, err)
					}
				}
			}
			checked++
		}
	}
	if checked < 4 {
		t.Fatalf("checked %d containers, want the node, its init container and the examples", checked)
	}
}

func flagForEnv(fs *pflag.FlagSet, env string) *pflag.Flag {
	var found *pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if EnvName(f.Name) == env {
			found = f
		}
	})
	return found
}

func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("deploy/edgereg.service")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]map[string]string{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = strings.Trim(line, "[]")
			sections[cur] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == "" {
				t.Fatalf("edgereg.service: bad line %q", line)
			}
			sections[cur][k] = v
		}
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if sections[s] == nil {
			t.Errorf("no [%s] section", s)
		}
	}
	exec := strings.Fields(sections["Service"]["ExecStart"])
	if len(exec) < 2 || !strings.HasSuffix(exec[0], "/edgereg") {
		t.Fatalf("ExecStart = %v", exec)
	}
	if exec[1] != "node" {
		t.Fatalf("ExecStart %v does not run a node", exec)
	}
	fs := commandFor(t, "edgereg.service", exec[1:])
	// ProtectSystem=strict leaves only the StateDirectory writable: --data
	// must be it, or the node cannot create its identity and keys.
	if state := sections["Service"]["StateDirectory"]; state == "" || fs.Lookup("data").Value.String() != "/var/lib/"+state {
		t.Errorf("--data=%s is not the unit's StateDirectory (/var/lib/%s), the one path ProtectSystem=strict leaves writable",
			fs.Lookup("data").Value.String(), state)
	}
	// A node exits 2 (exitUsage) only for a setting it will refuse
	// however often it is started (a bad flag, EDGEREG_* variable or config
	// file), 1 for what may pass (its address still held by the node it
	// replaces): restarting on 2 every RestartSec only fills the journal
	// until systemd's start limit gives up, with the cause scrolled away.
	if sections["Service"]["Restart"] != "" && !slices.Contains(strings.Fields(sections["Service"]["RestartPreventExitStatus"]), strconv.Itoa(exitUsage)) {
		t.Errorf("Restart=%s restarts a node that exited %d for a wrong setting, which no restart mends: want RestartPreventExitStatus=%d",
			sections["Service"]["Restart"], exitUsage, exitUsage)
	}
	if sections["Service"]["KillSignal"] != "SIGTERM" || sections["Install"]["WantedBy"] == "" {
		t.Errorf("unit does not stop gracefully or is not installable: %v", sections)
	}
}
