;; Hostile: a route filter answering {} — no route key. ABI.md says such an
;; output is a failed call, so the dry run refuses it at upload.
(module
  (memory (export "memory") 8)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param $size i32) (result i32)
    (if (result i32) (i32.gt_u (local.get $size) (i32.const 60000))
      (then (i32.const 0)) (else (i32.const 1024))))
  (func (export "edgereg_free") (param i32 i32))
  (data (i32.const 64) "\a0")
  (func (export "edgereg_route_filter") (param i32 i32) (result i64)
    (i64.const 0x0000004000000001))
)
