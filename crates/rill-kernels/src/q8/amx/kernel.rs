//! The tile products of one row tile and their f32 terms, in the canonical
//! order, to the output.

use super::layout::{decode, transpose16};
use super::tiles::{dpbssd, dpbusd, tileload, tilestore, tilezero};
use super::{pairs, Bufs, Dest, Geo, Step};
use crate::matmul::MatRef;
use std::arch::asm;
use std::arch::x86_64::*;

/// Super-blocks decoded per call in [`row_tile_k`] (16 KiB of A tiles).
const DECODE_GROUP: usize = 2;

/// One row tile against every token tile of the block, K encodings.
///
/// The steps form one software pipeline: a step issues its tile products,
/// then (a quarter after each chunk) the f32 work of the previous step,
/// whose tiles it stored, so that the two may overlap, also across pairs of
/// token tiles. (On the Sapphire Rapids measured they mostly do not: the
/// time is about the sum of the two.)
///
/// The weights are decoded in the first pair's pass, [`DECODE_GROUP`]
/// super-blocks at a time, each group while the tile unit works on the
/// last super-block of the one before; so the A tiles are loaded from L1
/// soon after they were written (a whole row tile's, 2 KiB per 64 values,
/// may not fit there). On 512 × 2048 Q4_K with 8-16 tokens that is ~15%
/// faster than decoding the row tile first; groups of 1, 2 and 4 measured
/// alike (each decode call has a fixed cost), 8 like no grouping.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
pub(super) unsafe fn row_tile_k<const Q6: bool>(g: Geo, w: MatRef<'_>, b: Bufs, d: Dest) {
    // SAFETY (whole function): tile loads read chunk `ch < g.chunks` of
    // the weights (decoded before: super-block 0 here, `sb + 1` in step
    // `sb` of the first pair) and of token tiles `tt`, `tt + 1` (which
    // exist when nt = 2); stores fill the 4 KiB of `b.c`; the rest as the
    // callees.
    const G: usize = DECODE_GROUP;
    decode(g, w, d.rt, d.nr, 0..G.min(g.blocks), b);
    let mut pending: Option<Step> = None;
    for (tt, nt) in pairs(d.tn.div_ceil(16)) {
        prefetch_out(d, tt, nt);
        let bt = b.bt.add(tt * g.chunks * 1024);
        let bt2 = bt.add(g.chunks * 1024);
        for sb in 0..g.blocks {
            tilezero::<0>();
            tilezero::<1>();
            if nt == 2 {
                tilezero::<2>();
                tilezero::<3>();
            }
            for c in 0..4 {
                let ch = 4 * sb + c;
                tileload::<4>(b.wa.add(ch * 2048), 64);
                tileload::<6>(bt.add(ch * 1024), 64);
                dpbusd::<0, 4, 6>();
                tileload::<5>(b.wa.add(ch * 2048 + 1024), 64);
                dpbssd::<1, 5, 6>();
                if nt == 2 {
                    tileload::<7>(bt2.add(ch * 1024), 64);
                    dpbusd::<2, 4, 7>();
                    dpbssd::<3, 5, 7>();
                }
                if let Some(p) = pending {
                    terms_k::<Q6>(g, b, p, (4 * c).min(d.nr)..(4 * c + 4).min(d.nr));
                }
            }
            if tt == 0 && (sb + 1) % G == 0 && sb + 1 < g.blocks {
                decode(g, w, d.rt, d.nr, sb + 1..(sb + 1 + G).min(g.blocks), b);
            }
            if let Some(p) = pending.filter(|p| p.k + 1 == g.blocks) {
                write_out(b, g.blocks, d, p);
            }
            store_c(b.c, nt);
            pending = Some(Step { tt, nt, k: sb });
        }
    }
    if let Some(p) = pending {
        terms_k::<Q6>(g, b, p, 0..d.nr);
        write_out(b, g.blocks, d, p);
    }
}

/// `p[r] = p[r] + t` for a partial's row at `pr`: its first term starts
/// from +0 without reading the (stale) buffer.
#[inline(always)]
unsafe fn accumulate(pr: *mut f32, first: bool, t: __m512) {
    let p = if first {
        _mm512_setzero_ps()
    } else {
        _mm512_loadu_ps(pr)
    };
    _mm512_storeu_ps(pr, _mm512_add_ps(p, t));
}

/// Step `s`'s super-block terms for rows `rows`, from the stored tiles,
/// into the partials: `reference.rs`'s `term_k_min` / `term_q6_k` per
/// (row, token).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
unsafe fn terms_k<const Q6: bool>(g: Geo, b: Bufs, s: Step, rows: std::ops::Range<usize>) {
    // SAFETY (whole function): indices stay inside the buffers `rows`
    // sized (row < 16, token tile < tiles, sb < blocks).
    let sb = s.k;
    for u in 0..s.nt {
        let tile = s.tt + u;
        let clo = b.c.add(2 * u * 1024);
        let chi = clo.add(1024);
        let dx = _mm512_loadu_ps(b.xd.add((tile * g.blocks + sb) * 16));
        let xs = b.xs.add((tile * g.blocks + sb) * 4 * 16);
        let pp = b.p.add((u * 8 + sb % 8) * 256);
        let (wd, wm, wp) = (b.wd.add(sb * 16), b.wm.add(sb * 16), b.wp.add(sb * 16 * 4));
        for r in rows.clone() {
            let lo = _mm512_load_si512(clo.add(r * 64).cast());
            let hi = _mm512_load_si512(chi.add(r * 64).cast());
            let i = _mm512_add_epi32(lo, _mm512_slli_epi32::<8>(hi));
            let d = _mm512_set1_ps(*wd.add(r));
            let t = if Q6 {
                // i = Σ_j sc_j·Σ (w − 32)·q, exactly as Σ_j sc_j·(Σ w·q − 32·S16_j).
                _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i))
            } else {
                // (d·dx)·i − (dmin·dx)·m, with m = Σ_j min_j·S32_j.
                let mut m = _mm512_setzero_si512();
                for p in 0..4 {
                    m = dpwssd(m, xs.add(p * 16), wp.add(r * 4 + p));
                }
                let dmin = _mm512_set1_ps(*wm.add(r));
                _mm512_sub_ps(
                    _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i)),
                    _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(m)),
                )
            };
            accumulate(pp.add(r * 16), sb < 8, t);
        }
    }
}

/// `acc + Σ pairs(x) · pairs(*w)` (VPDPWSSD, the weight pair broadcast):
/// written out because the compiler would split it into two instructions.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
unsafe fn dpwssd(acc: __m512i, x: *const i32, w: *const i32) -> __m512i {
    let mut a = acc;
    // SAFETY: reads 64 bytes at `x` and 4 at `w`, valid (caller).
    asm!("vpdpwssd {a}, {x}, dword ptr [{w}]{{1to16}}",
         a = inout(zmm_reg) a, x = in(zmm_reg) _mm512_loadu_si512(x.cast()), w = in(reg) w,
         options(pure, readonly, nostack, preserves_flags));
    a
}

/// One row tile against every token tile of the block, Q8_0: steps of one
/// chunk (two blocks), pipelined as in [`row_tile_k`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
pub(super) unsafe fn row_tile_q8_0(g: Geo, b: Bufs, d: Dest) {
    // SAFETY (whole function): as in `row_tile_k`; a chunk's odd block
    // past the last one reads scratch whose products are never used.
    let mut pending: Option<Step> = None;
    for (tt, nt) in pairs(d.tn.div_ceil(16)) {
        let bt = b.bt.add(tt * g.chunks * 1024);
        let bt2 = bt.add(g.chunks * 1024);
        for ch in 0..g.chunks {
            tilezero::<0>();
            tilezero::<1>();
            tileload::<4>(b.wa.add(ch * 2048), 32);
            tileload::<6>(bt.add(ch * 1024), 64);
            dpbssd::<0, 4, 6>();
            tileload::<5>(b.wa.add(ch * 2048 + 1024), 32);
            tileload::<7>(bt.add(ch * 1024 + 512), 64);
            dpbssd::<1, 5, 7>();
            if nt == 2 {
                tilezero::<2>();
                tilezero::<3>();
                tileload::<6>(bt2.add(ch * 1024), 64);
                dpbssd::<2, 4, 6>();
                tileload::<7>(bt2.add(ch * 1024 + 512), 64);
                dpbssd::<3, 5, 7>();
            }
            if let Some(p) = pending {
                terms_q8_0(g, b, p, d.nr);
                if p.k + 1 == g.chunks {
                    write_out(b, g.blocks, d, p);
                }
            }
            store_c(b.c, nt);
            pending = Some(Step { tt, nt, k: ch });
        }
    }
    if let Some(p) = pending {
        terms_q8_0(g, b, p, d.nr);
        write_out(b, g.blocks, d, p);
    }
}

/// Step `s`'s block terms `(d·dx)·i` from the stored tiles.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
unsafe fn terms_q8_0(g: Geo, b: Bufs, s: Step, nr: usize) {
    // SAFETY (whole function): as in `terms_k`.
    for u in 0..s.nt {
        let tile = s.tt + u;
        for e in 0..2 {
            let blk = 2 * s.k + e;
            if blk >= g.blocks {
                break;
            }
            let cv = b.c.add((2 * u + e) * 1024);
            let dx = _mm512_loadu_ps(b.xd.add((tile * g.blocks + blk) * 16));
            let pp = b.p.add((u * 8 + blk % 8) * 256);
            for r in 0..nr {
                let i = _mm512_load_si512(cv.add(r * 64).cast());
                let d = _mm512_set1_ps(*b.wd.add(blk * 16 + r));
                let t = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(i));
                accumulate(pp.add(r * 16), blk < 8, t);
            }
        }
    }
}

/// The output lines that [`write_out`] will fill for token tiles `tt..tt +
/// nt`, fetched for writing while the pair's products run: its masked
/// stores otherwise wait for each line (the experts' outputs are often
/// cold), and they were ~5% of a MoE prefill's cycles.
#[inline(always)]
unsafe fn prefetch_out(d: Dest, tt: usize, nt: usize) {
    // SAFETY: tokens below `tn`, this task's rows `rt..rt + nr` (caller's
    // contract); a prefetch never faults anyway.
    for t in tt * 16..((tt + nt) * 16).min(d.tn) {
        let p = d.out.at((d.tb0 + t) * d.rows + d.rt);
        _mm_prefetch::<_MM_HINT_ET0>(p.cast());
        _mm_prefetch::<_MM_HINT_ET0>(p.add(d.nr - 1).cast());
    }
}

/// Step `s`'s token tiles are done: the partials' fixed tree, to
/// `out[t·rows + r]`.
#[target_feature(enable = "avx512f")]
unsafe fn write_out(b: Bufs, blocks: usize, d: Dest, s: Step) {
    // SAFETY: the partials of tiles u < 2 are inside `b.p`; the output
    // indices are this task's rows of tokens < n (caller's contract).
    for u in 0..s.nt {
        let t0 = (s.tt + u) * 16;
        let ntok = 16.min(d.tn - t0);
        let pp = b.p.add(u * 8 * 256);
        let mut v = [_mm512_setzero_si512(); 16];
        for (r, v) in v.iter_mut().enumerate().take(d.nr) {
            // `sum_partials` lane by lane: the same additions in the same
            // tree; partials no block reached are its +0 (not stale).
            let p = |j: usize| {
                if j < blocks {
                    _mm512_loadu_ps(pp.add(j * 256 + r * 16))
                } else {
                    _mm512_setzero_ps()
                }
            };
            *v = _mm512_castps_si512(_mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(p(0), p(4)), _mm512_add_ps(p(2), p(6))),
                _mm512_add_ps(_mm512_add_ps(p(1), p(5)), _mm512_add_ps(p(3), p(7))),
            ));
        }
        // Rows × tokens to tokens × rows: one masked store of the tile's
        // rows per token (and per cache line: split stores are slow).
        let v = transpose16(v);
        let mask = ((1u32 << d.nr) - 1) as u16;
        for (t, v) in v.iter().enumerate().take(ntok) {
            let dst = d.out.at((d.tb0 + t0 + t) * d.rows + d.rt);
            let split = 16 - (dst as usize % 64) / 4;
            let first = mask & ((1u32 << split) - 1) as u16;
            _mm512_mask_storeu_epi32(dst.cast(), first, *v);
            if mask & !first != 0 {
                _mm512_mask_storeu_epi32(dst.cast(), mask & !first, *v);
            }
        }
    }
}

/// Store the accumulator tiles of `nt` token tiles (tiles 0 and 1, then 2
/// and 3) to `c`, 1 KiB each, for the f32 terms of the next step.
///
/// # Safety
/// Tiles are configured and hold this step's sums; `c` has room for
/// `2 · nt` KiB.
#[inline(always)]
unsafe fn store_c(c: *mut u8, nt: usize) {
    tilestore::<0>(c, 64);
    tilestore::<1>(c.add(1024), 64);
    if nt == 2 {
        tilestore::<2>(c.add(2048), 64);
        tilestore::<3>(c.add(3072), 64);
    }
}
