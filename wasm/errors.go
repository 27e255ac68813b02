package wasm

import (
	"errors"
	"fmt"
)

// Reasons a module is refused by Host.Validate. A *ValidationError wraps
// exactly one of them; test with errors.Is.
var (
	ErrModuleTooLarge  = errors.New("module exceeds the size cap")
	ErrMalformed       = errors.New("module is not valid WebAssembly")
	ErrForbiddenImport = errors.New("module imports something outside the allow-list")
	ErrExport          = errors.New("module exports do not match the ABI")
	ErrABIVersion      = errors.New("module implements an unsupported ABI version")
	ErrMemory          = errors.New("module memory is outside the cap")
	ErrNoHooks         = errors.New("module implements no hook")
	ErrDryRun          = errors.New("module failed its dry run")
)

// Errors of a policy call. Set turns every one of them into a fallback to
// the built-in behaviour; Module's direct call methods return them wrapped.
var (
	ErrTimeout = errors.New("policy call exceeded its deadline")
	// ErrBusy wraps ErrTimeout when no instance became free before the
	// deadline: the pool is saturated, the module is not at fault.
	ErrBusy = fmt.Errorf("%w: no free instance", ErrTimeout)
	// ErrStarved is a call that found no instance because the module's own
	// failed calls discarded every instance of its pool and the
	// replacements are not ready yet: unlike ErrBusy, the module's failure.
	ErrStarved = errors.New("no instance: the module's failed calls discarded every one")
	ErrTrap    = errors.New("policy call trapped")
	// ErrStackOverflow wraps ErrTrap when the guest overflowed wazero's call
	// stack: such a call costs about 100 MB and runs past its deadline, so
	// one deactivates the module.
	ErrStackOverflow = fmt.Errorf("%w: stack overflow", ErrTrap)
	ErrGuest         = errors.New("policy reported an error")
	ErrBadOutput     = errors.New("policy output is invalid")
	ErrHookAbsent    = errors.New("module does not implement the hook")
	// ErrBadInput is a call the host did not make because its input is over
	// a cap (client labels): a fallback, not the module's failure.
	ErrBadInput = errors.New("policy input over a cap")
	// ErrBudget is a call the host did not make because the request's
	// budget of policy time was spent (WithReadBudget): a fallback, not
	// the module's failure.
	ErrBudget = errors.New("the request's policy budget is spent")
	// ErrFailedClosed is what RouteFilter returns, wrapping the cause, when
	// the route policy could not answer and the hook fails closed: the
	// caller answers the topic with an error rather than a route.
	ErrFailedClosed = errors.New("route policy could not answer (fail-closed)")
	ErrClosed       = errors.New("closed")
)

// Errors of Set operations.
var (
	// ErrNoLastGood is returned by Rollback when there is nothing to go back to.
	ErrNoLastGood = errors.New("no last known good policy")
	// ErrUnknownHook is returned when a hook name or number is not one of the ABI's.
	ErrUnknownHook = errors.New("unknown hook")
)

// ValidationError says why Host.Validate refused a module.
type ValidationError struct {
	// Hash is the module's SHA-256 in hex, empty when it was refused before
	// hashing (too large).
	Hash string
	// Reason is one of the Err* refusal sentinels (ErrForbiddenImport, ...).
	Reason error
	// Detail says what exactly was wrong, for a person.
	Detail string
}

// Error implements error.
func (e *ValidationError) Error() string {
	h := e.Hash
	if len(h) > 12 {
		h = h[:12]
	}
	if h == "" {
		return fmt.Sprintf("policy module refused: %v: %s", e.Reason, e.Detail)
	}
	return fmt.Sprintf("policy module %s refused: %v: %s", h, e.Reason, e.Detail)
}

// Unwrap returns the Reason, so errors.Is(err, ErrForbiddenImport) works.
func (e *ValidationError) Unwrap() error { return e.Reason }

func refuse(hash string, reason error, format string, args ...any) *ValidationError {
	return &ValidationError{Hash: hash, Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
