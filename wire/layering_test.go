package wire

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/edgereg/edgereg"

// TestLayering holds the dependency order cmd → node → wasm → wire: no
// package under wire/ or wasm/ may import anything under node/, directly
// or through another package of this module (tests aside, which may start
// real nodes), and wire never imports wasm.
func TestLayering(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{} // package → its module imports
	var load func(pkg string)
	load = func(pkg string) {
		if _, done := imports[pkg]; done {
			return
		}
		imports[pkg] = nil
		dir := filepath.Join(root, strings.TrimPrefix(pkg, module))
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return
			}
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				imports[pkg] = append(imports[pkg], imp)
				load(imp)
			}
		}
	}
	var checked int
	for _, top := range []string{"wire", "wasm"} {
		filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() || d.Name() == "testdata" {
				if d != nil && d.IsDir() && d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return err
			}
			rel, _ := filepath.Rel(root, path)
			pkg := module + "/" + filepath.ToSlash(rel)
			load(pkg)
			checked++
			for _, chain := range forbidden(pkg, imports, top) {
				t.Errorf("%s imports %s", pkg, chain)
			}
			return nil
		})
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages: is the test run from wire/?", checked)
	}
}

// forbidden returns the import chains from pkg that reach a package its
// layer must not depend on.
func forbidden(pkg string, imports map[string][]string, layer string) []string {
	bad := func(p string) bool {
		return strings.HasPrefix(p, module+"/node") || strings.HasPrefix(p, module+"/cmd") ||
			(layer == "wire" && strings.HasPrefix(p, module+"/wasm"))
	}
	var out []string
	seen := map[string]bool{}
	var walk func(p, chain string)
	walk = func(p, chain string) {
		for _, imp := range imports[p] {
			c := chain + " → " + strings.TrimPrefix(imp, module+"/")
			if bad(imp) {
				out = append(out, strings.TrimPrefix(c, " → "))
				continue
			}
			if !seen[imp] {
				seen[imp] = true
				walk(imp, c)
			}
		}
	}
	walk(pkg, "")
	return out
}
