package pki

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgereg/edgereg/wire/datadir"
)

// LoadOrCreateKey returns the 32-byte secret stored at path, creating it
// (random, mode 0600, written atomically) on first use. Nodes use it as
// quic.StatelessResetKey and TokenGeneratorKey: keeping it across restarts
// lets peers recognise a restarted node's stateless resets and tokens. A
// file of any other size is an error rather than silently replaced.
func LoadOrCreateKey(path string) ([32]byte, error) {
	var key [32]byte
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(data) != len(key) {
			return key, fmt.Errorf("load key %s: %d bytes, want %d: the file is damaged; delete it and the node makes a new one (peers of its last run then see their connections time out rather than reset)", path, len(data), len(key))
		}
		copy(key[:], data)
		return key, nil
	case !errors.Is(err, os.ErrNotExist):
		return key, fmt.Errorf("load key %s: %w", path, err)
	}
	if _, err := rand.Read(key[:]); err != nil {
		return key, fmt.Errorf("create key %s: %w", path, err)
	}
	if err := datadir.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return key, fmt.Errorf("create key %s: %w", path, err)
	}
	if err := datadir.WriteFile(path, key[:], keyMode); err != nil {
		return key, err
	}
	return key, nil
}
