;; Hostile: imports wasi_snapshot_preview1.sock_accept, which is not on the allow-list. Refused at validation.
(module
  (import "wasi_snapshot_preview1" "sock_accept" (func $sock_accept (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "edgereg_free") (param i32 i32))
  (data (i32.const 64) "\a1\01\a2\01\80\02\80")
  (func (export "edgereg_route_filter") (param i32 i32) (result i64) (i64.const 0x0000004000000007))
)
