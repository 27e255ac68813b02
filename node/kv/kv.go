// Package kv is a node's KV configuration (RocketMQ's KVConfigManager):
// namespace -> key -> value, kept in memory and persisted to one JSON file in
// the data directory on every change. Writes are atomic (package datadir):
// a crash leaves either the old or the new contents, never a torn file.
package kv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/edgereg/edgereg/wire/datadir"
)

// FileName is the name of the KV file inside a node's data directory.
const FileName = "kvconfig.json"

// Limits on what one namespace, key or value may hold, and on the KV
// config as a whole.
const (
	MaxNameLen  = 255
	MaxValueLen = 64 << 10
	// MaxTotalLen bounds the file the KV config is kept in, which every put
	// rewrites. It is RocketMQ's ORDER_TOPIC_CONFIG for some 50,000
	// topics, and far below the 16 MiB a remoting broker reads: its
	// registration answer carries that namespace.
	MaxTotalLen = 4 << 20
)

// Errors that callers branch on.
var (
	ErrNotFound = errors.New("not found")
	ErrInvalid  = errors.New("invalid argument")
)

// Store is the KV configuration. It is safe for concurrent use.
type Store struct {
	path string
	mu   sync.RWMutex
	data map[string]map[string]string
	size int // bytes of the file as last loaded or written
}

// Open loads the store from dir/kvconfig.json, or starts empty when the file
// does not exist yet.
func Open(dir string) (*Store, error) {
	s := &Store{path: filepath.Join(dir, FileName), data: make(map[string]map[string]string)}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load KV config: %w", err)
	}
	if err := json.Unmarshal(b, &s.data); err != nil {
		return nil, fmt.Errorf("load KV config %s: %w: the file is damaged; restore it from a backup, or move it aside to start with an empty KV config", s.path, err)
	}
	if s.data == nil {
		s.data = make(map[string]map[string]string)
	}
	s.size = len(b)
	return s, nil
}

// Put sets a value and persists the store. On a persist error nothing
// changes.
func (s *Store) Put(namespace, key, value string) error {
	if err := validate(namespace, key); err != nil {
		return err
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes exceeds %d", ErrInvalid, len(value), MaxValueLen)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.cloneNamespace(namespace)
	next[key] = value
	return s.commit(namespace, next)
}

// Get returns a value.
func (s *Store) Get(namespace, key string) (string, error) {
	if err := validate(namespace, key); err != nil {
		return "", err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.data[namespace][key]
	if !ok {
		return "", fmt.Errorf("%w: key %q in namespace %q", ErrNotFound, key, namespace)
	}
	return v, nil
}

// Delete removes a key and persists the store. A namespace left empty
// stays, as in RocketMQ's KVConfigManager: a NameServer then lists it as
// {"table":{}}, and brokers clear their topics' order flags from the empty
// ORDER_TOPIC_CONFIG it returns (with no namespace they keep them).
func (s *Store) Delete(namespace, key string) error {
	if err := validate(namespace, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[namespace][key]; !ok {
		return fmt.Errorf("%w: key %q in namespace %q", ErrNotFound, key, namespace)
	}
	next := s.cloneNamespace(namespace)
	delete(next, key)
	return s.commit(namespace, next)
}

// List returns a copy of one namespace.
func (s *Store) List(namespace string) (map[string]string, error) {
	if err := validate(namespace, "-"); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ns, ok := s.data[namespace]
	if !ok {
		return nil, fmt.Errorf("%w: namespace %q", ErrNotFound, namespace)
	}
	return maps.Clone(ns), nil
}

// Namespaces returns the namespace names, sorted.
func (s *Store) Namespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.data))
}

func (s *Store) cloneNamespace(namespace string) map[string]string {
	next := maps.Clone(s.data[namespace])
	if next == nil {
		next = make(map[string]string)
	}
	return next
}

// commit persists the store with namespace replaced by next, then makes it
// current. With mu held.
func (s *Store) commit(namespace string, next map[string]string) error {
	data := maps.Clone(s.data)
	data[namespace] = next
	b, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return fmt.Errorf("encode KV config: %w", err)
	}
	// A change that shrinks the file is always taken, so a KV config over
	// the limit (an older node's) can be cut down.
	if len(b) > MaxTotalLen && len(b) > s.size {
		return fmt.Errorf("%w: the KV config would take %d bytes, over its limit of %d: delete keys first", ErrInvalid, len(b), MaxTotalLen)
	}
	if err := datadir.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("persist KV config: %w", err)
	}
	s.data = data
	s.size = len(b)
	return nil
}

// validate checks names for every operation, not only for the put that
// stores them, so a name no put could have stored is refused (code 1), not
// reported as not found.
func validate(namespace, key string) error {
	switch {
	case namespace == "" || key == "":
		return fmt.Errorf("%w: namespace and key must not be empty", ErrInvalid)
	case len(namespace) > MaxNameLen || len(key) > MaxNameLen:
		return fmt.Errorf("%w: namespace and key are limited to %d bytes", ErrInvalid, MaxNameLen)
	}
	return nil
}
