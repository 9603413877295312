//! Products of small f32 matrices on the calling thread, for the kernels
//! that run one task per head (attention, the chunkwise delta rule): register
//! tiles run them several times faster than rows of dot products or `axpy`s,
//! in one canonical order per output whatever the shape.

use crate::simd::{on_widest_vectors, Isa};

/// `room` cut into parts of the given lengths, each starting on a 64-byte
/// line: the products' vector loads then do not split cache lines.
pub(crate) fn split<const N: usize>(room: &mut [f32], lens: [usize; N]) -> [&mut [f32]; N] {
    let off = room.as_ptr().align_offset(64).min(16);
    let mut rest = &mut room[off..];
    lens.map(|len| {
        let (part, tail) = std::mem::take(&mut rest).split_at_mut(len.next_multiple_of(16));
        rest = tail;
        &mut part[..len]
    })
}

/// Floats of a buffer that [`split`] cuts into parts of `lens`.
pub(crate) fn room_len(lens: &[usize]) -> usize {
    lens.iter().map(|p| p.next_multiple_of(16)).sum::<usize>() + 16
}

/// `dst[c·dst_stride + r] = src[r·src_stride + c]` for `r < rows`,
/// `c < cols`, in 16 × 16 blocks: reads and writes then each touch only 16
/// cache lines at a time (a plain double loop writes a line per element).
pub(crate) fn transpose(
    src: &[f32],
    src_stride: usize,
    (rows, cols): (usize, usize),
    dst: &mut [f32],
    dst_stride: usize,
) {
    const B: usize = 16;
    for r0 in (0..rows).step_by(B) {
        for c0 in (0..cols).step_by(B) {
            let c1 = (c0 + B).min(cols);
            for r in r0..(r0 + B).min(rows) {
                let s = &src[r * src_stride + c0..r * src_stride + c1];
                for (i, &v) in s.iter().enumerate() {
                    dst[(c0 + i) * dst_stride + r] = v;
                }
            }
        }
    }
}

/// `out[t·ldo + j] = Σ_c a[t·lda + c] · b[c·ldb + j]` for `t < m`, `c < kk`,
/// `j < p`: rows of `b` scaled and added into register tiles of 4 rows × 32
/// columns, so neither factor is transposed and no output needs a
/// horizontal sum (which the dot-product form of [`product`] pays per
/// output — most of its time when `kk` is 64 or 128). Each output is one
/// chain of fused multiply-adds in `c` order from 0; a fused multiply-add
/// is exactly rounded, so every path (vector instructions or `mul_add` in
/// scalar code) and every tiling gives the same bits.
pub(crate) fn product_nn(
    isa: Isa,
    a: (&[f32], usize),
    b: (&[f32], usize),
    dims: (usize, usize, usize),
    out: (&mut [f32], usize),
) {
    product_nn_into(isa, a, b, dims, out, false)
}

/// [`product_nn`] added into `out`: each output's chain of fused
/// multiply-adds starts from its value in `out` instead of 0 (a kernel
/// that accumulates needs no buffer of partial products, nor a pass to add
/// it), then `+ 0.0`: a zero result is +0, so trailing terms that add ±0
/// (weights of 0) never change an output's bits.
pub(crate) fn product_nn_add(
    isa: Isa,
    a: (&[f32], usize),
    b: (&[f32], usize),
    dims: (usize, usize, usize),
    out: (&mut [f32], usize),
) {
    product_nn_into(isa, a, b, dims, out, true)
}

fn product_nn_into(
    isa: Isa,
    a: (&[f32], usize),
    b: (&[f32], usize),
    (m, kk, p): (usize, usize, usize),
    out: (&mut [f32], usize),
    add: bool,
) {
    let ((a, lda), (b, ldb), (out, ldo)) = (a, b, out);
    if m == 0 || p == 0 {
        return;
    }
    assert!(lda >= kk && ldb >= p && ldo >= p);
    assert!(a.len() >= (m - 1) * lda + kk && out.len() >= (m - 1) * ldo + p);
    assert!(kk == 0 || b.len() >= (kk - 1) * ldb + p);
    // The largest tile whose accumulators stay in registers: 8 × 32 is 16
    // zmm; with 16 ymm registers 6 × 16 (12 accumulators) — 8 × 32 there
    // spilled every accumulator to the stack (~2× slower GDN and attention
    // products on the AVX2 class).
    let big = if isa.wide() { (8, 32) } else { (6, 16) };
    on_widest_vectors!(isa, (a: &[f32] = a, lda: usize = lda, b: &[f32] = b, ldb: usize = ldb,
    s: (Dims, (usize, usize), bool) = ((m, kk, p), big, add), out: &mut [f32] = out,
    ldo: usize = ldo) => {
        if s.2 {
            nn_body::<true>(a, lda, b, ldb, s.0, out, ldo, s.1)
        } else {
            nn_body::<false>(a, lda, b, ldb, s.0, out, ldo, s.1)
        }
    });
    if add {
        nn_body::<true>(a, lda, b, ldb, (m, kk, p), out, ldo, big)
    } else {
        nn_body::<false>(a, lda, b, ldb, (m, kk, p), out, ldo, big)
    }
}

/// `(m, kk, p)` of a [`product_nn`].
type Dims = (usize, usize, usize);

/// The tile length for `left` rows or columns: `big`, `small`, or 1 (the
/// tile shapes `nn_body` has kernels for).
#[inline(always)]
fn tile_len(left: usize, big: usize, small: usize) -> usize {
    if left >= big {
        big
    } else if left >= small {
        small
    } else {
        1
    }
}

/// The rows of the next tile when `left` remain and the biggest tile has
/// `big`: as [`tile_len`], except that a big tile which would leave 2 or 3
/// rows (single-row tiles, each output one FMA chain at the FMA's latency)
/// gives way to a tile of 4: the 8 rows of a decode step's attention scores
/// (one position × a group of 8 heads) run as 4 + 4, not 6 + 1 + 1.
#[inline(always)]
fn row_tile(left: usize, big: usize) -> usize {
    if left >= big && big > 4 && (2..4).contains(&(left - big)) {
        4
    } else {
        tile_len(left, big, 4)
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn nn_body<const ADD: bool>(
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    (m, kk, p): Dims,
    out: &mut [f32],
    ldo: usize,
    (rows, cols): (usize, usize),
) {
    // Column strips outside, row tiles inside: a strip of `b` (kk × 32
    // values) is read from L1 by every row tile, where the other order
    // streamed the whole of `b` from L2 for each tile of 4 rows.
    let mut j0 = 0;
    while j0 < p {
        let w = tile_len(p - j0, cols, 16);
        let mut t0 = 0;
        while t0 < m {
            let r = row_tile(m - t0, rows);
            let at = &a[t0 * lda..];
            let bt = &b[j0..];
            let ot = &mut out[t0 * ldo + j0..];
            match (r, w) {
                (8, 32) => nn_tile::<8, 32, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (8, 16) => nn_tile::<8, 16, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (8, _) => nn_tile::<8, 1, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (6, 16) => nn_tile::<6, 16, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (6, _) => nn_tile::<6, 1, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (4, 32) => nn_tile::<4, 32, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (4, 16) => nn_tile::<4, 16, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (4, _) => nn_tile::<4, 1, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (_, 32) => nn_tile::<1, 32, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                (_, 16) => nn_tile::<1, 16, ADD>(at, lda, bt, ldb, kk, ot, ldo),
                _ => nn_tile::<1, 1, ADD>(at, lda, bt, ldb, kk, ot, ldo),
            }
            t0 += r;
        }
        j0 += w;
    }
}

/// One `R × W` tile of [`product_nn`], its accumulators in registers.
#[inline(always)]
fn nn_tile<const R: usize, const W: usize, const ADD: bool>(
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    kk: usize,
    out: &mut [f32],
    ldo: usize,
) {
    // One check per tile instead of one per load: with indexed loads the
    // bounds checks of the R + 1 reads per `c` outnumbered the vector
    // instructions (~45 instructions per 12 FMAs on AVX2's 6 × 16 tile).
    assert!(kk == 0 || (a.len() >= (R - 1) * lda + kk && b.len() >= (kk - 1) * ldb + W));
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut acc = [[0f32; W]; R];
    if ADD {
        for (r, acc) in acc.iter_mut().enumerate() {
            acc.copy_from_slice(&out[r * ldo..r * ldo + W]);
        }
    }
    for c in 0..kk {
        // SAFETY: c < kk and r < R: inside `a` and `b` by the check above.
        let brow: &[f32; W] = unsafe { &*bp.add(c * ldb).cast::<[f32; W]>() };
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = unsafe { *ap.add(r * lda + c) };
            for (o, &bv) in acc.iter_mut().zip(brow) {
                *o = av.mul_add(bv, *o);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        let o = &mut out[r * ldo..r * ldo + W];
        if ADD {
            o.iter_mut().zip(acc).for_each(|(o, &a)| *o = a + 0.0);
        } else {
            o.copy_from_slice(acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_nn_is_the_product_with_the_same_bits_in_any_tile() {
        for isa in Isa::available() {
            check_product_nn(isa, 7, 37, 53);
            check_product_nn(isa, 13, 9, 40);
            check_product_nn(isa, 10, 5, 33);
            // 4 + 4 and 4 + 4 + 1 row tiles on AVX2.
            check_product_nn(isa, 8, 256, 64);
            check_product_nn(isa, 9, 31, 48);
        }
    }

    /// Every output of an `m × kk × p` product on `isa` is one fused chain
    /// in `c` order from 0.
    fn check_product_nn(isa: Isa, m: usize, kk: usize, p: usize) {
        let val = |i: usize| ((i * 7919) % 1000) as f32 / 500.0 - 1.0;
        let a: Vec<f32> = (0..m * kk).map(val).collect();
        let b: Vec<f32> = (0..kk * p).map(|i| val(i + 17)).collect();
        let mut out = vec![0f32; m * p];
        product_nn(isa, (&a, kk), (&b, p), (m, kk, p), (&mut out, p));
        let mut added: Vec<f32> = (0..m * p).map(|i| val(i + 5)).collect();
        product_nn_add(isa, (&a, kk), (&b, p), (m, kk, p), (&mut added, p));
        for t in 0..m {
            for j in 0..p {
                // One fused chain in c order: what the contract says.
                let want = (0..kk).fold(0f32, |s, c| a[t * kk + c].mul_add(b[c * p + j], s));
                // Added into `out`: the chain starts from its value, and
                // ends with + 0.0.
                let start = val(t * p + j + 5);
                let chain = (0..kk).fold(start, |s, c| a[t * kk + c].mul_add(b[c * p + j], s));
                assert_eq!(
                    added[t * p + j].to_bits(),
                    (chain + 0.0).to_bits(),
                    "{isa:?} add ({t}, {j})"
                );
                assert_eq!(
                    out[t * p + j].to_bits(),
                    want.to_bits(),
                    "{isa:?} ({t}, {j})"
                );
                // A 1 × 1 product over a strided column gives the same.
                let col: Vec<f32> = (0..kk).map(|c| b[c * p + j]).collect();
                let mut one = [0f32];
                product_nn(
                    isa,
                    (&a[t * kk..], kk),
                    (&col, 1),
                    (1, kk, 1),
                    (&mut one, 1),
                );
                assert_eq!(one[0].to_bits(), want.to_bits());
            }
        }
    }
}
