package wasm

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ReadDir reads a policy directory, such as a mounted Kubernetes ConfigMap,
// and returns the module bytes for each hook it names.
//
// The naming rule: a file named <hooks>.wasm, or <hooks>.wasm.gz for a
// gzip-compressed module (a Go module is about 2 MB, over a ConfigMap's
// 1 MiB limit; compressed it is about a quarter of that), where <hooks> is
// one hook name or several joined by "_". A hook name is its short name
// (route, expiry, confirm) or its full name (route-filter,
// expiry-threshold, expiry-confirm); so route.wasm, expiry.wasm.gz and
// expiry_confirm.wasm.gz are all valid. Names starting with "." (the
// ConfigMap's own ..data links) and files with other extensions are
// ignored; an unknown hook name, or a hook named by two files, is an error
// (and a hook named by two files is left out of the result).
func ReadDir(dir string, maxSize int) (map[Hook][]byte, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read policy directory: %w", err)
	}
	out := map[Hook][]byte{}
	var errs []error
	// A hook named by two files gets neither: which one the operator
	// meant is unknown, so the hook keeps its current policy.
	var dups []Hook
	for _, e := range ents {
		hooks, gz, ok, err := parsePolicyFileName(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		b, err := readPolicyFile(path, gz, maxSize)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, h := range hooks {
			if _, dup := out[h]; dup {
				errs = append(errs, fmt.Errorf("%s: hook %s is named by two files; neither is loaded", path, h))
				dups = append(dups, h)
				continue
			}
			out[h] = b
		}
	}
	for _, h := range dups {
		delete(out, h)
	}
	return out, errors.Join(errs...)
}

// parsePolicyFileName applies ReadDir's naming rule; ok is false for files
// to ignore.
func parsePolicyFileName(name string) (hooks []Hook, gz, ok bool, err error) {
	if strings.HasPrefix(name, ".") {
		return nil, false, false, nil
	}
	base, gz := strings.CutSuffix(name, ".wasm.gz")
	if !gz {
		if base, ok = strings.CutSuffix(name, ".wasm"); !ok {
			return nil, false, false, nil
		}
	}
	for part := range strings.SplitSeq(base, "_") {
		h, err := ParseHook(part)
		if err != nil {
			return nil, gz, true, err
		}
		if !slices.Contains(hooks, h) {
			hooks = append(hooks, h)
		}
	}
	return hooks, gz, true, nil
}

func readPolicyFile(path string, gz bool, maxSize int) ([]byte, error) {
	b, err := readCapped(path, maxSize)
	if err != nil || !gz {
		return b, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Cap the decompressed size too, or a small file could expand without bound.
	out, err := io.ReadAll(io.LimitReader(zr, int64(maxSize)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) > maxSize {
		return nil, refuse("", ErrModuleTooLarge, "%s decompresses to over %d bytes", path, maxSize)
	}
	return out, nil
}

// LoadDir validates the modules of a policy directory (see ReadDir for the
// naming rule) and activates each for the hooks its file names. Hooks with
// no file keep their current policy, so a directory can be combined with
// uploads. A hook whose file holds the module LoadDir last activated for
// it, at every load since, is left alone, whatever happened to the hook
// meanwhile (an operator's push, rollback or removal, a deactivation):
// calling LoadDir again, after the ConfigMap changed or because a file was
// refused, only activates what changed. What LoadDir activated is saved
// in the Store's manifest, so this holds across restarts: LoadDir at
// start does not undo a change made since the file last changed. A bad
// file is reported and skipped; the others are still loaded.
func (s *Set) LoadDir(ctx context.Context, dir string) error {
	mods, err := ReadDir(dir, s.host.cfg.MaxModuleSize)
	if mods == nil {
		return err // the directory itself was not read: no file is known gone
	}
	errs := []error{err}
	for _, h := range Hooks {
		b, ok := mods[h]
		if !ok {
			// A file put back later is a change.
			s.noteDirRefusal(h, "", nil)
			if err := s.setFromDir(h, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s policy from %s: %w", h, dir, err))
			}
			continue
		}
		sum := sha256.Sum256(b)
		hash := hex.EncodeToString(sum[:])
		s.mu.Lock()
		unchanged := s.fromDir[h] == hash
		s.mu.Unlock()
		if unchanged {
			continue
		}
		if err := s.dirBackoff(h, hash); err != nil {
			errs = append(errs, fmt.Errorf("%s policy from %s: %w", h, dir, err))
			continue
		}
		m, err := s.host.Validate(ctx, b)
		if err != nil {
			s.noteDirRefusal(h, hash, err)
			errs = append(errs, fmt.Errorf("%s policy from %s: %w", h, dir, err))
			continue
		}
		s.noteDirRefusal(h, "", nil)
		if err := s.ActivateAs(h, m, Change{Source: dir}); err != nil {
			errs = append(errs, fmt.Errorf("%s policy from %s: %w", h, dir, err))
		} else if err := s.setFromDir(h, hash); err != nil {
			errs = append(errs, fmt.Errorf("%s policy from %s: %w", h, dir, err))
		}
		_ = m.Close()
	}
	return errors.Join(errs...)
}

// Backoff of a policy directory file refused at its dry run.
const (
	dirRetryFirst = 10 * time.Second
	dirRetryMax   = 5 * time.Minute
)

// dirRefusal is a policy directory file refused at its dry run: the same
// bytes are not tried again before next. Dry-run refusals are not
// remembered by the Host (the node's load may have caused them), and one
// of a module that loops in _initialize costs its whole init deadline:
// tried at every 10 s reload, 20% of a core for as long as the file
// stayed (TestLoadDirBacksOffADryRunRefusal).
type dirRefusal struct {
	hash string
	err  error
	next time.Time
	wait time.Duration
}

// dirBackoff returns the earlier refusal of hook h's file while its
// backoff runs and the file holds the same bytes (hash).
func (s *Set) dirBackoff(h Hook, hash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.dirRefused[h]
	if r.hash != hash || !s.cfg.Now().Before(r.next) {
		return nil
	}
	return fmt.Errorf("%w (not tried again before %s, the same file was refused at its dry run)", r.err, r.next.UTC().Format(time.RFC3339))
}

// noteDirRefusal records that hook h's file (hash) was refused by err;
// only a dry-run refusal starts or extends a backoff (other refusals the
// Host remembers itself, and a busy node or a deadline is no refusal).
// hash "" clears the record.
func (s *Set) noteDirRefusal(h Hook, hash string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hash == "" || !errors.Is(err, ErrDryRun) {
		s.dirRefused[h] = dirRefusal{}
		return
	}
	r := &s.dirRefused[h]
	wait := dirRetryFirst
	if r.hash == hash {
		wait = min(2*r.wait, dirRetryMax)
	}
	*r = dirRefusal{hash: hash, err: err, next: s.cfg.Now().Add(wait), wait: wait}
}

// ForgetDir forgets which modules a policy directory gave the hooks, as
// LoadDir of a directory holding no file would, and saves that: a node
// started without --policy-dir calls it, so that a directory given again
// later is a change for every file in it.
func (s *Set) ForgetDir() error {
	var errs []error
	for _, h := range Hooks {
		errs = append(errs, s.setFromDir(h, ""))
	}
	return errors.Join(errs...)
}

// setFromDir records hash as the module the policy directory gave hook h
// ("" for none) and saves it with the Store's manifest, so that a restart
// knows it too.
func (s *Set) setFromDir(h Hook, hash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.fromDir[h]
	if prev == hash {
		return nil
	}
	s.fromDir[h] = hash
	if err := s.persist(numHooks, nil, nil); err != nil {
		s.fromDir[h] = prev
		return err
	}
	return nil
}
