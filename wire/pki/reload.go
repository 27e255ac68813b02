package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// DefaultCheckEvery is how often a Reloader looks at its files' stamps.
const DefaultCheckEvery = time.Second

// ServerCredentials say where a node's TLS credentials come from. With
// CertFile, KeyFile and ClientCAFile set, those files are used; otherwise
// Cert and ClientCAs (the local CA's). RevocationFile, if set, is a serial
// list or a standard X.509 CRL (see LoadRevocations).
type ServerCredentials struct {
	CertFile, KeyFile, ClientCAFile string
	Cert                            tls.Certificate
	ClientCAs                       []*x509.Certificate
	RevocationFile                  string
	AllowAnonymous                  bool
	// KeyExchange chooses the handshakes' key exchanges; default
	// KeyExchangeHybrid.
	KeyExchange KeyExchange
	// CheckEvery bounds how often the files are looked at; default 1 s.
	CheckEvery time.Duration
	// OnReload, if set, is told the outcome of every reload after the
	// first load: nil when the new files are in use, else why the old ones
	// stay in use.
	OnReload func(error)
}

// Reloader serves TLS credentials read from files and reads them again
// when one changes (size, modification time or inode: a rewrite, a rename
// into place, a Kubernetes Secret update), without a restart. New
// handshakes get the new credentials; a reload that fails keeps the last
// good ones and reports why. A file is read once it has not changed for
// CheckEvery (quiet), so one still being written is not taken. It reloads when asked for the config
// (Current) at least CheckEvery after its last look: a server with
// connections that must be checked again after a change (Recheck) asks
// every CheckEvery rather than wait for a handshake. Like etcd's listener, it answers through
// tls.Config.GetConfigForClient, so the certificate, the client CAs and the
// revocation list always change together.
type Reloader struct {
	creds ServerCredentials
	now   func() time.Time
	// beforeLoad, when set, runs as a reload starts reading (tests).
	beforeLoad func()

	mu        sync.Mutex
	conf      *tls.Config // current; never modified once published
	trust     trust       // what conf verifies peers with
	gen       uint64      // reloads that took effect (Generation)
	stamps    []fileStamp
	pending   []fileStamp // the files as a look found them changed but not quiet (quiet); only the loading Current uses it
	nextCheck time.Time
	loading   bool // a Current is looking at the files, without mu
}

// trust is what a config verifies client certificates against.
type trust struct {
	pool    *x509.CertPool
	anchors map[string]bool // the client CAs' DER, as in pool
	revoked *RevocationList // nil for none
}

// rooted returns the chains that end at a client CA of tr. A resumed
// session brings back every chain its first handshake verified, and Go
// lets it resume while one of them is still rooted: the others must not
// count as a path clean of revocations.
func (tr trust) rooted(chains [][]*x509.Certificate) [][]*x509.Certificate {
	var out [][]*x509.Certificate
	for _, c := range chains {
		if len(c) > 0 && tr.anchors[string(c[len(c)-1].Raw)] {
			out = append(out, c)
		}
	}
	return out
}

type fileStamp struct {
	path    string
	size    int64
	modTime time.Time
	ino     uint64
}

// NewReloader loads the credentials once; an error names the file.
func NewReloader(c ServerCredentials) (*Reloader, error) {
	if c.CheckEvery <= 0 {
		c.CheckEvery = DefaultCheckEvery
	}
	r := &Reloader{creds: c, now: time.Now}
	conf, tr, stamps, err := r.load()
	if err != nil {
		return nil, err
	}
	r.conf, r.trust, r.stamps, r.nextCheck = conf, tr, stamps, r.now().Add(c.CheckEvery)
	return r, nil
}

// TLSConfig returns the server config to listen with: every handshake
// asks the Reloader for the current credentials.
func (r *Reloader) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.Current(), nil
		},
	}
}

// Current returns the config in use, first reloading it if a file changed
// and the last look is at least CheckEvery ago. The files are looked at
// and read without the lock: the handshakes meanwhile are served the
// config in use, not held up by a slow disk or a large CRL; one caller at
// a time reloads.
func (r *Reloader) Current() *tls.Config {
	r.mu.Lock()
	now := r.now()
	if r.loading || now.Before(r.nextCheck) {
		conf := r.conf
		r.mu.Unlock()
		return conf
	}
	r.nextCheck = now.Add(r.creds.CheckEvery)
	r.loading = true
	old := r.stamps
	r.mu.Unlock()

	changed := changedFrom(old) && r.quiet(now)
	var conf *tls.Config
	var tr trust
	var stamps []fileStamp
	var err error
	if changed {
		conf, tr, stamps, err = r.load()
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.loading = false
	switch {
	case !changed:
	case err != nil:
		// Keep the old stamps, so the next look tries again: a Secret
		// update writes several files, and we may have seen half of it.
		r.report(err)
	default:
		r.conf, r.trust, r.stamps = conf, tr, stamps
		r.gen++
		r.report(nil)
	}
	return r.conf
}

// Generation counts the reloads that took effect: a server compares it
// with the one it last saw to learn that its peers' certificates must be
// checked again (Recheck).
func (r *Reloader) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// Revocations returns the revocation list in use (nil for none).
func (r *Reloader) Revocations() *RevocationList {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trust.revoked
}

// Errors Recheck wraps, besides ErrRevoked.
var (
	// ErrUntrusted means a certificate no longer verifies against the
	// client CAs in use (its CA was taken out of the bundle).
	ErrUntrusted = errors.New("certificate no longer trusted")
	// ErrExpired means a certificate of the chain has expired.
	ErrExpired = errors.New("certificate expired")
)

// Recheck verifies a connected peer's certificates (tls.ConnectionState's
// PeerCertificates: the leaf, then the intermediates it sent) against the
// credentials in use now, as a handshake at now would: the client CAs,
// the certificates' validity and the revocation list. A handshake checks
// a peer once; a server calls this after a reload (Generation) so that a
// certificate revoked, or signed by a CA no longer trusted, does not keep
// the connections it already holds. No certificates (an anonymous peer)
// is nil.
func (r *Reloader) Recheck(certs []*x509.Certificate, now time.Time) error {
	_, err := r.ValidUntil(certs, now)
	return err
}

// ValidUntil rechecks certs as Recheck does and, when they pass, says
// until when they stay valid by the credentials in use now (LastExpiry of
// the chains that verify clean of revocations). No certificates is zero
// and nil.
func (r *Reloader) ValidUntil(certs []*x509.Certificate, now time.Time) (time.Time, error) {
	if len(certs) == 0 {
		return time.Time{}, nil
	}
	r.mu.Lock()
	tr := r.trust
	r.mu.Unlock()
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: tr.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		// The chains a handshake now would verify: the leaf or a CA of
		// each may be revoked.
		if err := tr.revoked.check(chains); err != nil {
			return time.Time{}, err
		}
		var clean [][]*x509.Certificate
		for _, c := range chains {
			if tr.revoked.checkChain(c) == nil {
				clean = append(clean, c)
			}
		}
		return LastExpiry(clean), nil
	case tr.revoked.revokes(leaf, true):
		return time.Time{}, tr.revoked.check([][]*x509.Certificate{{leaf}})
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return time.Time{}, fmt.Errorf("%w: %q: %v", ErrExpired, leaf.Subject.CommonName, err)
	}
	return time.Time{}, fmt.Errorf("%w: %q: %v", ErrUntrusted, leaf.Subject.CommonName, err)
}

// Rooted returns the chains of verified (a connection's VerifiedChains)
// that end at a client CA in use now: a resumed session brings back
// chains to CAs taken out of the bundle since.
func (r *Reloader) Rooted(verified [][]*x509.Certificate) [][]*x509.Certificate {
	r.mu.Lock()
	tr := r.trust
	r.mu.Unlock()
	return tr.rooted(verified)
}

// LastExpiry is when the last of chains stops being valid: the earliest
// NotAfter of each chain, the latest of those. A peer with several
// chains (a cross-signed intermediate) is valid while one of them is.
func LastExpiry(chains [][]*x509.Certificate) time.Time {
	var last time.Time
	for _, chain := range chains {
		var end time.Time
		for _, c := range chain {
			if end.IsZero() || c.NotAfter.Before(end) {
				end = c.NotAfter
			}
		}
		if end.After(last) {
			last = end
		}
	}
	return last
}

func (r *Reloader) report(err error) {
	if r.creds.OnReload != nil {
		r.creds.OnReload(err)
	}
}

func (r *Reloader) files() []string {
	var fs []string
	if r.creds.CertFile != "" {
		fs = append(fs, r.creds.CertFile, r.creds.KeyFile, r.creds.ClientCAFile)
	}
	if r.creds.RevocationFile != "" {
		fs = append(fs, r.creds.RevocationFile)
	}
	return fs
}

// quiet reports whether the files have not changed for a look: each was
// last modified at least CheckEvery before now, or they are as the last
// look found them. A file written in place (`cat a.pem b.pem > ca.crt`
// writes each part in turn) can be read between two writes, cut exactly
// after a PEM block: a valid bundle of fewer CAs, whose taking would
// close the connections of the others. A writer still at it changes the
// file again within the look, so it is read once it is done. The
// modification time alone would not do: a file copied with its time kept,
// or a clock set back, would wait for ever. Called by the one Current that
// is loading.
func (r *Reloader) quiet(now time.Time) bool {
	var stamps []fileStamp
	settled := true
	for _, f := range r.files() {
		st, err := stampOf(f)
		if err != nil {
			return true // load says what is wrong
		}
		stamps = append(stamps, st)
		settled = settled && !st.modTime.After(now.Add(-r.creds.CheckEvery))
	}
	if settled || slices.Equal(stamps, r.pending) {
		r.pending = nil
		return true
	}
	r.pending = stamps
	return false
}

// changedFrom reports whether a file differs from its stamp.
func changedFrom(stamps []fileStamp) bool {
	for _, old := range stamps {
		st, err := stampOf(old.path)
		if err != nil || st != old {
			return true
		}
	}
	return false
}

// load reads every file and builds the config. Stamps are taken before
// reading, so a change during the read is seen at the next look.
func (r *Reloader) load() (*tls.Config, trust, []fileStamp, error) {
	if r.beforeLoad != nil {
		r.beforeLoad()
	}
	var stamps []fileStamp
	for _, f := range r.files() {
		st, err := stampOf(f)
		if err != nil {
			return nil, trust{}, nil, err
		}
		stamps = append(stamps, st)
	}
	cert, cas := r.creds.Cert, r.creds.ClientCAs
	if r.creds.CertFile != "" {
		var err error
		if cert, _, err = LoadCredentials(r.creds.CertFile, r.creds.KeyFile, r.creds.ClientCAFile); err != nil {
			return nil, trust{}, nil, err
		}
		if err := checkServes(cert, r.creds.CertFile); err != nil {
			return nil, trust{}, nil, err
		}
		if cas, err = readCertsFile(r.creds.ClientCAFile); err != nil {
			return nil, trust{}, nil, err
		}
	}
	pool := x509.NewCertPool()
	anchors := make(map[string]bool, len(cas))
	for _, c := range cas {
		pool.AddCert(c)
		anchors[string(c.Raw)] = true
	}
	conf := ServerConfig(cert, pool, r.creds.AllowAnonymous)
	conf.CurvePreferences = r.creds.KeyExchange.curves()
	tr := trust{pool: pool, anchors: anchors}
	if r.creds.RevocationFile != "" {
		rl, err := LoadRevocationsFrom(r.creds.RevocationFile, cas)
		if err != nil {
			return nil, trust{}, nil, err
		}
		tr.revoked = rl
	}
	conf.VerifyConnection = r.verifyConnection(tr)
	return conf, tr, stamps, nil
}

// verifyConnection is the VerifyConnection of a config verifying with
// tr. A handshake takes its config at the ClientHello and verifies the
// client's certificate when it arrives, as late as the client likes: if
// the credentials were reloaded meanwhile, the certificate is verified
// again against the ones in use now (Recheck), or a certificate revoked
// during its own handshake would be let in and never checked again.
func (r *Reloader) verifyConnection(tr trust) func(tls.ConnectionState) error {
	check := VerifyConnection(tr.revoked)
	return func(cs tls.ConnectionState) error {
		r.mu.Lock()
		current := r.trust
		r.mu.Unlock()
		if current.pool != tr.pool && len(cs.PeerCertificates) > 0 {
			return r.Recheck(cs.PeerCertificates, time.Now())
		}
		if len(cs.VerifiedChains) > 0 {
			if cs.VerifiedChains = tr.rooted(cs.VerifiedChains); len(cs.VerifiedChains) == 0 {
				return fmt.Errorf("%w: %q: no chain to a client CA in use", ErrUntrusted, cs.PeerCertificates[0].Subject.CommonName)
			}
		}
		return check(cs)
	}
}

// checkServes refuses a certificate that no client would accept from a
// server: one whose extended key usage leaves out serverAuth (a broker's,
// client's or operator's credential given as the node's by mistake).
// Without this the node starts and every client's handshake fails, so the
// mistake shows far from where it was made.
func checkServes(cert tls.Certificate, file string) error {
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("load certificate %s: %w", file, err)
		}
	}
	if len(leaf.ExtKeyUsage) == 0 {
		return nil // no restriction
	}
	for _, u := range leaf.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny {
			return nil
		}
	}
	what := "its extended key usage has no serverAuth"
	if id, err := IdentityFromCert(leaf); err == nil {
		what = fmt.Sprintf("role %s: %s", id.Role, what)
	}
	return fmt.Errorf("certificate %s cannot serve TLS (%s): give a node certificate (edgereg cert issue --role node)", file, what)
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, fmt.Errorf("credentials: %w", err)
	}
	return fileStamp{path: path, size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}, nil
}

// readCertsFile reads every certificate of a PEM bundle.
func readCertsFile(path string) ([]*x509.Certificate, error) {
	data, err := readFileMax(path, maxPEMFile)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", path, err)
	}
	blocks, err := pemBlocks(data)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", path, err)
	}
	var out []*x509.Certificate
	for _, block := range blocks {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("load CA %s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("load CA %s: %w", path, errors.New("no PEM certificates found"))
	}
	return out, nil
}
