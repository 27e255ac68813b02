package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReloaderFollowsKubernetesSecretSwap: a Kubernetes Secret volume
// holds its files behind symlinks (revoked.crl -> ..data/revoked.crl,
// ..data -> ..2026_01_01_xxx) and updates them by writing a new directory
// and renaming a new ..data symlink over the old one: same paths, same
// sizes perhaps, other files. The reloader sees the swap and the revocation
// takes effect.
func TestReloaderFollowsKubernetesSecretSwap(t *testing.T) {
	root := newExtCert(t, nil, extCATemplate("root"))
	stolen := extClient(t, root, "stolen", nil)
	vol := t.TempDir()
	version := func(name string, crl []byte) {
		t.Helper()
		dir := filepath.Join(vol, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "revoked.crl"), crl, 0o600)
		tmp := filepath.Join(vol, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", root.crl(t, time.Now().Add(time.Hour)))
	rlFile := filepath.Join(vol, "revoked.crl")
	if err := os.Symlink(filepath.Join("..data", "revoked.crl"), rlFile); err != nil {
		t.Fatal(err)
	}
	node, _, _ := extReloader(t, root, root.cert)
	r, err := NewReloader(ServerCredentials{Cert: node.creds.Cert, ClientCAs: node.creds.ClientCAs, RevocationFile: rlFile})
	if err != nil {
		t.Fatal(err)
	}
	chain := []*x509.Certificate{stolen.cert}
	if err := r.Recheck(chain, time.Now()); err != nil {
		t.Fatalf("before the swap: %v", err)
	}
	version("..v2", root.crl(t, time.Now().Add(time.Hour), stolen.cert.SerialNumber))
	os.RemoveAll(filepath.Join(vol, "..v1"))
	reload(t, r)
	if err := r.Recheck(chain, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Errorf("after the Secret's swap: %v, want ErrRevoked", err)
	}
}

// TestReloadDoesNotHoldUpHandshakes: while the files are read and parsed
// (a large CRL, a slow disk), handshakes are served the config in use
// rather than wait: every handshake asks for the config. Before, the
// reload ran under the lock every handshake takes.
func TestReloadDoesNotHoldUpHandshakes(t *testing.T) {
	root := newExtCert(t, nil, extCATemplate("root"))
	r, rlFile, _ := extReloader(t, root, root.cert)
	old := r.Current()
	entered, release := make(chan struct{}), make(chan struct{})
	r.beforeLoad = func() { close(entered); <-release }
	clock := &fakeClock{t: time.Now()}
	clock.step()
	r.now = clock.now
	os.WriteFile(rlFile, root.crl(t, time.Now().Add(time.Hour)), 0o600)
	loaded := make(chan *tls.Config)
	go func() { loaded <- r.Current() }()
	<-entered
	other := make(chan *tls.Config)
	go func() { other <- r.Current() }()
	waited := false
	select {
	case c := <-other:
		if c != old {
			t.Error("a handshake during the reload got a config other than the one in use")
		}
	case <-time.After(10 * time.Second):
		t.Error("a handshake waited 10 s for a reload under way")
		waited = true
	}
	close(release)
	if c := <-loaded; c == old {
		t.Error("the reload did not take the new file")
	}
	if waited {
		<-other
	}
}
