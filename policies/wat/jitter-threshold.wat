;; jitter-threshold: an expiry threshold policy written by hand in
;; WebAssembly text, to show that the edgereg ABI (wasm/ABI.md, version 1)
;; needs nothing from Go: it walks the CBOR input to two fields and writes
;; a CBOR answer.
;;
;;   threshold_ms = default_ms + 4 * stats.jitter_ms
;;
;; so a broker whose heartbeats arrive irregularly gets more slack, and a
;; regular one keeps the node's default. The answer is clamped to the
;; range the input gives (min_ms, max_ms; [10 s, 10 min] when absent): the
;; host counts an answer outside it as a failed call.
;;
;; Memory layout: the answer is written at 64; the input buffer starts at
;; 1024. One instance serves one call at a time and the host frees both
;; buffers after each call, so fixed buffers are all the allocator needs.
(module
  (memory (export "memory") 1)

  (global $pos (mut i32) (i32.const 0))   ;; read/write cursor
  (global $end (mut i32) (i32.const 0))   ;; end of the input
  (global $bad (mut i32) (i32.const 0))   ;; set on malformed input
  (global $major (mut i32) (i32.const 0)) ;; major type of the last head

  (func (export "edgereg_abi_version") (result i32) (i32.const 1))

  ;; edgereg_alloc returns the input buffer, growing memory to fit it.
  (func (export "edgereg_alloc") (param $size i32) (result i32)
    (local $need i32)
    (if (i32.lt_s (local.get $size) (i32.const 0)) (then (return (i32.const 0))))
    (local.set $need
      (i32.shr_u (i32.add (i32.add (local.get $size) (i32.const 1024)) (i32.const 65535)) (i32.const 16)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $need) (memory.size))) (i32.const -1))
          (then (return (i32.const 0))))))
    (i32.const 1024))

  (func (export "edgereg_free") (param i32 i32))

  ;; $byte reads one input byte; past the end it flags $bad and reads 0.
  (func $byte (result i32)
    (local $b i32)
    (if (i32.ge_u (global.get $pos) (global.get $end))
      (then (global.set $bad (i32.const 1)) (return (i32.const 0))))
    (local.set $b (i32.load8_u (global.get $pos)))
    (global.set $pos (i32.add (global.get $pos) (i32.const 1)))
    (local.get $b))

  ;; $head reads an item's initial byte and returns its argument; the
  ;; major type goes to $major. Indefinite lengths are malformed here.
  (func $head (result i64)
    (local $c i32) (local $info i32) (local $n i32) (local $v i64)
    (local.set $c (call $byte))
    (global.set $major (i32.shr_u (local.get $c) (i32.const 5)))
    (local.set $info (i32.and (local.get $c) (i32.const 31)))
    (if (i32.lt_u (local.get $info) (i32.const 24))
      (then (return (i64.extend_i32_u (local.get $info)))))
    (if (i32.gt_u (local.get $info) (i32.const 27))
      (then (global.set $bad (i32.const 1)) (return (i64.const 0))))
    (local.set $n (i32.shl (i32.const 1) (i32.sub (local.get $info) (i32.const 24))))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $v (i64.or (i64.shl (local.get $v) (i64.const 8))
                              (i64.extend_i32_u (call $byte))))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
    (local.get $v))

  ;; $uint reads an unsigned integer.
  (func $uint (result i64)
    (local $v i64)
    (local.set $v (call $head))
    (if (i32.ne (global.get $major) (i32.const 0)) (then (global.set $bad (i32.const 1))))
    (local.get $v))

  ;; $skip skips one item of any type, nesting at most 16 deep.
  (func $skip (param $depth i32)
    (local $arg i64) (local $m i32)
    (if (i32.gt_u (local.get $depth) (i32.const 16))
      (then (global.set $bad (i32.const 1)) (return)))
    (local.set $arg (call $head))
    (local.set $m (global.get $major))
    (if (global.get $bad) (then (return)))
    ;; byte and text strings: skip their content
    (if (i32.or (i32.eq (local.get $m) (i32.const 2)) (i32.eq (local.get $m) (i32.const 3)))
      (then
        (if (i64.gt_u (local.get $arg)
                      (i64.extend_i32_u (i32.sub (global.get $end) (global.get $pos))))
          (then (global.set $bad (i32.const 1)) (return)))
        (global.set $pos (i32.add (global.get $pos) (i32.wrap_i64 (local.get $arg))))
        (return)))
    ;; a map has twice as many items as pairs
    (if (i32.eq (local.get $m) (i32.const 5))
      (then (local.set $arg (i64.shl (local.get $arg) (i64.const 1)))))
    (if (i32.or (i32.eq (local.get $m) (i32.const 4)) (i32.eq (local.get $m) (i32.const 5)))
      (then
        (block $done
          (loop $next
            (br_if $done (i64.eqz (local.get $arg)))
            (br_if $done (global.get $bad))
            (call $skip (i32.add (local.get $depth) (i32.const 1)))
            (local.set $arg (i64.sub (local.get $arg) (i64.const 1)))
            (br $next)))
        (return)))
    ;; a tag is followed by one item; integers and simple values are all head
    (if (i32.eq (local.get $m) (i32.const 6))
      (then (call $skip (i32.add (local.get $depth) (i32.const 1))))))

  ;; $find expects a map at $pos and leaves $pos at the value of integer
  ;; key $key, returning 1; it returns 0 if the key is absent.
  (func $find (param $key i64) (result i32)
    (local $n i64) (local $k i64)
    (local.set $n (call $head))
    (if (i32.ne (global.get $major) (i32.const 5))
      (then (global.set $bad (i32.const 1)) (return (i32.const 0))))
    (block $done
      (loop $next
        (br_if $done (i64.eqz (local.get $n)))
        (br_if $done (global.get $bad))
        (local.set $k (call $head))
        (if (i32.and (i32.eqz (global.get $major)) (i64.eq (local.get $k) (local.get $key)))
          (then (return (i32.const 1))))
        (call $skip (i32.const 0))
        (local.set $n (i64.sub (local.get $n) (i64.const 1)))
        (br $next)))
    (i32.const 0))

  ;; $put writes one byte of output.
  (func $put (param $b i32)
    (i32.store8 (global.get $pos) (local.get $b))
    (global.set $pos (i32.add (global.get $pos) (i32.const 1))))

  ;; $putUint writes an unsigned integer in its shortest form.
  (func $putUint (param $v i64)
    (local $n i32)
    (if (i64.lt_u (local.get $v) (i64.const 24))
      (then (call $put (i32.wrap_i64 (local.get $v))) (return)))
    (if (i64.le_u (local.get $v) (i64.const 0xff))
      (then (call $put (i32.const 0x18)) (local.set $n (i32.const 1)))
      (else
        (if (i64.le_u (local.get $v) (i64.const 0xffff))
          (then (call $put (i32.const 0x19)) (local.set $n (i32.const 2)))
          (else
            (if (i64.le_u (local.get $v) (i64.const 0xffffffff))
              (then (call $put (i32.const 0x1a)) (local.set $n (i32.const 4)))
              (else (call $put (i32.const 0x1b)) (local.set $n (i32.const 8))))))))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (call $put (i32.wrap_i64 (i64.shr_u (local.get $v)
                                            (i64.extend_i32_u (i32.shl (local.get $n) (i32.const 3))))))
        (br $next))))

  ;; edgereg_expiry_threshold: input {1: broker, 2: stats {.., 4: jitter_ms, ..},
  ;; 3: default_ms, ..}; output {1: threshold_ms}.
  (func (export "edgereg_expiry_threshold") (param $ptr i32) (param $len i32) (result i64)
    (local $def i64) (local $jitter i64) (local $t i64) (local $lo i64) (local $hi i64)
    (global.set $bad (i32.const 0))
    (global.set $end (i32.add (local.get $ptr) (local.get $len)))
    ;; default_ms
    (global.set $pos (local.get $ptr))
    (if (i32.eqz (call $find (i64.const 3))) (then (return (i64.const -1))))
    (local.set $def (call $uint))
    ;; stats.jitter_ms (absent means 0)
    (global.set $pos (local.get $ptr))
    (if (i32.eqz (call $find (i64.const 2))) (then (return (i64.const -1))))
    (if (call $find (i64.const 4)) (then (local.set $jitter (call $uint))))
    (if (global.get $bad) (then (return (i64.const -1))))
    (local.set $t (i64.add (local.get $def) (i64.mul (local.get $jitter) (i64.const 4))))
    ;; min_ms and max_ms
    (local.set $lo (i64.const 10000))
    (local.set $hi (i64.const 600000))
    (global.set $pos (local.get $ptr))
    (if (call $find (i64.const 6)) (then (local.set $lo (call $uint))))
    (global.set $pos (local.get $ptr))
    (if (call $find (i64.const 7)) (then (local.set $hi (call $uint))))
    (if (global.get $bad) (then (return (i64.const -1))))
    (if (i64.lt_u (local.get $t) (local.get $lo)) (then (local.set $t (local.get $lo))))
    (if (i64.gt_u (local.get $t) (local.get $hi)) (then (local.set $t (local.get $hi))))
    ;; {1: t} at 64
    (global.set $pos (i32.const 64))
    (call $put (i32.const 0xa1))
    (call $put (i32.const 0x01))
    (call $putUint (local.get $t))
    (i64.or (i64.shl (i64.const 64) (i64.const 32))
            (i64.extend_i32_u (i32.sub (global.get $pos) (i32.const 64)))))
)
