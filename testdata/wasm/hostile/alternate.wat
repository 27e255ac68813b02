;; Hostile: passes the dry run, then traps on every other call: never five
;; failures in a row, so only the failure-rate rule deactivates it.
(module
  (memory (export "memory") 8)
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  (func (export "edgereg_alloc") (param $size i32) (result i32)
    (if (result i32) (i32.gt_u (local.get $size) (i32.const 60000))
      (then (i32.const 0)) (else (i32.const 1024))))
  (func (export "edgereg_free") (param i32 i32))
  (global $calls (mut i32) (i32.const 0))
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
  ;; {1: {1: [], 2: []}}: an empty route.
  (data (i32.const 64) "\a1\01\a2\01\80\02\80")
  (func (export "edgereg_route_filter") (param $p i32) (param $n i32) (result i64)
    (if (call $dry (local.get $p) (local.get $n)) (then (return (i64.const 0x0000004000000007))))
    ;; A trap discards the instance, so a fresh one (calls = 0) answers
    ;; the next call and the one after traps again.
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.eq (global.get $calls) (i32.const 2)) (then unreachable))
    (i64.const 0x0000004000000007))
)
