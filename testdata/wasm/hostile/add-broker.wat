;; Hostile: passes the dry run, then answers a route with a broker group the input did not have. Contained by the host's subset check.
(module

  (memory (export "memory") 1)
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
  ;; {1: {1: [], 2: []}}: an empty route, a valid answer to any route filter call.
  (data (i32.const 64) "\a1\01\a2\01\80\02\80")
  (func $empty (result i64) (i64.const 0x0000004000000007))
  (func (export "edgereg_abi_version") (result i32) (i32.const 1))
  ;; {1: {1: [{1: "evil", 2: 8, 3: 8, 4: 6}], 2: [{1: "c", 2: "evil", 4: {0: "6.6.6.6:1"}}]}}
  (data (i32.const 256) "\a1\01\a2\01\81\a4\01\64evil\02\08\03\08\04\06\02\81\a3\01\61c\02\64evil\04\a1\00\69\36\2e\36\2e\36\2e\36\3a\31")
  (func (export "edgereg_route_filter") (param $p i32) (param $n i32) (result i64)
    (if (call $dry (local.get $p) (local.get $n)) (then (return (call $empty))))
    (i64.const 0x000001000000002b))
)
