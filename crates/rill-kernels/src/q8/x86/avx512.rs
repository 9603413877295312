//! The AVX-512 kernels (BW; VNNI's `vpdpwssd` / `vpdpbusd` when `VNNI`):
//! 64-value vectors, the (row, token) pairs of the K encodings in the 16
//! lanes of one vector. See the parent module for the plan and the bounds.

// Index loops mirror the lanes and rows they compute.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{
    block_bytes, block_scales, dx4, halves, nib_levels, prefetch, q80_finish, q80_quants, q80_rest,
    quants_at, sums32, to_partials, Toks, K4_IDX, Q6_IDX,
};

/// Insert `x` as 128-bit chunk `r` of `v`.
#[inline(always)]
pub(super) unsafe fn ins128(v: __m512i, x: __m128i, r: usize) -> __m512i {
    match r {
        0 => _mm512_inserti32x4::<0>(v, x),
        1 => _mm512_inserti32x4::<1>(v, x),
        2 => _mm512_inserti32x4::<2>(v, x),
        _ => _mm512_inserti32x4::<3>(v, x),
    }
}

#[inline(always)]
pub(super) unsafe fn bc512(v: __m128i) -> __m512i {
    _mm512_broadcast_i32x4(v)
}

/// `acc + Σ pairs a·b` (i16 × i16 → i32 per lane pair).
#[inline(always)]
pub(super) unsafe fn dot16<const VNNI: bool>(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    if VNNI {
        dpwssd(acc, a, b)
    } else {
        _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
    }
}

/// `vpdpwssd` written out: through the intrinsic, LLVM splits many of
/// them into `vpmaddwd` + `vpaddd` (one more instruction each; the 4-token
/// kernels ran ~10% slower).
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: registers only; the caller's CPU has AVX-512 VNNI.
    std::arch::asm!(
        "vpdpwssd {acc}, {a}, {b}",
        acc = inout(zmm_reg) acc,
        a = in(zmm_reg) a,
        b = in(zmm_reg) b,
        options(pure, nomem, nostack),
    );
    acc
}

/// Four vectors → chunk `r` holds 4 i32 lanes summing to `Σ a[r]`.
#[inline(always)]
pub(super) unsafe fn fold4(a: [__m512i; 4]) -> __m512i {
    let half = |x, y| {
        _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0x4E>(x, y),
            _mm512_mask_blend_epi64(0xF0, x, y),
        )
    };
    let (e01, e23) = (half(a[0], a[1]), half(a[2], a[3]));
    _mm512_add_epi32(
        _mm512_shuffle_i64x2::<0x88>(e01, e23),
        _mm512_shuffle_i64x2::<0xDD>(e01, e23),
    )
}

/// Four vectors of per-chunk partials → lane `4c + t` = the sum of chunk
/// `c` of `f[t]`.
#[inline(always)]
pub(super) unsafe fn tsum4(f: [__m512i; 4]) -> __m512i {
    let pair = |x, y| _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
    let (s01, s23) = (pair(f[0], f[1]), pair(f[2], f[3]));
    _mm512_add_epi32(
        _mm512_unpacklo_epi64(s01, s23),
        _mm512_unpackhi_epi64(s01, s23),
    )
}

/// Per-(row, token) accumulators `acc[r][t]` → lane `4r + t` = its sum.
#[inline(always)]
pub(super) unsafe fn reduce_pairs<const R: usize, const T: usize>(
    acc: &[[__m512i; T]; R],
) -> __m512i {
    let z = _mm512_setzero_si512();
    tsum4(arr!(4, |t| if t < T {
        fold4(arr!(4, |r| if r < R { acc[r][t] } else { z }))
    } else {
        z
    }))
}

/// Pair lanes `4r + t` of the f16 values `h` (row r's at word `2r + odd`).
#[inline(always)]
pub(super) unsafe fn row_lanes_z(h: __m128i, odd: i32) -> __m512 {
    let f = _mm512_castps256_ps512(_mm256_cvtph_ps(h));
    let i = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    _mm512_permutexvar_ps(_mm512_add_epi32(i, _mm512_set1_epi32(odd)), f)
}

/// The canonical tree of the 8 partial vectors, lane by lane.
#[inline(always)]
pub(super) unsafe fn tree_z(p: &[__m512; 8]) -> [f32; 16] {
    let a = |i: usize, j: usize| _mm512_add_ps(p[i], p[j]);
    let s = _mm512_add_ps(
        _mm512_add_ps(a(0, 4), a(2, 6)),
        _mm512_add_ps(a(1, 5), a(3, 7)),
    );
    std::mem::transmute::<__m512, [f32; 16]>(s)
}

/// The scales and mins of Q4_K/Q5_K block `b` of rows 0..R, as i16:
/// chunk `r` of `sc` / `mn` is row `r`'s 8 (shared with `kmin_z1`).
#[inline(always)]
pub(super) unsafe fn k4_scales_z<const R: usize>(
    blk: impl Fn(usize) -> *const u8,
) -> (__m512i, __m512i) {
    let z = _mm512_setzero_si512();
    let mut raw = z;
    for r in 0..R {
        raw = ins128(raw, _mm_loadu_si128(blk(r).add(4) as *const __m128i), r);
    }
    let sm = k4_unpack!(
        raw,
        bc512,
        _mm512_shuffle_epi8,
        _mm512_and_si512,
        _mm512_or_si512,
        _mm512_srli_epi16
    );
    (_mm512_unpacklo_epi8(sm, z), _mm512_unpackhi_epi8(sm, z))
}

/// The integer sums `Σ sc·(w·x)` of Q4_K/Q5_K block `b` (quants at
/// `blk(r) + qs_at`, scales `sc` of [`k4_scales_z`]) per (row, token) pair,
/// spread over the lanes of `acc[r][t]` (shared with `kmin_z1`). Chunk by
/// chunk, all rows: the live vectors are the accumulators, one chunk of
/// each token and one row's weights.
#[inline(always)]
pub(super) unsafe fn kmin_dots_z<
    const R: usize,
    const T: usize,
    const Q5: bool,
    const VNNI: bool,
>(
    blk: impl Fn(usize) -> *const u8,
    qs_at: usize,
    sc: __m512i,
    x: &Toks,
    b: usize,
) -> [[__m512i; T]; R] {
    let z = _mm512_setzero_si512();
    let nib = _mm512_set1_epi8(0x0F);
    // Shift the upper 256 bits (the high nibbles' copy) right by 4.
    let shift = _mm512_mask_blend_epi64(0xF0, z, _mm512_set1_epi16(4));
    let mut acc = [[z; T]; R];
    for c in 0..4 {
        let xv: [__m512i; T] = arr!(T, |t| _mm512_loadu_si512(
            x.qs[t].add(256 * b + 64 * c) as *const _
        ));
        for r in 0..R {
            let q = blk(r).add(qs_at + 32 * c);
            let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(q as *const __m256i));
            let mut wv = _mm512_and_si512(_mm512_srlv_epi16(v, shift), nib);
            if Q5 {
                let qh =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(blk(r).add(16) as *const __m256i));
                let bits = _mm512_mask_blend_epi64(
                    0xF0,
                    _mm512_set1_epi8(1 << (2 * c)),
                    _mm512_set1_epi8(1 << (2 * c + 1)),
                );
                let k = _mm512_test_epi8_mask(qh, bits);
                wv = _mm512_mask_add_epi8(wv, k, wv, _mm512_set1_epi8(16));
            }
            let idx = _mm512_loadu_si512(K4_IDX[r][c].as_ptr() as *const _);
            let sv = _mm512_permutexvar_epi16(idx, sc);
            for t in 0..T {
                acc[r][t] = dot16::<VNNI>(acc[r][t], _mm512_maddubs_epi16(wv, xv[t]), sv);
            }
        }
    }
    acc
}

/// Q4_K (`Q5` false) and Q5_K. Per 64-value chunk `c` the weights are
/// `[sub-block 2c | 2c+1]`: run `c` of `qs`, low nibbles then high ones
/// (Q5_K: plus bit `2c` / `2c+1` of `qh` as 16).
#[inline(always)]
pub(super) unsafe fn kmin_z<const R: usize, const T: usize, const Q5: bool, const VNNI: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let (bb, qs_at) = if Q5 { (176, 48) } else { (144, 16) };
    let z = _mm512_setzero_si512();
    let mut p = [_mm512_setzero_ps(); 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * bb);
        prefetch::<R>(w, b * bb, bb);
        let (sc, mn) = k4_scales_z::<R>(blk);
        // m: chunk r of mins · S32 is row r's 4 partials.
        let m = tsum4(arr!(4, |t| if t < T {
            _mm512_madd_epi16(mn, bc512(sums32(x, t, b)))
        } else {
            z
        }));
        let i = reduce_pairs(&kmin_dots_z::<R, T, Q5, VNNI>(blk, qs_at, sc, x, b));
        let h = halves::<R>(blk, true);
        let dx = _mm512_broadcast_f32x4(dx4::<T>(x, b));
        let (d, dmin) = (row_lanes_z(h, 0), row_lanes_z(h, 1));
        p[b % 8] = _mm512_add_ps(p[b % 8], kmin_term_z(d, dmin, dx, i, m));
    }
    tree_z(&p)
}

/// The reference's f32 term of a Q4_K/Q5_K block, lane by lane:
/// `(d·dx)·f(i) − (dmin·dx)·f(m)`.
#[inline(always)]
pub(super) unsafe fn kmin_term_z(
    d: __m512,
    dmin: __m512,
    dx: __m512,
    i: __m512i,
    m: __m512i,
) -> __m512 {
    let ti = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
    let tm = _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(m));
    _mm512_sub_ps(ti, tm)
}

/// Q6_K block `blk`'s 16 sub-block scales as i16 (`sc`) and times −32
/// (`scn`, against the activation sums: the −32 offset of the quants),
/// each in the low 256 bits (shared with `q6k_body_z1`).
#[inline(always)]
pub(super) unsafe fn q6k_scales_z(blk: *const u8) -> (__m512i, __m512i) {
    let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192) as *const __m128i));
    let scn = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16::<5>(sc16));
    (_mm512_zextsi256_si512(sc16), _mm512_zextsi256_si512(scn))
}

/// Q6_K block `blk`'s unsigned quants of 64-value chunk `k` and their
/// scales (from `sc` of [`q6k_scales_z`]) in `vpmaddubsw` / `vpmaddwd`
/// order (shared with `q6k_body_z1`). Chunk `k` lies in half `h = k/2` at
/// offset `64s` (`s = k%2`): low nibbles (s = 0) or high ones of
/// `ql[64h..]`, and bits `4s..4s+1` (lower 32) / `4s+2..4s+3` (upper 32)
/// of `qh[32h..]` as 16·hi. No loops here: the callers' loops over rows
/// and tokens stay as they are written, and so does their code.
#[inline(always)]
pub(super) unsafe fn q6k_chunk_z(blk: *const u8, k: usize, sc: __m512i) -> (__m512i, __m512i) {
    let sv = _mm512_permutexvar_epi16(_mm512_loadu_si512(Q6_IDX[k].as_ptr() as *const _), sc);
    (q6k_quants_z(blk, k), sv)
}

/// Q6_K block `blk`'s unsigned quants of 64-value chunk `k`, in element
/// order (see [`q6k_chunk_z`]).
#[inline(always)]
pub(super) unsafe fn q6k_quants_z(blk: *const u8, k: usize) -> __m512i {
    let (h, s) = (k / 2, k % 2);
    let (nib, hib) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    let half_of = |lo: i16, hi: i16| {
        _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(lo), _mm512_set1_epi16(hi))
    };
    let ql = _mm512_loadu_si512(blk.add(64 * h) as *const _);
    let lo = if s == 0 {
        ql
    } else {
        _mm512_srli_epi16::<4>(ql)
    };
    let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(blk.add(128 + 32 * h) as *const __m256i));
    let hi = if s == 0 {
        _mm512_sllv_epi16(qh, half_of(4, 2))
    } else {
        _mm512_srlv_epi16(qh, half_of(0, 2))
    };
    // (lo & 0x0F) | (hi & 0x30)
    _mm512_ternarylogic_epi32::<0xEA>(lo, nib, _mm512_and_si512(hi, hib))
}

/// Q6_K (chunk work in [`q6k_chunk_z`]). The −32 offset is
/// `−32·Σ sc_j·S16_j`, one more `vpmaddwd` per pair.
#[inline(always)]
pub(super) unsafe fn q6k_z_body<const R: usize, const T: usize, const VNNI: bool>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm512_setzero_si512();
    let mut p = [_mm512_setzero_ps(); 8];
    for b in 0..nb {
        let blk = |r: usize| w.add(r * rb + b * 210);
        prefetch::<R>(w, b * 210, 210);
        let mut acc = [[z; T]; R];
        let mut sc = [z; R];
        for r in 0..R {
            let scn;
            (sc[r], scn) = q6k_scales_z(blk(r));
            for t in 0..T {
                let s16 = _mm512_zextsi256_si512(_mm256_loadu_si256(
                    x.sums[t].add(16 * b) as *const __m256i
                ));
                acc[r][t] = dot16::<VNNI>(acc[r][t], s16, scn);
            }
        }
        // Chunk by chunk, all rows (as Q4_K).
        for k in 0..4 {
            let xv: [__m512i; T] = arr!(T, |t| _mm512_loadu_si512(
                x.qs[t].add(256 * b + 64 * k) as *const _
            ));
            for r in 0..R {
                let (wv, sv) = q6k_chunk_z(blk(r), k, sc[r]);
                for t in 0..T {
                    acc[r][t] = dot16::<VNNI>(acc[r][t], _mm512_maddubs_epi16(wv, xv[t]), sv);
                }
            }
        }
        let i = reduce_pairs(&acc);
        let d = row_lanes_z(halves::<R>(|r| blk(r).add(208), false), 0);
        let dx = _mm512_broadcast_f32x4(dx4::<T>(x, b));
        let t = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
        p[b % 8] = _mm512_add_ps(p[b % 8], t);
    }
    tree_z(&p)
}

/// Four vectors of two blocks' lanes each (`[2k | 2k+1]`, 8 lanes a block)
/// → the sums of blocks 0..7 in the lanes [`Z_ORDER`] says.
#[inline(always)]
unsafe fn reduce_blocks_z(a: [__m512i; 4]) -> __m256i {
    let pair = |x, y| _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
    let (s01, s23) = (pair(a[0], a[1]), pair(a[2], a[3]));
    // Chunk c, lane k: the sum of chunk c of a[k].
    let v = _mm512_add_epi32(
        _mm512_unpacklo_epi64(s01, s23),
        _mm512_unpackhi_epi64(s01, s23),
    );
    // Chunks 0+1 are block 2k, chunks 2+3 block 2k+1.
    let u = _mm512_shuffle_i64x2::<0b11_01_10_00>(v, v);
    _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64::<1>(u))
}

/// The block of each lane of [`reduce_blocks_z`]'s result.
const Z_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

/// Q8_0 on AVX-512, 8 blocks (272 bytes) of a row at a time: 64-value
/// vectors `[block 2k | 2k+1]`, lanes of the tail = the 8 blocks. `NIB`
/// 1 / 2 / 3 / 4: Q4_0 / IQ4_NL / MXFP4 / Q5_0 blocks, widened in registers
/// to the Q8_0 blocks of their levels.
#[inline(always)]
pub(super) unsafe fn q80_z_body<
    const R: usize,
    const T: usize,
    const VNNI: bool,
    const NIB: usize,
>(
    w: *const u8,
    rb: usize,
    x: &Toks,
    nb: usize,
) -> [f32; 16] {
    let z = _mm512_setzero_si512();
    let (b80, ones) = (_mm512_set1_epi8(-128), _mm512_set1_epi16(1));
    let order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    let mut p = [[_mm256_setzero_ps(); T]; R];
    let (bb, nib) = (block_bytes(NIB), _mm512_set1_epi8(0x0F));
    let levels = _mm512_broadcast_i32x4(nib_levels::<NIB>());
    let ng = nb / 8;
    for g in 0..ng {
        prefetch::<R>(w, 8 * bb * g, 8 * bb);
        let mut xs = [[z; 4]; T];
        let mut neg = [[z; 4]; T];
        let mut dx = [_mm256_setzero_ps(); T];
        for t in 0..T {
            for k in 0..4 {
                xs[t][k] = _mm512_loadu_si512(x.qs[t].add(256 * g + 64 * k) as *const _);
                if VNNI {
                    // −128·(sum of each 4 activations): undoes the offset.
                    neg[t][k] = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, b80, xs[t][k]));
                }
            }
            dx[t] = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x.d[t].add(8 * g)), order);
        }
        for r in 0..R {
            let base = w.add(r * rb + 8 * bb * g);
            let d = block_scales::<NIB>(base, bb, Z_ORDER);
            let q = |j: usize| base.add(bb * j + quants_at(NIB));
            let wv: [__m512i; 4] = arr!(4, |k| if NIB == 0 {
                // Block 2k's quants, then block 2k+1's by a masked load (no
                // port-5 insert) from 32 bytes before them.
                _mm512_mask_loadu_epi64(
                    _mm512_castsi256_si512(_mm256_loadu_si256(q(2 * k) as *const __m256i)),
                    0xF0,
                    q(2 * k + 1).sub(32) as *const i64,
                )
            } else if NIB == 4 {
                // Q5_0: each block's levels as AVX2 widens them.
                let blk = |j: usize| base.add(bb * j);
                let lo = q80_quants::<NIB>(blk(2 * k), _mm_setzero_si128());
                let hi = q80_quants::<NIB>(blk(2 * k + 1), _mm_setzero_si128());
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
            } else {
                // [nibbles of 2k | of 2k+1] → [lo 2k, hi 2k, lo 2k+1, hi 2k+1]
                let y = _mm256_loadu2_m128i(q(2 * k + 1) as *const _, q(2 * k) as *const _);
                let y = _mm512_castsi256_si512(y);
                let v =
                    _mm512_inserti64x4::<1>(y, _mm512_castsi512_si256(_mm512_srli_epi16::<4>(y)));
                let v = _mm512_shuffle_i32x4::<0xD8>(v, v);
                _mm512_shuffle_epi8(levels, _mm512_and_si512(v, nib))
            });
            let wu: [__m512i; 4] = arr!(4, |k| _mm512_xor_si512(wv[k], b80));
            let wa: [__m512i; 4] = arr!(4, |k| _mm512_abs_epi8(wv[k]));
            let wneg: [__mmask64; 4] = arr!(4, |k| _mm512_movepi8_mask(wv[k]));
            for t in 0..T {
                let a: [__m512i; 4] = arr!(4, |k| if VNNI {
                    _mm512_dpbusd_epi32(neg[t][k], wu[k], xs[t][k])
                } else {
                    let xk = xs[t][k];
                    let xs = _mm512_mask_sub_epi8(xk, wneg[k], z, xk);
                    _mm512_madd_epi16(_mm512_maddubs_epi16(wa[k], xs), ones)
                });
                let i = reduce_blocks_z(a);
                let term = _mm256_mul_ps(_mm256_mul_ps(d, dx[t]), _mm256_cvtepi32_ps(i));
                p[r][t] = _mm256_add_ps(p[r][t], term);
            }
        }
    }
    // Lane L holds p[Z_ORDER[L]].
    let mut pa = [[[0f32; 8]; T]; R];
    for (pr, vr) in pa.iter_mut().zip(to_partials(&p)) {
        for (pt, vt) in pr.iter_mut().zip(vr) {
            for (l, v) in vt.into_iter().enumerate() {
                pt[Z_ORDER[l]] = v;
            }
        }
    }
    q80_rest::<R, T, NIB>(w, rb, x, 8 * ng, nb, &mut pa);
    q80_finish(pa)
}
