;; Hostile: writes 256 KiB to stdout and to stderr on every call, then
;; answers an empty route. The host discards the bytes and counts them.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 8)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param $size i32) (result i32)
    (if (result i32) (i32.gt_u (local.get $size) (i32.const 60000))
      (then (i32.const 0)) (else (i32.const 1024))))
  (func (export "edgereg_free") (param i32 i32))
  ;; {1: {1: [], 2: []}}: an empty route.
  (data (i32.const 64) "\a1\01\a2\01\80\02\80")
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    ;; iovec at 0: 256 KiB from 65536.
    (i32.store (i32.const 0) (i32.const 65536))
    (i32.store (i32.const 4) (i32.const 262144))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 16)))
    (i64.const 0x0000004000000007))
)
