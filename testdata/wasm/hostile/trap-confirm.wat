;; Hostile: an expiry confirm hook that passes the dry run (keeping every due
;; lease), then traps on every real call. What the due leases get is the
;; confirm hook's fail mode (--policy-confirm-failure): closed holds them
;; back, open removes them all.
(module
  (memory (export "memory") 1)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param $size i32) (result i32)
    (if (result i32) (i32.gt_u (local.get $size) (i32.const 60000))
      (then (i32.const 0)) (else (i32.const 1024))))
  (func (export "edgereg_free") (param i32 i32))
  ;; $dry tells the host's dry run from real calls: every sample input
  ;; holds the sample rand 0x9e3779b97f4a7c15 (CBOR big-endian bytes).
  (func $dry (param $p i32) (param $n i32) (result i32)
    (local $i i32)
    (block $no
      (loop $scan
        (br_if $no (i32.gt_s (i32.add (local.get $i) (i32.const 8)) (local.get $n)))
        (if (i64.eq (i64.load (i32.add (local.get $p) (local.get $i))) (i64.const 0x157c4a7fb979379e))
          (then (return (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (i32.const 0))
  ;; {1: []}: remove none.
  (data (i32.const 80) "\a1\01\80")
  (func (export "edgereg_expiry_confirm") (param $p i32) (param $n i32) (result i64)
    (if (call $dry (local.get $p) (local.get $n)) (then (return (i64.const 0x0000005000000003))))
    (unreachable))
)
