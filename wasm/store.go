package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/edgereg/edgereg/wire/datadir"
)

// manifestName is the manifest's file name in a Store's directory.
const manifestName = "manifest.json"

// Store keeps the active policies of a node in a directory, conventionally
// <data>/policies/: each module as <sha256>.wasm and a manifest.json that
// names, per hook, the active module, the last known good one and when the
// active one was activated. Every file is written atomically (temporary
// file, fsync, rename, fsync of the directory), so a crash leaves either
// the old state or the new one.
type Store struct {
	dir string
}

// Manifest is the content of manifest.json.
type Manifest struct {
	// Version is the manifest format, 1.
	Version int `json:"version"`
	// Hooks maps a hook name (route-filter, ...) to its state.
	Hooks map[string]ManifestEntry `json:"hooks"`
}

// ManifestEntry is one hook's saved state.
type ManifestEntry struct {
	Active      string    `json:"active,omitempty"`
	LastGood    string    `json:"last_good,omitempty"`
	ActivatedAt time.Time `json:"activated_at,omitzero"`
	// Proven names the modules of Active and LastGood that had answered
	// real calls well when the manifest was saved: only those are restored
	// automatically when the active module fails.
	Proven []string `json:"proven,omitempty"`
	// FromDir is the module the policy directory (--policy-dir) last
	// activated for the hook, while its file has stayed there: a file
	// still holding it is not activated again, at a reload or a start, so
	// a push, rollback or rm made since survives a restart.
	FromDir string `json:"from_dir,omitempty"`
}

// OpenStore opens (creating if needed) a store in dir.
func OpenStore(dir string) (*Store, error) {
	if err := datadir.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open policy store: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's directory.
func (st *Store) Dir() string { return st.dir }

// Load reads the manifest; a store never saved to has an empty one.
func (st *Store) Load() (Manifest, error) {
	man := Manifest{Version: 1, Hooks: map[string]ManifestEntry{}}
	b, err := os.ReadFile(filepath.Join(st.dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return man, nil
	}
	if err != nil {
		return man, fmt.Errorf("load policy manifest: %w", err)
	}
	path := filepath.Join(st.dir, manifestName)
	// Never guessed around: the manifest is what an operator pushed.
	const remedy = "restore it from a backup, or move it aside to start with the built-in behaviour on every hook and push the policies again"
	if err := json.Unmarshal(b, &man); err != nil {
		return man, fmt.Errorf("load policy manifest %s: %w: the file is damaged; %s", path, err, remedy)
	}
	if man.Version != 1 {
		return man, fmt.Errorf("load policy manifest %s: format version %d, want 1 (written by another edgereg?); %s", path, man.Version, remedy)
	}
	if man.Hooks == nil {
		man.Hooks = map[string]ManifestEntry{}
	}
	return man, nil
}

// Module reads the saved module with the hash, checking that its bytes
// still hash to it.
func (st *Store) Module(hash string) ([]byte, error) {
	if !validHash(hash) {
		return nil, fmt.Errorf("load policy module: invalid hash %q", hash)
	}
	b, err := os.ReadFile(filepath.Join(st.dir, hash+".wasm"))
	if err != nil {
		return nil, fmt.Errorf("load policy module: %w", err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hash {
		return nil, fmt.Errorf("load policy module %s: content does not match its hash", hash)
	}
	return b, nil
}

// Save writes the modules the manifest names that are not saved yet, then
// the manifest, then removes modules it no longer names.
func (st *Store) Save(man Manifest, modules map[string][]byte) error {
	keep := map[string]bool{}
	for _, e := range man.Hooks {
		for _, h := range []string{e.Active, e.LastGood} {
			if h == "" || keep[h] {
				continue
			}
			keep[h] = true
			if err := st.saveModule(h, modules[h]); err != nil {
				return err
			}
		}
	}
	b, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return fmt.Errorf("save policy manifest: %w", err)
	}
	if err := datadir.WriteFile(filepath.Join(st.dir, manifestName), b, 0o600); err != nil {
		return fmt.Errorf("save policy manifest: %w", err)
	}
	return st.prune(keep)
}

// saveModule writes a module unless its file already holds exactly its
// bytes: a file that exists may be torn or corrupt (it is then refused at
// restore), and pushing the module again must repair it.
func (st *Store) saveModule(hash string, b []byte) error {
	path := filepath.Join(st.dir, hash+".wasm")
	if b == nil {
		// A module not restored yet, saved as it was: its file is
		// there, or its restore fails and says so.
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(b)) {
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, b) {
			return nil
		}
	}
	if err := datadir.WriteFile(filepath.Join(st.dir, hash+".wasm"), b, 0o600); err != nil {
		return fmt.Errorf("save policy module: %w", err)
	}
	return nil
}

// prune removes saved modules that keep does not name; failures only
// leave garbage behind, so they are not errors.
func (st *Store) prune(keep map[string]bool) error {
	ents, err := os.ReadDir(st.dir)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".wasm")
		if ok && validHash(name) && !keep[name] {
			_ = os.Remove(filepath.Join(st.dir, e.Name()))
		}
	}
	return nil
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// persist saves the Set's state as it will be once slot h holds nb and
// lastGood (h == numHooks: as it is, for a change of s.fromDir only).
// With s.mu held; a no-op without a Store.
func (s *Set) persist(h Hook, nb *binding, lastGood *Module) error {
	st := s.cfg.Store
	if st == nil {
		return nil
	}
	man := Manifest{Version: 1, Hooks: map[string]ManifestEntry{}}
	mods := map[string][]byte{}
	for _, hk := range Hooks {
		b, lg := s.slots[hk].active.Load(), s.slots[hk].lastGood
		switch {
		case hk == h:
			b, lg = nb, lastGood
		case s.pending[hk] != nil: // not restored yet: saved as it was
			e := *s.pending[hk]
			e.FromDir = s.fromDir[hk]
			man.Hooks[hk.String()] = e
			continue
		}
		var e ManifestEntry
		if b != nil {
			e.Active, e.ActivatedAt = b.module.hash, b.activatedAt.UTC()
			mods[b.module.hash] = b.module.bytes
			if s.proven(hk, b.module) {
				e.Proven = append(e.Proven, b.module.hash)
			}
		}
		if lg != nil {
			e.LastGood = lg.hash
			mods[lg.hash] = lg.bytes
			if s.proven(hk, lg) && !slices.Contains(e.Proven, lg.hash) {
				e.Proven = append(e.Proven, lg.hash)
			}
		}
		e.FromDir = s.fromDir[hk]
		if e.Active != "" || e.LastGood != "" || e.FromDir != "" {
			man.Hooks[hk.String()] = e
		}
	}
	return st.Save(man, mods)
}

// saved reads the store's manifest and marks every hook it names as
// pending: until a hook is restored, changes of other hooks save its
// entry as it was. Before, such a change saved the manifest without it
// and pruned its files (TestStoreKeepsModulesRestoredLate). It also
// takes back what the policy directory last gave each hook (FromDir).
func (s *Set) saved(st *Store) (Manifest, error) {
	man, err := st.Load()
	if err != nil {
		return man, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range man.Hooks {
		if h, err := ParseHook(name); err == nil {
			s.pending[h] = &e
			s.fromDir[h] = e.FromDir
		}
	}
	return man, nil
}

// restore activates what the manifest names. The modules are validated
// (compiled) without holding s.mu, so the Set serves calls and changes
// meanwhile; a hook an operator changed during the restore keeps the
// operator's choice.
func (s *Set) restore(ctx context.Context, st *Store, man Manifest) {
	for name, e := range man.Hooks {
		h, err := ParseHook(name)
		if err != nil {
			s.log.Warn("saved policy skipped", "hook", name, "err", err)
			continue
		}
		lg, lgGone, lgErr := s.restoreModule(ctx, st, h, e.LastGood)
		m, mGone, mErr := s.restoreModule(ctx, st, h, e.Active)
		s.install(h, e, m, lg, errors.Join(mErr, lgErr))
		if (lgGone || mGone) && ctx.Err() == nil {
			s.dropMissing(h, e, mGone, lgGone)
		}
	}
}

// dropMissing removes from hook h's saved state the modules whose files
// are gone: nothing can bring such a module back but pushing it again
// (which saves it anew), so it is logged once, here, and not tried at
// every later start. Before, the hook failed its restore at every start
// until an operator changed it (TestMissingSavedModuleDroppedOnce).
func (s *Set) dropMissing(h Hook, e ManifestEntry, active, lastGood bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []string
	if active {
		gone = append(gone, e.Active)
	}
	if lastGood {
		gone = append(gone, e.LastGood)
	}
	if p := s.pending[h]; p != nil { // nothing restored: keep what may be, next time
		kept := *p
		if active {
			kept.Active, kept.ActivatedAt = "", time.Time{}
		}
		if lastGood {
			kept.LastGood = ""
		}
		kept.Proven = slices.DeleteFunc(slices.Clone(kept.Proven), func(x string) bool { return slices.Contains(gone, x) })
		s.pending[h] = &kept
		if kept.Active == "" && kept.LastGood == "" {
			s.pending[h] = nil
		}
	}
	if slices.Contains(gone, s.fromDir[h]) {
		s.fromDir[h] = "" // the directory's file, if still there, is activated again
	}
	err := s.persist(numHooks, nil, nil)
	s.log.Error("saved policy dropped: its module file is missing", "hook", h.String(), "hashes", gone,
		"dir", s.cfg.Store.Dir(), "saved", err == nil)
}

// install puts restored modules (each with a reference it takes over) in
// slot h, unless the slot changed since the Set started; failed says why
// what is missing of them could not be restored.
func (s *Set) install(h Hook, e ManifestEntry, m, lg *Module, failed error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := &s.slots[h]
	if m == nil && lg == nil && s.pending[h] != nil {
		// Nothing could be restored (logged): the entry stays saved as
		// it was, to be tried again at the next start, until the hook
		// changes. Before, the next change of any hook dropped it and
		// its files (TestStoreKeepsModulesNotRestored). List says why,
		// or policy ls showed the hook as built-in with no word of it.
		if failed != nil {
			s.restoreErr[h] = failed.Error()
		}
		return
	}
	s.pending[h] = nil
	if s.closed.Load() || sl.active.Load() != nil || sl.lastGood != nil {
		for _, mod := range []*Module{m, lg} {
			if mod != nil {
				_ = mod.Close()
			}
		}
		if !s.closed.Load() {
			s.log.Info("saved policy not restored: the hook was changed meanwhile", "hook", h.String())
		}
		return
	}
	if lg != nil {
		sl.lastGood = lg
		s.record(h, lg).proven = slices.Contains(e.Proven, lg.hash)
	}
	if m != nil {
		at := e.ActivatedAt
		if at.IsZero() {
			at = s.cfg.Now()
		}
		b := s.bindingOf(h, m, at)
		b.record.proven = slices.Contains(e.Proven, m.hash)
		sl.active.Store(b)
		s.memo.clear()
		s.changed(h)
		s.log.Info("policy restored", "hook", h.String(), "hash", m.hash)
	}
}

// restoreModule loads and validates one saved module, returning it with a
// reference the caller keeps, or nil (logged, with why as err) when it
// cannot be used; gone reports that its file does not exist (dropMissing
// logs that).
func (s *Set) restoreModule(ctx context.Context, st *Store, h Hook, hash string) (m *Module, gone bool, err error) {
	if hash == "" {
		return nil, false, nil
	}
	b, err := st.Module(hash)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	if err == nil {
		if m, err = s.host.Validate(ctx, b); err == nil {
			if m.Implements(h) {
				return m, false, nil
			}
			_ = m.Close()
			err = ErrHookAbsent
		}
	}
	if ctx.Err() != nil {
		return nil, false, nil // the Set is closing (a start that failed): nothing was lost
	}
	s.log.Error("saved policy not restored", "hook", h.String(), "hash", hash, "err", err)
	return nil, false, fmt.Errorf("module %.12s: %w", hash, err)
}
