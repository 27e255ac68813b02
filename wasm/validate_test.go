package wasm

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestValidateShippedModules(t *testing.T) {
	h := newHost(t, HostConfig{})
	tests := []struct {
		file  string
		hooks []Hook
	}{
		{"zone-affinity.wasm", []Hook{HookRouteFilter}},
		// The Go SDK exports every hook; edgereg_hooks narrows them down.
		{"self-preservation.wasm", []Hook{HookExpiryThreshold, HookExpiryConfirm}},
		{"jitter-threshold.wasm", []Hook{HookExpiryThreshold}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m := load(t, h, tt.file)
			if got := m.Hooks(); !slices.Equal(got, tt.hooks) {
				t.Errorf("hooks %v, want %v", got, tt.hooks)
			}
			if len(m.Hash()) != 64 || m.Size() != len(testdata(t, tt.file)) {
				t.Errorf("hash %q size %d", m.Hash(), m.Size())
			}
		})
	}
}

func TestValidateSharesModulesByHash(t *testing.T) {
	h := newHost(t, HostConfig{})
	a := load(t, h, "jitter-threshold.wasm")
	b := load(t, h, "jitter-threshold.wasm")
	if a != b {
		t.Fatal("the same bytes validated twice gave two modules")
	}
	a.Close()
	// b's reference keeps the module usable.
	if _, err := b.ExpiryThreshold(context.Background(), sampleThresholdInput(), 0, 1<<62); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRefuses(t *testing.T) {
	h := newHost(t, HostConfig{MaxModuleSize: 1 << 20})
	tests := []struct {
		name   string
		module []byte
		reason error
	}{
		{"over the size cap", testdata(t, "zone-affinity.wasm"), ErrModuleTooLarge},
		{"not wasm", []byte("\x7fELF not a module"), ErrMalformed},
		{"truncated", testdata(t, "jitter-threshold.wasm")[:100], ErrMalformed},
		{"wrong ABI version", testdata(t, "hostile/abi-version.wasm"), ErrABIVersion},
		{"imports path_open", testdata(t, "hostile/import-path-open.wasm"), ErrForbiddenImport},
		{"imports sock_accept", testdata(t, "hostile/import-sock-accept.wasm"), ErrForbiddenImport},
		{"memory over the cap", testdata(t, "hostile/memory-cap.wasm"), ErrMemory},
		// A route filter that adds a broker on its dry run is caught there;
		// this one only does so later, see TestHostileAtRunTime.
		{"bad output on the dry run", wat(t, badDryRun), ErrDryRun},
		{"no hook", wat(t, noHook), ErrNoHooks},
		{"wrong hook signature", wat(t, badSignature), ErrExport},
		{"imports from env", wat(t, envImport), ErrForbiddenImport},
		// ABI.md allows function imports only; these were refused by the
		// dry run's instantiation failing, not as forbidden imports.
		{"imports a global", wat(t, `(module (import "wasi_snapshot_preview1" "g" (global i32)) `+abiPrelude+`
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007)))`), ErrForbiddenImport},
		{"imports a table", wat(t, `(module (import "wasi_snapshot_preview1" "t" (table 1 funcref)) `+abiPrelude+`
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007)))`), ErrForbiddenImport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.module == nil {
				t.Skip("wat2wasm not installed (apt-get install wabt)")
			}
			m, err := h.Validate(context.Background(), tt.module)
			if err == nil {
				m.Close()
				t.Fatal("accepted")
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, tt.reason) {
				t.Fatalf("err = %v, want a ValidationError for %v", err, tt.reason)
			}
			t.Log(err)
		})
	}
	// Refusals leave nothing behind and the host keeps working.
	if n := len(h.modules); n != 0 {
		t.Errorf("%d modules kept after refusals", n)
	}
	load(t, h, "jitter-threshold.wasm")
}

func TestAllowedImportsCoverGoGuests(t *testing.T) {
	// What `GOOS=wasip1 go build -buildmode=c-shared` imports for a guest
	// using fmt and os (listed with wasm-objdump), and nothing that opens
	// a file or a socket.
	want := []string{"args_get", "args_sizes_get", "clock_time_get", "environ_get", "environ_sizes_get",
		"fd_close", "fd_fdstat_get", "fd_fdstat_set_flags", "fd_prestat_dir_name", "fd_prestat_get",
		"fd_write", "poll_oneoff", "proc_exit", "random_get", "sched_yield"}
	if got := AllowedImports(); !slices.Equal(got, want) {
		t.Errorf("allow-list %v, want %v", got, want)
	}
}
