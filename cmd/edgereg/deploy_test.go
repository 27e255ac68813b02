package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// nodeFlagSet is the flag set of `edgereg node`, with the root's
// persistent flags, for checking the flags a deployment passes.
func nodeFlagSet(t *testing.T) *pflag.FlagSet {
	t.Helper()
	root := newRootCmd()
	cmd, _, err := root.Find([]string{"node"})
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(root.PersistentFlags())
	return fs
}

// checkNodeArgs parses args as `edgereg node` would, so a renamed or
// mistyped flag in a deployment file fails here.
func checkNodeArgs(t *testing.T, where string, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != "node" {
		t.Fatalf("%s: args %v do not run `edgereg node`", where, args)
	}
	fs := nodeFlagSet(t)
	for i, a := range args[1:] {
		args[i+1] = strings.ReplaceAll(a, "$(POD_NAME)", "edgereg-0")
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

type k8sDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		ClusterIP string `yaml:"clusterIP"`
		Ports     []struct {
			Name     string `yaml:"name"`
			Port     int    `yaml:"port"`
			Protocol string `yaml:"protocol"`
		} `yaml:"ports"`
		ServiceName string `yaml:"serviceName"`
		Template    struct {
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name string `yaml:"name"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Args []string `yaml:"args"`
	Env  []struct {
		Name string `yaml:"name"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe k8sProbe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name string `yaml:"name"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func TestKubernetesExample(t *testing.T) {
	f, err := os.Open("deploy/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs := map[string]k8sDoc{}
	dec := yaml.NewDecoder(f)
	for {
		var d k8sDoc
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubernetes.yaml: %v", err)
		}
		docs[d.Kind] = d
	}
	svc, sts := docs["Service"], docs["StatefulSet"]
	if svc.Spec.ClusterIP != "None" || len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].Protocol != "UDP" || svc.Spec.Ports[0].Port != 9876 {
		t.Errorf("the Service is not headless on UDP 9876: %+v", svc.Spec)
	}
	if _, ok := docs["ConfigMap"]; !ok {
		t.Error("no ConfigMap of policies")
	}
	if sts.Spec.ServiceName != svc.Metadata.Name || len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("StatefulSet does not use the headless Service: %+v", sts.Spec)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	checkNodeArgs(t, "kubernetes.yaml", c.Args)
	fs := nodeFlagSet(t)
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "EDGEREG_") && !hasFlagForEnv(fs, e.Name) {
			t.Errorf("env %s sets no flag", e.Name)
		}
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		ports[c.LivenessProbe.HTTPGet.Port] != 9877 || ports[c.ReadinessProbe.HTTPGet.Port] != 9877 {
		t.Errorf("probes do not hit /healthz and /readyz on the admin port: %+v %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	if !slicesContain(c.Args, "--admin-addr=0.0.0.0:9877") {
		t.Error("the admin address is not reachable by the probes")
	}
	volumes := map[string]bool{"data": true} // from the volumeClaimTemplate
	for _, v := range sts.Spec.Template.Spec.Volumes {
		volumes[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			t.Errorf("volume mount %s names no volume", m.Name)
		}
	}
}

func hasFlagForEnv(fs *pflag.FlagSet, env string) bool {
	found := false
	fs.VisitAll(func(f *pflag.Flag) { found = found || EnvName(f.Name) == env })
	return found
}

func slicesContain(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
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
	checkNodeArgs(t, "edgereg.service", exec[1:])
	if sections["Service"]["KillSignal"] != "SIGTERM" || sections["Install"]["WantedBy"] == "" {
		t.Errorf("unit does not stop gracefully or is not installable: %v", sections)
	}
}
