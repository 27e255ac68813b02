package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
)

// File modes: keys are private to the user, certificates are public.
const (
	keyMode  os.FileMode = 0o600
	certMode os.FileMode = 0o644
	dirMode  os.FileMode = 0o700
)

// Largest files read: far above any real one (a CA bundle of every public
// root is some 200 KiB; a CRL of a million serials some 40 MiB), so that a
// path pointed at the wrong file costs an error, not the node's memory.
// The node reads them again at every change while handshakes wait.
const (
	maxPEMFile        = 4 << 20  // certificate, key, CA bundle
	maxRevocationFile = 64 << 20 // CRLs or a serial list
)

// readFileMax reads a regular file of at most max bytes. Anything else (a
// FIFO, whose open would block, a device such as /dev/zero, which never
// ends, a larger file) is refused unread.
func readFileMax(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d allowed", path, fi.Size(), max)
	}
	// The file may grow between the stat and the read (a writer still at
	// it): read one byte more than allowed to see that.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than the %d bytes allowed", path, max)
	}
	return data, nil
}

// pemBlocks returns the PEM blocks of data. A block cut short (a file
// read while it is written in place) is an error, not trailing text to
// skip: skipped, a half-written bundle would load as the CAs before the
// cut alone.
func pemBlocks(data []byte) ([]*pem.Block, error) {
	var blocks []*pem.Block
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			if bytes.Contains(rest, []byte("-----BEGIN")) {
				return nil, errors.New("a PEM block is cut short or corrupt (a file still being written?)")
			}
			return blocks, nil
		}
		blocks = append(blocks, block)
		data = rest
	}
}

// encodeCert and encodeKey produce the PEM forms written to disk.
func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// readCertFile reads the first certificate of a PEM file.
func readCertFile(path string) (*x509.Certificate, error) {
	data, err := readFileMax(path, maxPEMFile)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM certificate", path)
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return cert, nil
		}
	}
}

// readKeyFile reads a PKCS#8 or SEC 1 private key from a PEM file.
func readKeyFile(path string) (crypto.Signer, error) {
	data, err := readFileMax(path, maxPEMFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM private key", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		err = fmt.Errorf("unexpected PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: key type %T cannot sign", path, key)
	}
	return signer, nil
}

// exists reports whether path exists; other stat errors are returned.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, err
}
