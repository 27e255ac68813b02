package wire

import (
	"errors"
	"fmt"
)

// Code is a numeric error code carried on the wire. The table is part of
// the protocol (PROTOCOL.md); never reuse a number.
type Code uint16

// Error codes.
const (
	CodeBadRequest     Code = 1  // malformed frame or CBOR, or invalid arguments
	CodeFrameTooLarge  Code = 2  // a frame exceeds the limit for the sender's role
	CodeUnknownType    Code = 3  // the message type is not known to this node
	CodeNotAuthorized  Code = 4  // the sender's role may not do this
	CodeNotFound       Code = 5  // topic, cluster, broker group or key not found
	CodeWarmingUp      Code = 6  // the node started recently and may not know yet
	CodeLeaseNotFound  Code = 7  // the broker has no lease: register in full
	CodeStaleEpoch     Code = 8  // the frame names an epoch that is not current
	CodeStaleState     Code = 9  // a newer registration holds this broker id
	CodeConflict       Code = 10 // e.g. a broker group registered in another cluster
	CodeNotGroupLeader Code = 11 // topic config from a broker that is not (acting) master
	CodeOverloaded     Code = 12 // a limit was reached: retry later or elsewhere
	CodeInternal       Code = 13 // a bug or an I/O failure on the node
	CodeUnavailable    Code = 14 // the node is shutting down: use another
	CodeTimeout        Code = 15 // the request took too long
)

var codeNames = map[Code]string{
	CodeBadRequest: "bad request", CodeFrameTooLarge: "frame too large",
	CodeUnknownType: "unknown message type", CodeNotAuthorized: "not authorized",
	CodeNotFound: "not found", CodeWarmingUp: "warming up", CodeLeaseNotFound: "lease not found",
	CodeStaleEpoch: "stale epoch", CodeStaleState: "stale state", CodeConflict: "conflict",
	CodeNotGroupLeader: "not group leader", CodeOverloaded: "overloaded",
	CodeInternal: "internal error", CodeUnavailable: "unavailable", CodeTimeout: "timeout",
}

// String names the code.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code %d", uint16(c))
}

// Error is an error as a node sends it: a code a program branches on and a
// message a person can act on.
type Error struct {
	Code    Code   `cbor:"1,keyasint"`
	Message string `cbor:"2,keyasint,omitempty"`
}

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error returns the message, or the code's name when there is none.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Message
}

// Is matches errors by code, so errors.Is(err, wire.ErrNotFound) holds for
// any not-found error whatever its message.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t != nil && t.Code == e.Code
}

// Sentinels to branch on with errors.Is; they match any *Error of their code.
var (
	ErrBadRequest     = &Error{Code: CodeBadRequest}
	ErrFrameTooLarge  = &Error{Code: CodeFrameTooLarge}
	ErrUnknownType    = &Error{Code: CodeUnknownType}
	ErrNotAuthorized  = &Error{Code: CodeNotAuthorized}
	ErrNotFound       = &Error{Code: CodeNotFound}
	ErrWarmingUp      = &Error{Code: CodeWarmingUp}
	ErrLeaseNotFound  = &Error{Code: CodeLeaseNotFound}
	ErrStaleEpoch     = &Error{Code: CodeStaleEpoch}
	ErrStaleState     = &Error{Code: CodeStaleState}
	ErrConflict       = &Error{Code: CodeConflict}
	ErrNotGroupLeader = &Error{Code: CodeNotGroupLeader}
	ErrOverloaded     = &Error{Code: CodeOverloaded}
	ErrInternal       = &Error{Code: CodeInternal}
	ErrUnavailable    = &Error{Code: CodeUnavailable}
	ErrTimeout        = &Error{Code: CodeTimeout}
)
