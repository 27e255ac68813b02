package wire

import (
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Decoding limits. Every CBOR value that crosses the network or a policy
// boundary is decoded with these bounds, so a hostile peer cannot make the
// decoder allocate or recurse without limit.
const (
	// MaxNestingLevel bounds how deep arrays and maps may nest.
	MaxNestingLevel = 16
	// MaxArrayElements bounds the length of any one CBOR array.
	MaxArrayElements = 1 << 20
	// MaxMapPairs bounds the size of any one CBOR map.
	MaxMapPairs = 1 << 20
)

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	encOpts := cbor.CoreDetEncOptions()
	encOpts.Time = cbor.TimeUnix
	// An absent list or map is sent as an empty one, never as null, so
	// clients in other languages meet one shape per field.
	encOpts.NilContainers = cbor.NilContainerAsEmpty
	encMode, err = encOpts.EncMode()
	if err != nil {
		panic(fmt.Sprintf("wire: build CBOR encode mode: %v", err))
	}
	decMode, err = cbor.DecOptions{
		// Duplicate keys are refused by checkDupKeys, at every depth,
		// after decoding: the library's own check keeps every unknown
		// key of a struct's map in a set, many times the keys' bytes.
		DupMapKey:        cbor.DupMapKeyQuiet,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		MaxNestedLevels:  MaxNestingLevel,
		MaxArrayElements: MaxArrayElements,
		MaxMapPairs:      MaxMapPairs,
		UTF8:             cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(fmt.Sprintf("wire: build CBOR decode mode: %v", err))
	}
}

// Marshal encodes v as core deterministic CBOR: equal values give equal bytes.
func Marshal(v any) ([]byte, error) { return encMode.Marshal(v) }

// Unmarshal decodes CBOR data into v with the package's decoding limits:
// duplicate map keys (at any depth, inside unknown fields and embedded
// items too), indefinite lengths and tags are errors. Unknown fields are
// ignored, so a newer peer may add optional fields (see PROTOCOL.md).
func Unmarshal(data []byte, v any) error {
	if err := decMode.Unmarshal(data, v); err != nil {
		return err
	}
	return checkDupKeys(data)
}

// unmarshalFrame is Unmarshal for a Frame map, whose body DecodeBody
// checks. It is the reference for the hand-written decodeFrameFast and
// decides every frame that one declines.
func unmarshalFrame(data []byte, f *Frame) error {
	if err := decMode.Unmarshal(data, f); err != nil {
		return err
	}
	return checkFrameKeys(data)
}
