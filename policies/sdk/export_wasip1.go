//go:build wasip1

package sdk

import "unsafe"

// The ABI's exports. Buffers handed to the host are kept in pinned until
// the host frees them: the Go heap does not move objects, so a pinned
// slice's address stays valid, and keeping it referenced keeps the
// collector from reusing it.

var pinned = map[uint32][]byte{}

func pin(b []byte) uint32 {
	p := uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	pinned[p] = b
	return p
}

//go:wasmexport edgereg_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport edgereg_hooks
func hooks() int32 { return int32(Registered()) }

//go:wasmexport edgereg_alloc
func alloc(size int32) int32 {
	if size < 0 {
		return 0
	}
	return int32(pin(make([]byte, max(size, 1))))
}

//go:wasmexport edgereg_free
func free(ptr, _ int32) { delete(pinned, uint32(ptr)) }

//go:wasmexport edgereg_route_filter
func routeFilterExport(ptr, n int32) int64 { return call(HookRouteFilter, ptr, n) }

//go:wasmexport edgereg_expiry_threshold
func expiryThresholdExport(ptr, n int32) int64 { return call(HookExpiryThreshold, ptr, n) }

//go:wasmexport edgereg_expiry_confirm
func expiryConfirmExport(ptr, n int32) int64 { return call(HookExpiryConfirm, ptr, n) }

// call runs a hook on the input at ptr. A handler's error or panic becomes
// the ABI's error result (-1) rather than a trap, so the host gets a clean
// error; it discards the instance either way.
func call(h Hook, ptr, n int32) (res int64) {
	defer func() {
		if recover() != nil {
			res = -1
		}
	}()
	in, ok := pinned[uint32(ptr)]
	if !ok || n < 0 || int(n) > len(in) {
		return -1
	}
	out, err := Handle(h, in[:n])
	if err != nil || len(out) == 0 {
		return -1
	}
	return int64(pin(out))<<32 | int64(len(out))
}
