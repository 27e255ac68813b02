package wasm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The modules under testdata/wasm are built by policies/build.sh, which
// records in SOURCES.sha256 the hash of each module's sources. This test
// recomputes those hashes, so a source edited without rebuilding fails it
// at once and without a toolchain. With EDGEREG_CHECK_POLICY_BUILD=1 it
// also rebuilds everything into a temporary directory and compares bytes
// (Go builds are reproducible with -trimpath -buildvcs=false, for the Go
// version the file names).

const repoRoot = ".."

// sourcesOf returns the sources of a module by build.sh's rules.
func sourcesOf(t *testing.T, module string) []string {
	t.Helper()
	rel := strings.TrimPrefix(module, "testdata/wasm/")
	name := strings.TrimSuffix(filepath.Base(rel), ".wasm")
	glob := func(pattern string) []string {
		m, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				out = append(out, strings.TrimPrefix(f, repoRoot+"/"))
			}
		}
		return out
	}
	switch {
	case strings.Contains(rel, "/"): // hostile/ or fixtures/
		return []string{"testdata/wasm/" + strings.TrimSuffix(rel, ".wasm") + ".wat"}
	case fileExists(filepath.Join(repoRoot, "policies", name, "main.go")):
		return append(glob("policies/"+name+"/*.go"), glob("policies/sdk/*.go")...)
	}
	return []string{"policies/wat/" + name + ".wat"}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// sourcesHash is `sha256sum` over the files in byte order, hashed again.
func sourcesHash(t *testing.T, files []string) string {
	slices.Sort(files)
	var list bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&list, "%x  %s\n", sha256.Sum256(b), f)
	}
	return fmt.Sprintf("%x", sha256.Sum256(list.Bytes()))
}

func readSources(t *testing.T, dir string) map[string][2]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SOURCES.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && !strings.HasPrefix(fields[0], "#") {
			out[fields[2]] = [2]string{fields[0], fields[1]}
		}
	}
	return out
}

func TestShippedModulesAreFresh(t *testing.T) {
	recorded := readSources(t, filepath.Join(repoRoot, "testdata", "wasm"))
	// Every source has a module.
	var want []string
	mains, _ := filepath.Glob(filepath.Join(repoRoot, "policies", "*", "main.go"))
	for _, m := range mains {
		want = append(want, "testdata/wasm/"+filepath.Base(filepath.Dir(m))+".wasm")
	}
	for _, pat := range []string{"policies/wat/*.wat", "testdata/wasm/hostile/*.wat", "testdata/wasm/fixtures/*.wat"} {
		wats, _ := filepath.Glob(filepath.Join(repoRoot, pat))
		for _, w := range wats {
			dir := "testdata/wasm/"
			if sub := filepath.Base(filepath.Dir(w)); sub != "wat" {
				dir += sub + "/"
			}
			want = append(want, dir+strings.TrimSuffix(filepath.Base(w), ".wat")+".wasm")
		}
	}
	for _, module := range want {
		rec, ok := recorded[module]
		switch {
		case !ok:
			t.Errorf("%s is not built: run policies/build.sh", module)
			continue
		case sourcesHash(t, sourcesOf(t, module)) != rec[0]:
			t.Errorf("%s is stale: its sources changed; run policies/build.sh", module)
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, module))
		if err != nil {
			t.Errorf("%s: %v", module, err)
		} else if fmt.Sprintf("%x", sha256.Sum256(b)) != rec[1] {
			t.Errorf("%s was changed after it was built; run policies/build.sh", module)
		}
	}
	if len(recorded) != len(want) {
		t.Errorf("SOURCES.sha256 names %d modules, the sources make %d", len(recorded), len(want))
	}
}

func TestShippedModulesRebuild(t *testing.T) {
	if os.Getenv("EDGEREG_CHECK_POLICY_BUILD") != "1" {
		t.Skip("set EDGEREG_CHECK_POLICY_BUILD=1 to rebuild the modules and compare bytes")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "policies/build.sh")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	rebuilt, committed := readSources(t, out), readSources(t, filepath.Join(repoRoot, "testdata", "wasm"))
	for module, rec := range committed {
		if rebuilt[module] != rec {
			t.Errorf("%s: rebuilt %v, committed %v", module, rebuilt[module], rec)
		}
	}
}
