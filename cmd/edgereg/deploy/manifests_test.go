// Package deploy holds edgereg's deployment files; its tests decode every
// Kubernetes manifest strictly against the API types and check the Pod
// Security "restricted" profile. It is its own Go module so the main module
// does not depend on k8s.io/api. (Each flag and EDGEREG_* variable the
// manifests use is checked against the real command in cmd/edgereg's
// deploy_test.go.)
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// object is one decoded manifest document.
type object struct {
	file string
	kind string
	name string
	obj  any
}

// newObject returns the typed value a document of apiVersion/kind decodes
// into; anything else is an error, so a typo in either is caught.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "batch/v1/Job":
		return &batchv1.Job{}, nil
	}
	return nil, fmt.Errorf("unexpected apiVersion %q kind %q", apiVersion, kind)
}

// decodeManifests reads every document of every *.yaml file here, strictly:
// an unknown or duplicated field fails, as `kubectl apply --validate=strict`
// would.
func decodeManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var out []object
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			obj, err := newObject(tm.APIVersion, tm.Kind)
			if err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", file, i, tm.Kind, err)
			}
			name := obj.(metav1.ObjectMetaAccessor).GetObjectMeta().GetName()
			if name == "" {
				t.Errorf("%s document %d (%s) has no name", file, i, tm.Kind)
			}
			out = append(out, object{file: file, kind: tm.Kind, name: name, obj: obj})
		}
	}
	return out
}

func podSpec(o object) (*corev1.PodTemplateSpec, bool) {
	switch v := o.obj.(type) {
	case *appsv1.StatefulSet:
		return &v.Spec.Template, true
	case *appsv1.Deployment:
		return &v.Spec.Template, true
	case *batchv1.Job:
		return &v.Spec.Template, true
	}
	return nil, false
}

func TestManifestsRestricted(t *testing.T) {
	pods := 0
	for _, o := range decodeManifests(t) {
		tmpl, ok := podSpec(o)
		if !ok {
			continue
		}
		pods++
		for _, problem := range restrictedViolations(&tmpl.Spec) {
			t.Errorf("%s %s %s: %s", o.file, o.kind, o.name, problem)
		}
	}
	if pods < 3 {
		t.Fatalf("found %d pod templates, want the StatefulSet and the examples", pods)
	}
}

// restrictedViolations checks a pod against the Pod Security Standards'
// "restricted" profile (kubernetes.io/docs/concepts/security/pod-security-standards)
// plus a read-only root filesystem and resource requests, which edgereg
// asks of itself.
func restrictedViolations(spec *corev1.PodSpec) []string {
	var v []string
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		v = append(v, "shares a host namespace")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		v = append(v, "mounts a service account token it does not need")
	}
	allowedVolumes := func(vol corev1.Volume) bool {
		s := vol.VolumeSource
		return s.ConfigMap != nil || s.CSI != nil || s.DownwardAPI != nil || s.EmptyDir != nil || s.Ephemeral != nil ||
			s.PersistentVolumeClaim != nil || s.Projected != nil || s.Secret != nil
	}
	for _, vol := range spec.Volumes {
		if !allowedVolumes(vol) {
			v = append(v, fmt.Sprintf("volume %s is of a type the restricted profile forbids", vol.Name))
		}
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			v = append(v, c.Name+": no securityContext")
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			v = append(v, c.Name+": privileged")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			v = append(v, c.Name+": allowPrivilegeEscalation is not false")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			v = append(v, c.Name+": capabilities do not drop ALL")
		} else if len(sc.Capabilities.Add) > 0 {
			v = append(v, c.Name+": adds capabilities")
		}
		nonRoot := (psc.RunAsNonRoot != nil && *psc.RunAsNonRoot && sc.RunAsNonRoot == nil) || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
		if !nonRoot {
			v = append(v, c.Name+": runAsNonRoot is not true")
		}
		if (sc.RunAsUser != nil && *sc.RunAsUser == 0) || (sc.RunAsUser == nil && psc.RunAsUser != nil && *psc.RunAsUser == 0) {
			v = append(v, c.Name+": runs as uid 0")
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
			v = append(v, c.Name+": seccompProfile is not RuntimeDefault or Localhost")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			v = append(v, c.Name+": root filesystem is writable")
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				v = append(v, c.Name+": uses a host port")
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			v = append(v, c.Name+": no CPU and memory requests")
		}
	}
	return v
}

// TestRestrictedCheckCatchesViolations makes sure the check above is not
// vacuous: a pod that breaks each rule is reported for each.
func TestRestrictedCheckCatchesViolations(t *testing.T) {
	yes := true
	zero := int64(0)
	spec := &corev1.PodSpec{
		HostNetwork: true,
		Volumes:     []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		Containers: []corev1.Container{{Name: "bad", SecurityContext: &corev1.SecurityContext{
			Privileged: &yes, AllowPrivilegeEscalation: &yes, RunAsUser: &zero,
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
		}, Ports: []corev1.ContainerPort{{HostPort: 80}}}},
	}
	got := strings.Join(restrictedViolations(spec), "\n")
	for _, want := range []string{"host namespace", "service account token", "volume host", "privileged", "allowPrivilegeEscalation",
		"drop ALL", "runAsNonRoot", "uid 0", "seccompProfile", "root filesystem", "host port", "requests"} {
		if !strings.Contains(got, want) {
			t.Errorf("violation %q not reported; got:\n%s", want, got)
		}
	}
}

// TestStatefulSetAsShipped checks what makes the node deployment work: the
// policies ConfigMap really reaches --policy-dir, each node sees only its
// own key, brokers reach warming-up pods and clients only ready ones, and
// disruptions and placement are bounded.
func TestStatefulSetAsShipped(t *testing.T) {
	objs := decodeManifests(t)
	var sts *appsv1.StatefulSet
	services := map[string]*corev1.Service{}
	var pdb *policyv1.PodDisruptionBudget
	configMaps := map[string]bool{}
	for _, o := range objs {
		if o.file != "kubernetes.yaml" {
			continue
		}
		switch v := o.obj.(type) {
		case *appsv1.StatefulSet:
			sts = v
		case *corev1.Service:
			services[v.Name] = v
		case *policyv1.PodDisruptionBudget:
			pdb = v
		case *corev1.ConfigMap:
			configMaps[v.Name] = true
		}
	}
	if sts == nil || pdb == nil {
		t.Fatal("kubernetes.yaml needs a StatefulSet and a PodDisruptionBudget")
	}
	pod := sts.Spec.Template
	labels := pod.Labels
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}

	// Services: the StatefulSet's own (brokers) lists pods that are not ready.
	peers := services[sts.Spec.ServiceName]
	if peers == nil || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses || !selects(peers.Spec.Selector) {
		t.Errorf("the StatefulSet's service %q must be headless, select its pods and publish not-ready addresses", sts.Spec.ServiceName)
	}
	var clientSvc *corev1.Service
	for name, s := range services {
		if name != sts.Spec.ServiceName && selects(s.Spec.Selector) {
			clientSvc = s
		}
	}
	if clientSvc == nil || clientSvc.Spec.PublishNotReadyAddresses {
		t.Error("no client-facing Service gated by readiness (publishNotReadyAddresses false)")
	}
	if !selects(pdb.Spec.Selector.MatchLabels) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v does not keep all but one node up", pdb.Spec)
	}
	aa := pod.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution)+len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Error("no pod anti-affinity")
	} else {
		for _, term := range aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if term.PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" || !selects(term.PodAffinityTerm.LabelSelector.MatchLabels) {
				t.Errorf("anti-affinity term %+v does not spread the pods over machines", term)
			}
		}
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one node container, got %d", len(pod.Spec.Containers))
	}
	node := pod.Spec.Containers[0]
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vct := range sts.Spec.VolumeClaimTemplates {
		volumes[vct.Name] = corev1.Volume{Name: vct.Name}
	}
	mounts := func(c corev1.Container) map[string]corev1.VolumeMount {
		m := map[string]corev1.VolumeMount{}
		for _, vm := range c.VolumeMounts {
			if _, ok := volumes[vm.Name]; !ok {
				t.Errorf("%s mounts %s, which is no volume", c.Name, vm.Name)
			}
			m[vm.MountPath] = vm
		}
		return m
	}
	nodeMounts := mounts(node)
	flag := func(name string) string {
		for _, a := range node.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
		return ""
	}

	// --policy-dir is the ConfigMap's mount.
	dir := flag("policy-dir")
	vm, ok := nodeMounts[dir]
	if dir == "" || !ok || volumes[vm.Name].ConfigMap == nil || !configMaps[volumes[vm.Name].ConfigMap.Name] {
		t.Errorf("--policy-dir=%q is not where the policies ConfigMap is mounted", dir)
	}
	// --data is the persistent volume.
	if vm, ok := nodeMounts[flag("data")]; !ok || volumes[vm.Name].VolumeSource != (corev1.VolumeSource{}) {
		t.Errorf("--data=%q is not the volume claim", flag("data"))
	}
	// The node sees its own key only: no Secret is mounted into it, the key
	// comes from an in-memory volume the init container fills.
	keyDir := filepath.Dir(flag("tls-key"))
	vm, ok = nodeMounts[keyDir]
	if !ok || volumes[vm.Name].EmptyDir == nil || volumes[vm.Name].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("--tls-key=%q is not on an in-memory volume", flag("tls-key"))
	}
	if !strings.Contains(flag("tls-key"), "$(POD_NAME)") {
		t.Errorf("--tls-key=%q is not the pod's own key", flag("tls-key"))
	}
	for _, vm := range node.VolumeMounts {
		if volumes[vm.Name].Secret != nil || volumes[vm.Name].Projected != nil {
			t.Errorf("the node container mounts %s, which holds other nodes' keys", vm.Name)
		}
	}
	if len(pod.Spec.InitContainers) != 1 {
		t.Fatal("want one init container that picks the pod's own key")
	}
	initMounts := mounts(pod.Spec.InitContainers[0])
	filled := false
	for _, m := range initMounts {
		if m.Name == vm.Name && !m.ReadOnly {
			filled = true
		}
	}
	if !filled {
		t.Errorf("the init container does not write the node's key volume")
	}

	// The probes reach the admin server, which listens beyond loopback.
	if node.ReadinessProbe == nil || node.ReadinessProbe.HTTPGet == nil || node.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		node.LivenessProbe == nil || node.LivenessProbe.HTTPGet == nil || node.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Error("probes do not hit /readyz and /healthz")
	}
	if !strings.HasPrefix(flag("admin-addr"), "0.0.0.0:") {
		t.Errorf("--admin-addr=%q is not reachable by the probes", flag("admin-addr"))
	}
	// The probes and the QUIC port name the ports the node listens on
	// (--admin-addr, --addr): a port changed in one place only leaves every
	// pod unready, or brokers dialling a closed port.
	portOf := func(flagName string, def int32) int32 {
		addr := flag(flagName)
		if addr == "" {
			return def
		}
		_, port, err := net.SplitHostPort(addr)
		p, perr := strconv.Atoi(port)
		if err != nil || perr != nil {
			t.Fatalf("--%s=%q: not HOST:PORT", flagName, addr)
		}
		return int32(p)
	}
	containerPort := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.Int {
			return p.IntVal
		}
		for _, cp := range node.Ports {
			if cp.Name == p.StrVal {
				return cp.ContainerPort
			}
		}
		t.Errorf("probe port %q names no container port", p.StrVal)
		return 0
	}
	admin := portOf("admin-addr", 9877)
	for what, pr := range map[string]*corev1.Probe{"readiness": node.ReadinessProbe, "liveness": node.LivenessProbe} {
		if pr != nil && pr.HTTPGet != nil {
			if got := containerPort(pr.HTTPGet.Port); got != admin {
				t.Errorf("the %s probe asks port %d; the node serves /healthz and /readyz on %d (--admin-addr=%s)", what, got, admin, flag("admin-addr"))
			}
		}
	}
	quicPort := portOf("addr", 9876)
	for _, cp := range node.Ports {
		if cp.Protocol == corev1.ProtocolUDP && cp.ContainerPort != quicPort {
			t.Errorf("container port %s is %d/UDP; the node serves QUIC on %d (--addr=%s)", cp.Name, cp.ContainerPort, quicPort, flag("addr"))
		}
	}
	// Every Service port is a port of the container.
	ports := map[string]corev1.ContainerPort{}
	for _, p := range node.Ports {
		ports[p.Name] = p
	}
	for _, s := range services {
		for _, sp := range s.Spec.Ports {
			if p, ok := ports[sp.Name]; !ok || p.ContainerPort != sp.Port || p.Protocol != sp.Protocol {
				t.Errorf("Service %s port %s %d/%s matches no container port", s.Name, sp.Name, sp.Port, sp.Protocol)
			}
		}
	}
	stop := 10 * time.Second // the node's default --shutdown-timeout
	if v := flag("shutdown-timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("--shutdown-timeout=%q: %v", v, err)
		}
		stop = d
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= stop {
		t.Errorf("terminationGracePeriodSeconds must exceed --shutdown-timeout %s, or the kubelet kills the node mid-drain", stop)
	}
}

// TestNodeMemoryLimitBoundsTheHeap: a node holding 10,000 broker
// connections and their 1,000,000 (topic, group) entries reached an RSS of
// 1.18-1.32 GB with Go's collector unbounded (570 MB live heap, 256 MB of
// goroutine stacks, and the collector's headroom), past the StatefulSet's
// 1Gi memory limit: the pod would be OOM-killed at the scale edgereg is
// built for. With GOMEMLIMIT=900MiB it peaked at 936 MB. The node
// container must set GOMEMLIMIT, and below its memory limit.
func TestNodeMemoryLimitBoundsTheHeap(t *testing.T) {
	for _, o := range decodeManifests(t) {
		sts, ok := o.obj.(*appsv1.StatefulSet)
		if !ok || o.file != "kubernetes.yaml" {
			continue
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			if c.Name != "edgereg" {
				continue
			}
			limit := c.Resources.Limits.Memory()
			if limit.IsZero() {
				t.Fatal("the node container has no memory limit")
			}
			var soft string
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					soft = e.Value
				}
			}
			if soft == "" {
				t.Fatalf("the node container sets no GOMEMLIMIT under its %s memory limit: with 10,000 brokers its heap grows past it", limit)
			}
			q, err := resource.ParseQuantity(strings.TrimSuffix(soft, "B")) // Go's MiB is Kubernetes' Mi
			if err != nil {
				t.Fatalf("GOMEMLIMIT %q: %v", soft, err)
			}
			if q.Value() > limit.Value()*95/100 {
				t.Errorf("GOMEMLIMIT %s leaves less than 5 %% of the %s limit for stacks and the runtime", soft, limit)
			}
			return
		}
	}
	t.Fatal("kubernetes.yaml has no StatefulSet with a container named edgereg")
}
