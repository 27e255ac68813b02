package main

import (
	"os"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCgroupMemoryLimit reads the limits cgroup v1 and v2 write, in a
// container's cgroup namespace and outside one, from real files.
func TestCgroupMemoryLimit(t *testing.T) {
	cases := []struct {
		name     string
		cgroup   string
		files    map[string]string
		want     int64
		wantOK   bool
		wantFile string
	}{
		{"v2 in a namespace", "0::/\n", map[string]string{"memory.max": "1073741824\n"}, 1 << 30, true, "memory.max"},
		{"v2 by path", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "536870912\n"}, 512 << 20, true, "kubepods/pod1/c1/memory.max"},
		{"v2 no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, false, ""},
		{"v1", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n", map[string]string{"memory/docker/abc/memory.limit_in_bytes": "2147483648\n"}, 2 << 30, true, "memory/docker/abc/memory.limit_in_bytes"},
		{"v1 no limit", "4:memory:/x\n", map[string]string{"memory/x/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false, ""},
		{"v1 in a namespace", "11:cpuset,memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "268435456"}, 256 << 20, true, "memory/memory.limit_in_bytes"},
		{"no files", "0::/gone\n", nil, 0, false, ""},
		{"garbage", "not a cgroup line\n0::/\n", map[string]string{"memory.max": "lots\n"}, 0, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "sys")
			writeFile(t, filepath.Join(dir, "cgroup"), c.cgroup)
			for f, v := range c.files {
				writeFile(t, filepath.Join(root, f), v)
			}
			got, file, ok := cgroupMemoryLimit(filepath.Join(dir, "cgroup"), root)
			if got != c.want || ok != c.wantOK {
				t.Fatalf("limit %d, ok %v; want %d, %v", got, ok, c.want, c.wantOK)
			}
			if ok && file != filepath.Join(root, c.wantFile) {
				t.Fatalf("read from %s, want %s", file, filepath.Join(root, c.wantFile))
			}
		})
	}
	if _, _, ok := cgroupMemoryLimit(filepath.Join(t.TempDir(), "none"), "/nonexistent"); ok {
		t.Fatal("a missing /proc/self/cgroup gave a limit")
	}
}
