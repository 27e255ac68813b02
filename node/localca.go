package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/edgereg/edgereg/wire/pki"
)

// localRenewRetry is how long the node waits before it looks at the local
// CA's certificates again after it renewed them (the Reloader takes the
// new files within about two seconds) or failed to.
const localRenewRetry = time.Minute

// localRenewal renews the node's and the operator's certificates of the
// local CA while the node runs. The local CA re-issues them within
// pki.RenewBefore (30 days) of expiry, but it was asked only at a start:
// a node that ran for a year served its certificate expired, and every
// handshake failed until a restart. trustLoop calls check every second;
// check asks the local CA again once the certificate in use, or the
// operator's, comes within pki.RenewBefore of expiry. The node serves the
// local CA's files through its Reloader, which takes the renewed pair as
// it takes any change of them. Only trustLoop's goroutine uses it.
//
// Files changed under the node (a pair its CA did not sign, or a damaged
// one, written over node.crt and node.key) are given to the local CA as at
// a start: the Reloader tells of every reload it tried (filesChanged), and
// check has the local CA look at them again at once. Served as they were,
// a foreign pair failed every client's handshake.
type localRenewal struct {
	n              *Node
	changed        atomic.Bool // the Reloader found the files changed; set by filesChanged
	operatorExpiry time.Time
	next           time.Time // no look for expiry before this
	lastErr        string    // the failure last logged
}

// filesChanged notes that the Reloader found the files changed, whether it
// could take them or not. Called with the Reloader's lock held.
func (r *localRenewal) filesChanged() { r.changed.Store(true) }

// localHosts are the names the node certificate of the local CA covers.
func (n *Node) localHosts() []string {
	return append([]string{hostOf(n.cfg.Addr)}, n.cfg.Hosts...)
}

// localCredentials ensures the local CA's certificates, logs what it
// issued and points creds at its files, which the node serves.
func (n *Node) localCredentials(creds *pki.ServerCredentials) error {
	local, err := pki.EnsureLocal(n.cfg.DataDir, n.localHosts())
	if err != nil {
		return err
	}
	n.logIssued(local.Issued)
	n.renewal = &localRenewal{n: n, operatorExpiry: local.OperatorExpiry}
	dir := pki.TLSDir(n.cfg.DataDir)
	creds.CertFile, creds.KeyFile = filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	creds.ClientCAFile = filepath.Join(dir, "ca.crt")
	return nil
}

// check renews the local CA's certificates when one is due, and has the
// local CA look at its files again when they changed.
func (r *localRenewal) check(now time.Time) {
	if !r.changed.Swap(false) {
		if now.Before(r.next) || !r.due(now) {
			return
		}
		r.next = now.Add(localRenewRetry)
	}
	local, err := pki.EnsureLocal(r.n.cfg.DataDir, r.n.localHosts())
	if err != nil {
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			r.n.log.Error("local CA: cannot check or re-issue its certificates; trying again when its files change, and every minute once one is about to expire", "err", err)
		}
		return
	}
	r.lastErr = ""
	r.operatorExpiry = local.OperatorExpiry
	r.n.logIssued(local.Issued)
}

// due reports whether the certificate the node serves, or the operator's,
// expires within pki.RenewBefore of now.
func (r *localRenewal) due(now time.Time) bool {
	if r.operatorExpiry.Sub(now) < pki.RenewBefore {
		return true
	}
	certs := r.n.creds.Current().Certificates
	return len(certs) > 0 && certs[0].Leaf != nil && certs[0].Leaf.NotAfter.Sub(now) < pki.RenewBefore
}

// logIssued logs each certificate the local CA issued anew, and why; one
// that replaced a damaged file as a warning.
func (n *Node) logIssued(issued []pki.Issued) {
	for _, is := range issued {
		level, msg := slog.LevelInfo, "local CA issued a certificate"
		if is.Damaged {
			level, msg = slog.LevelWarn, "local CA issued a certificate in place of a damaged one"
		}
		n.log.Log(context.Background(), level, msg,
			"file", filepath.Join(pki.TLSDir(n.cfg.DataDir), is.File), "reason", is.Reason)
	}
}
