package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
)

// Compilation in a child process.
//
// The structural limits (structure.go) bound what a module can make the
// compiler do, but not exactly: a body under the size limit can still be
// expensive in ways no cheap static check predicts. So Host.Validate
// compiles a module first in a child process of the same binary, under an
// address-space limit (RLIMIT_AS, set by the child on itself) and a time
// limit (the parent kills it), and the child fills the on-disk compilation
// cache that the node's own runtime then loads. A module that makes the
// child run out of memory or time is refused; the node never compiled it.
//
// The child is the same executable started with childEnv set; the
// package's init function notices and runs the compilation instead of the
// program, so every binary that links this package (edgereg, and the test
// binaries of every package that uses it) can act as the child without
// changes to its main or TestMain.

const (
	childEnv       = "EDGEREG_WASM_COMPILE_CHILD" // set to the cache directory
	childPagesEnv  = "EDGEREG_WASM_COMPILE_PAGES"
	childMemoryEnv = "EDGEREG_WASM_COMPILE_MEMORY"
	childSizeEnv   = "EDGEREG_WASM_COMPILE_MAX_SIZE"

	// childExitInvalid is the child's exit code when wazero refused the
	// module; its message is on stderr.
	childExitInvalid = 3
	// childExitSetup is the child's exit code when it could not start.
	childExitSetup = 4
)

// Defaults of HostConfig's compilation limits.
const (
	// DefaultCompileMemory bounds what compiling one module may add to the
	// child's address space. Compiling the 2 MB shipped Go modules needs
	// under 200 MiB (TestIsolatedCompileOfShippedModule).
	DefaultCompileMemory = 1 << 30
	// DefaultCompileTimeout bounds compiling one module.
	DefaultCompileTimeout = 60 * time.Second
	// DefaultMaxCompiledSize bounds the machine code of one module. The
	// shipped 2 MB Go modules compile to 7.6 MB.
	DefaultMaxCompiledSize = 32 << 20
)

func init() {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runCompileChild(dir))
	}
}

// runtimeConfig is the runtime configuration of both the node and the
// compile child: wazero keys its cache by the module and by whether
// instances close on a done context, so both must agree.
//
// DWARF is not read (wazero reads it by default): it named the source
// line of each frame of a trap, by decoding the whole line program of the
// compilation unit on the first trap and keeping it with the module, off
// the call's deadline. Trap messages keep their first line only, so no one
// saw those lines; a 3.9 MB module of one-byte line rows made one trap
// take 3.4 s, +1.6 GiB of RSS and +477 MiB of live heap kept
// (TestDebugInfoNotRead).
func runtimeConfig(pages uint32, cache wazero.CompilationCache) wazero.RuntimeConfig {
	return wazero.NewRuntimeConfig().
		WithDebugInfoEnabled(false).
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(pages).
		WithCompilationCache(cache)
}

// runCompileChild compiles the module on stdin into the cache in dir.
func runCompileChild(dir string) int {
	pages, _ := strconv.ParseUint(os.Getenv(childPagesEnv), 10, 32)
	budget, _ := strconv.ParseInt(os.Getenv(childMemoryEnv), 10, 64)
	maxSize, _ := strconv.ParseInt(os.Getenv(childSizeEnv), 10, 64)
	if pages == 0 || budget <= 0 || maxSize <= 0 {
		fmt.Fprintln(os.Stderr, "compile child: missing limits")
		return childExitSetup
	}
	if err := limitAddressSpace(budget * raceFactor); err != nil {
		fmt.Fprintln(os.Stderr, "compile child:", err)
		return childExitSetup
	}
	debug.SetMemoryLimit(budget / 2)
	module, err := io.ReadAll(io.LimitReader(os.Stdin, maxSize+1))
	if err != nil || int64(len(module)) > maxSize {
		fmt.Fprintln(os.Stderr, "compile child: cannot read the module")
		return childExitSetup
	}
	if _, ve := checkStructure(module, Limits{}); ve != nil && !errors.Is(ve, ErrLimit) {
		// The parent checked with its own limits already; this only keeps
		// the decoder away from bytes that are not a module at all.
		fmt.Fprintln(os.Stderr, ve.Detail)
		return childExitInvalid
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compile child:", err)
		return childExitSetup
	}
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig(uint32(pages), cache))
	if _, err := rt.CompileModule(ctx, module); err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		fmt.Fprintln(os.Stderr, msg)
		if isFileError(err) {
			// The cache could not be written (a full disk): the
			// module is not at fault, and must not be remembered as
			// refused.
			return childExitSetup
		}
		return childExitInvalid
	}
	_ = rt.Close(ctx)
	_ = cache.Close(ctx)
	return 0
}

// compileIsolated compiles module (the bytes wazero gets, with the
// hash of the module they come from) in a child process into the host's
// compilation cache, so that the node's own compilation is a cache load.
// A module the child could not compile within its limits is refused.
func (h *Host) compileIsolated(ctx context.Context, hash string, module []byte) error {
	if h.cfg.CompileInProcess {
		return nil
	}
	marker := h.compiledMarker(module)
	if _, err := os.Stat(marker); err == nil {
		return nil // compiled by an earlier child; wazero's cache has it
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("compile policy module in a child process: %w", err)
	}
	// The child compiles into a cache of its own, so what it wrote is
	// exactly this module's code: measured, then moved into the shared
	// cache, or thrown away.
	own, err := os.MkdirTemp(h.cacheDir, childCacheDirPrefix)
	if err != nil {
		return fmt.Errorf("compile policy module in a child process: %w", err)
	}
	defer os.RemoveAll(own)
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CompileTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe)
	cmd.Env = append(os.Environ(),
		childEnv+"="+own,
		childPagesEnv+"="+strconv.FormatUint(uint64(h.cfg.MaxMemoryPages), 10),
		childMemoryEnv+"="+strconv.FormatInt(h.cfg.CompileMemory, 10),
		childSizeEnv+"="+strconv.Itoa(h.cfg.MaxModuleSize),
	)
	if raceChildOptions != "" {
		cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" "+raceChildOptions))
	}
	cmd.Stdin = bytes.NewReader(module)
	stderr := &cappedBuffer{max: 4096}
	cmd.Stderr = stderr
	cmd.WaitDelay = time.Second
	start := time.Now()
	h.childRuns.Add(1)
	err = cmd.Run()
	took := time.Since(start)
	msg := lastLine(stderr.String())
	switch {
	case err == nil:
		if err := h.adoptCompiled(hash, own); err != nil {
			return err
		}
		_ = os.MkdirAll(filepath.Dir(marker), 0o700)
		_ = os.WriteFile(marker, nil, 0o600)
		peak := childPeakRSS(cmd)
		h.childPeak.Store(peak)
		h.log.Debug("policy module compiled in a child process", "hash", hash, "took", took, "peak_rss_bytes", peak)
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("compile policy module %.12s: %w", hash, ctx.Err())
	case cctx.Err() != nil:
		return refuse(hash, ErrLimit, "compilation took longer than %v (compile time limit)", h.cfg.CompileTimeout)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case childExitInvalid:
			return refuse(hash, ErrMalformed, "%s", msg)
		case childExitSetup:
			return fmt.Errorf("compile policy module %.12s in a child process: %s", hash, msg)
		}
	}
	return refuse(hash, ErrLimit, "compilation exceeded its memory limit of %s (compile memory limit): %v: %s",
		sizeOf(h.cfg.CompileMemory), err, msg)
}

// sizeOf says n bytes in MiB, or in KiB below 1 MiB, which >>20 would
// call 0 MiB.
func sizeOf(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// isFileError says whether err is a file system failure (writing or
// reading the compilation cache) rather than wazero refusing the module.
func isFileError(err error) bool {
	var pe *fs.PathError
	var le *os.LinkError
	return errors.As(err, &pe) || errors.As(err, &le)
}

// compiledMarker is the path of the marker saying that module (the bytes
// wazero compiles) is in the host's compilation cache: wazero's cache is
// keyed by those bytes, so the marker is.
func (h *Host) compiledMarker(module []byte) string {
	sum := sha256.Sum256(module)
	return filepath.Join(h.cacheDir, compiledMarkerDir(), hex.EncodeToString(sum[:]))
}

// isCacheDamage reports whether err is wazero's complaint about an entry
// of the compilation cache it could not read back (cut short, checksum
// mismatch): wazero says so only in the text, as "compilationcache: ...".
func isCacheDamage(err error) bool {
	return strings.Contains(err.Error(), "compilationcache:")
}

// recompile compiles module (the bytes wazero gets) again into a cache
// directory of its own and moves the result over the damaged entry in the
// host's cache: in a child process, as compileIsolated does, or in this
// one with CompileInProcess.
func (h *Host) recompile(ctx context.Context, hash string, module []byte) error {
	if !h.cfg.CompileInProcess {
		_ = os.Remove(h.compiledMarker(module))
		return h.compileIsolated(ctx, hash, module)
	}
	own, err := os.MkdirTemp(h.cacheDir, childCacheDirPrefix)
	if err != nil {
		return fmt.Errorf("compile policy module %.12s: %w", hash, err)
	}
	defer os.RemoveAll(own)
	cache, err := wazero.NewCompilationCacheWithDir(own)
	if err != nil {
		return fmt.Errorf("compile policy module %.12s: %w", hash, err)
	}
	defer cache.Close(ctx)
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig(h.cfg.MaxMemoryPages, cache))
	_, err = rt.CompileModule(ctx, module)
	_ = rt.Close(ctx)
	if err != nil {
		if isFileError(err) {
			return fmt.Errorf("compile policy module %.12s: %w", hash, err)
		}
		return refuse(hash, ErrMalformed, "%v", err)
	}
	return h.adoptCompiled(hash, own)
}

// childCacheDirPrefix names the compile children's own cache directories
// in the host's cache directory; NewHost removes those a crash left.
const childCacheDirPrefix = ".compile-"

// adoptCompiled moves what a compile child wrote to its own cache, dir,
// into the host's cache, unless the module's machine code is over
// MaxCompiledSize: the node maps all of it for as long as it keeps the
// module, and some instructions compile to ~45 bytes of code per byte.
func (h *Host) adoptCompiled(hash, dir string) error {
	var size int64
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size += info.Size()
		files = append(files, path)
		return nil
	})
	if err == nil && len(files) == 0 {
		err = errors.New("it holds nothing") // the node would compile the module itself
	}
	if err != nil {
		return fmt.Errorf("compile policy module %.12s: read the child's cache: %w", hash, err)
	}
	if size > h.cfg.MaxCompiledSize {
		return refuse(hash, ErrLimit, "compiled code size: %s, limit is %s (compiled size limit)",
			sizeOf(size), sizeOf(h.cfg.MaxCompiledSize))
	}
	for _, src := range files {
		rel, err := filepath.Rel(dir, src)
		if err != nil {
			return fmt.Errorf("compile policy module %.12s: %w", hash, err)
		}
		dst := filepath.Join(h.cacheDir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return fmt.Errorf("compile policy module %.12s: %w", hash, err)
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("compile policy module %.12s: %w", hash, err)
		}
	}
	return nil
}

// removeChildCaches removes compile children's cache directories left in
// dir by a node that stopped while compiling: those older than age, since
// another host may share the directory and be compiling now.
func removeChildCaches(dir string, age time.Duration) {
	left, _ := filepath.Glob(filepath.Join(dir, childCacheDirPrefix+"*"))
	for _, d := range left {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > age {
			_ = os.RemoveAll(d)
		}
	}
}

// compiledMarkerDir names the directory of markers for modules already in
// wazero's cache, per wazero version and platform: another wazero keeps
// another cache.
func compiledMarkerDir() string {
	v := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				v = d.Version
			}
		}
	}
	return "edgereg-compiled-" + v + "-" + runtime.GOOS + "-" + runtime.GOARCH
}

// cappedBuffer keeps the first max bytes written to it: the Go runtime
// says why it died before its goroutine dump.
type cappedBuffer struct {
	max int
	buf []byte
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *cappedBuffer) String() string { return string(b.buf) }

// lastLine returns the child's reason: the Go runtime's fatal error, or
// the first line it wrote.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(l, "fatal error:") {
			return l // the Go runtime's reason, e.g. out of memory
		}
	}
	l, _, _ := strings.Cut(s, "\n")
	return l
}
