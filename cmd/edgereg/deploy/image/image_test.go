package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// repoRoot is the edgereg module, three directories up.
const repoRoot = "../../../.."

// buildStatic builds edgereg as `make image` does: CGO_ENABLED=0 for the
// running platform, with a version and commit stamped in.
func buildStatic(t *testing.T, version, commit string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edgereg")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin,
		"-ldflags", "-s -w -X github.com/edgereg/edgereg/node.Version="+version+" -X github.com/edgereg/edgereg/node.Commit="+commit,
		"./cmd/edgereg")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestImageArchive(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image runs linux binaries; this test runs the binary from its layer")
	}
	const version, commit = "v9.8.7-test", "0123456789abcdef"
	bin := buildStatic(t, version, commit)
	checkStatic(t, bin)

	dir := t.TempDir()
	archive := filepath.Join(dir, "edgereg-image.tar")
	img, err := Build(Options{Binary: bin, Version: version, Commit: commit, Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(archive, img, version); err != nil {
		t.Fatal(err)
	}

	// Read the archive back as a consumer would: unpack the OCI layout,
	// find the image by its ref name, decode manifest and config.
	unpacked := filepath.Join(dir, "layout")
	untar(t, archive, unpacked)
	idx, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != RefName(version) {
		t.Fatalf("index.json = %+v, want one image named %s", im.Manifests, RefName(version))
	}
	got, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := got.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want OCI", mt)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/edgereg"}) || c.User != "65532:65532" || c.User == "" ||
		cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config: entrypoint %v user %q platform %s/%s", c.Entrypoint, c.User, cf.OS, cf.Architecture)
	}
	if _, ok := c.ExposedPorts["9876/udp"]; !ok || len(c.ExposedPorts) != 2 {
		t.Errorf("exposed ports %v, want 9876/udp and 9877/tcp", c.ExposedPorts)
	}
	if _, ok := c.ExposedPorts["9877/tcp"]; !ok {
		t.Errorf("exposed ports %v, want 9877/tcp", c.ExposedPorts)
	}
	if _, ok := c.Volumes["/data"]; !ok {
		t.Errorf("volumes %v, want /data", c.Volumes)
	}
	if c.Labels["org.opencontainers.image.version"] != version || c.Labels["org.opencontainers.image.revision"] != commit ||
		c.Labels["org.opencontainers.image.source"] == "" {
		t.Errorf("labels %v", c.Labels)
	}

	// The layer: the binary, the user, /data owned by that user.
	layers, err := got.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v, %d", err, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	var fromLayer []byte
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		if h.Name == "usr/local/bin/edgereg" {
			if fromLayer, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		if h.Name == "etc/passwd" {
			b, _ := io.ReadAll(tr)
			if !strings.Contains(string(b), ":65532:65532:") {
				t.Errorf("/etc/passwd has no user 65532:\n%s", b)
			}
		}
	}
	if h := files["data/"]; h == nil || h.Uid != 65532 || h.Typeflag != tar.TypeDir {
		t.Errorf("/data in the layer: %+v, want a directory owned by 65532", h)
	}
	if h := files["usr/local/bin/edgereg"]; h == nil || h.Mode&0o111 == 0 {
		t.Fatalf("no executable /usr/local/bin/edgereg in the layer: %+v", h)
	}

	// Run the binary taken from the layer.
	exe := filepath.Join(dir, "edgereg-from-layer")
	if err := os.WriteFile(exe, fromLayer, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("edgereg version from the layer: %v", err)
	}
	var v struct {
		Version   string   `json:"version"`
		Commit    string   `json:"commit"`
		GoVersion string   `json:"go_version"`
		ALPN      []string `json:"alpn"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if v.Version != version || v.Commit != commit || !strings.HasPrefix(v.GoVersion, "go") || !slices.Equal(v.ALPN, []string{"edgereg/1"}) {
		t.Errorf("version -o json = %+v", v)
	}
	// The image's default command is a valid node command line.
	args := append(slices.Clone(c.Cmd), "--print-config")
	if out, err := exec.Command(exe, args...).CombinedOutput(); err != nil {
		t.Errorf("the image's command %v is refused: %v\n%s", c.Cmd, err, out)
	}

	// An operator's `docker exec CONTAINER edgereg status` (or kubectl
	// exec) runs a client command with the image's environment in its
	// working directory: it must look for the local CA where the default
	// command's node keeps it, not in ./edgereg-data.
	wd := t.TempDir()
	cl := exec.Command(exe, "status", "--timeout", "2s", "--nodes", "127.0.0.1:1")
	cl.Dir, cl.Env = wd, c.Env
	out, _ = cl.CombinedOutput()
	nodeData := ""
	for _, a := range c.Cmd {
		if v, ok := strings.CutPrefix(a, "--data="); ok {
			nodeData = v
		}
	}
	if want := "no local CA in " + filepath.Join(nodeData, "tls"); nodeData == "" || !strings.Contains(string(out), want) {
		t.Errorf("a client command run with the image's environment (%v) does not look where the node keeps its CA (%q): %s", c.Env, want, out)
	}

	// Building again from the same binary gives the same image.
	again, err := Build(Options{Binary: bin, Version: version, Commit: commit, Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := got.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of one binary differ: %s, %s", d1, d2)
	}
}

// checkStatic fails if bin asks for a dynamic loader: the image has none.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked", bin)
		}
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(os.PathSeparator)) {
			t.Fatalf("archive entry %q escapes", h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDockerfileMatchesImage keeps the Dockerfile and `make image` the
// same image: user, working directory, volume, ports, entrypoint, command,
// environment and label keys of the Dockerfile's last stage are compared
// with Config.
func TestDockerfileMatchesImage(t *testing.T) {
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	var cont string
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cont+l)
		cont = ""
	}
	var final []string // the last stage
	for _, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			final = nil
		}
		final = append(final, l)
	}
	if len(final) == 0 || final[0] != "FROM scratch" {
		t.Fatalf("the last stage is not FROM scratch: %q", final)
	}
	want := Config("${VERSION}", "${COMMIT}")
	got := map[string]string{}
	var labels []string
	for _, l := range final {
		instr, rest, _ := strings.Cut(l, " ")
		if instr == "LABEL" {
			for _, kv := range strings.Fields(rest) {
				k, _, _ := strings.Cut(kv, "=")
				labels = append(labels, k)
			}
			continue
		}
		got[instr] = strings.TrimSpace(rest)
	}
	jsonList := func(s []string) string { b, _ := json.Marshal(s); return strings.ReplaceAll(string(b), ",", ", ") }
	checks := map[string]string{
		"USER": want.User, "WORKDIR": want.WorkingDir, "VOLUME": DataDir, "ENV": strings.Join(want.Env, " "),
		"EXPOSE":     QUICPort + " " + AdminPort,
		"ENTRYPOINT": jsonList(want.Entrypoint), "CMD": jsonList(want.Cmd),
	}
	for instr, w := range checks {
		if got[instr] != w {
			t.Errorf("Dockerfile %s %s, the image has %s", instr, got[instr], w)
		}
	}
	var wantLabels []string
	for k := range want.Labels {
		wantLabels = append(wantLabels, k)
	}
	slices.Sort(labels)
	slices.Sort(wantLabels)
	if !slices.Equal(labels, wantLabels) {
		t.Errorf("Dockerfile labels %v, the image has %v", labels, wantLabels)
	}
	if !bytes.Contains([]byte(strings.Join(lines, "\n")), []byte("CGO_ENABLED=0")) {
		t.Error("the Dockerfile does not build a static binary")
	}
}
