;; Airlock's reset helper: restores the all-zero pages of a VM's image by checking them first.
;; A page that an execution never wrote is only read (reading evicts nothing dirty and leaves the cache clean);
;; one that it did write is filled with zeros. The check is exact, so the memory ends equal to the image.
;; src/engine/wasm/zero-pages.ts embeds the assembled bytes; test/zero-pages.test.ts assembles this file with wabt and
;; compares.
(module
  (import "vm" "memory" (memory 0))
  ;; Zeroes every 4 KiB page of [from, to) that is not all zero; from and to are multiples of 4096.
  ;; Returns the number of pages written.
  (func (export "zeroPages") (param $from i32) (param $to i32) (result i32)
    (local $p i32) (local $end i32) (local $acc v128) (local $written i32)
    (block $done
      (loop $pages
        (br_if $done (i32.ge_u (local.get $from) (local.get $to)))
        (local.set $p (local.get $from))
        (local.set $end (i32.add (local.get $from) (i32.const 4096)))
        (local.set $acc (v128.const i64x2 0 0))
        (loop $lines
          (local.set $acc
            (v128.or (local.get $acc)
              (v128.or
                (v128.or (v128.load offset=0 (local.get $p)) (v128.load offset=16 (local.get $p)))
                (v128.or (v128.load offset=32 (local.get $p)) (v128.load offset=48 (local.get $p))))))
          (local.set $p (i32.add (local.get $p) (i32.const 64)))
          (br_if $lines (i32.lt_u (local.get $p) (local.get $end))))
        (if (v128.any_true (local.get $acc))
          (then
            (memory.fill (local.get $from) (i32.const 0) (i32.const 4096))
            (local.set $written (i32.add (local.get $written) (i32.const 1)))))
        (local.set $from (local.get $end))
        (br $pages)))
    (local.get $written)))
