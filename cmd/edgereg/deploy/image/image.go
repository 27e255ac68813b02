// Package image builds edgereg's OCI image without a container daemon: one
// layer holding the static binary, a passwd entry for the non-root user and
// the /data volume's directory, on an empty base. It is the same image the
// Dockerfile beside it describes (the tests compare the two), so `make image`
// and `docker build` give the same result.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image declares; the Dockerfile says the same.
const (
	BinaryPath = "/usr/local/bin/edgereg"
	DataDir    = "/data"
	User       = "65532:65532"
	QUICPort   = "9876/udp"
	AdminPort  = "9877/tcp"
	Source     = "https://github.com/edgereg/edgereg"
	uid        = 65532
)

// Cmd is the image's default command: a node listening on every interface
// with its data in the /data volume.
var Cmd = []string{"node", "--addr=0.0.0.0:9876", "--admin-addr=0.0.0.0:9877", "--data=" + DataDir}

// Options describe one build.
type Options struct {
	// Binary is the statically linked edgereg binary to ship.
	Binary string
	// Version and Commit go into the labels.
	Version, Commit string
	// OS and Arch are the binary's platform; default linux/amd64.
	OS, Arch string
	// Created stamps the image and every file in it; the zero time gives
	// the Unix epoch, so two builds of one binary are byte-identical.
	Created time.Time
}

// Build returns the image for opts.
func Build(opts Options) (v1.Image, error) {
	if opts.OS == "" {
		opts.OS = "linux"
	}
	if opts.Arch == "" {
		opts.Arch = "amd64"
	}
	if opts.Created.IsZero() {
		opts.Created = time.Unix(0, 0)
	}
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	layerTar, err := rootfs(bin, opts.Created.UTC())
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: opts.Created}, CreatedBy: "edgereg make image", Comment: "edgereg " + opts.Version}})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = opts.OS, opts.Arch, v1.Time{Time: opts.Created}
	cf.Config = Config(opts.Version, opts.Commit)
	return mutate.ConfigFile(img, cf)
}

// Config is the image's run configuration. EDGEREG_DATA is set so that
// client commands run in the container (`docker exec ... edgereg status`)
// use the local CA of the node its command starts.
func Config(version, commit string) v1.Config {
	return v1.Config{
		Entrypoint:   []string{BinaryPath},
		Cmd:          Cmd,
		User:         User,
		WorkingDir:   DataDir,
		Env:          []string{"PATH=/usr/local/bin", "EDGEREG_DATA=" + DataDir},
		ExposedPorts: map[string]struct{}{QUICPort: {}, AdminPort: {}},
		Volumes:      map[string]struct{}{DataDir: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "edgereg",
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": commit,
			"org.opencontainers.image.source":   Source,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
}

// rootfs is the layer: the binary, /etc/passwd and /etc/group naming the
// non-root user, /data owned by it, and /tmp.
func rootfs(bin []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(BinaryPath[1:], 0o755, bin) },
		func() error { return dir(DataDir[1:], 0o750, uid) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, fmt.Errorf("image layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// RefName is the name `docker load` and `podman load` give the image.
func RefName(version string) string { return "edgereg:" + version }

// WriteArchive writes img as an OCI image layout packed in a tar file (an
// "oci-archive": `docker load -i`, `podman load -i` and `skopeo copy
// oci-archive:FILE` read it), tagged edgereg:VERSION.
func WriteArchive(path string, img v1.Image, version string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	ref := "docker.io/library/" + RefName(version)
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": RefName(version),
		"io.containerd.image.name":          ref,
	})); err != nil {
		return err
	}
	return tarDir(tmp, path)
}

// tarDir packs dir's files into a tar at path, in a fixed order with fixed
// times, so the archive's bytes depend only on its content.
func tarDir(dir, path string) error {
	out, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(path + ".tmp")
	tw := tar.NewWriter(out)
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
