;; Hostile: an expiry threshold of 1 ms, outside the documented range
;; [10 s, 10 min]: a failed call (not clamped), so refused at upload.
(module
  (memory (export "memory") 8)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param $size i32) (result i32)
    (if (result i32) (i32.gt_u (local.get $size) (i32.const 60000))
      (then (i32.const 0)) (else (i32.const 1024))))
  (func (export "edgereg_free") (param i32 i32))
  (data (i32.const 64) "\a1\01\01")
  (func (export "edgereg_expiry_threshold") (param i32 i32) (result i64)
    (i64.const 0x0000004000000003))
)
