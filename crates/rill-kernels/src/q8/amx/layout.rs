//! The operands' layouts: activations relaid into B tiles, weight rows
//! decoded into A tiles.

use super::{Bufs, Geo, Kind};
use crate::matmul::MatRef;
use crate::q8::Q8Rows;
use crate::quant::f16_at;
use std::arch::x86_64::*;

/// Tokens `tb0..tb0 + tn` into the B layout: per token tile and chunk of
/// 64 values, line `k/4` holds the 16 tokens' bytes `k..k+4` (a 16×16
/// transpose of i32), absent tokens and values zero; and their scales and
/// sum pairs per token tile.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
pub(super) unsafe fn relayout(g: Geo, acts: Q8Rows<'_>, tb0: usize, tn: usize, b: Bufs) {
    // SAFETY (whole function): rows `tb0..tb0 + tn` exist, and each row's
    // `cols` quants are the slice `row(t).qs`, inside which the (masked)
    // loads stay; the scratch writes stay within the sizes `rows` grew for
    // `tn` tokens.
    for tile in 0..tn.div_ceil(16) {
        let t0 = tb0 + tile * 16;
        let nt = 16.min(tb0 + tn - t0);
        let rows: [_; 16] = std::array::from_fn(|i| (i < nt).then(|| acts.row(t0 + i)));
        for ch in 0..g.chunks {
            let k = ch * 64;
            let valid = 64.min(g.cols - k);
            let mask = if valid == 64 { !0 } else { (1u64 << valid) - 1 };
            let mut r = [_mm512_setzero_si512(); 16];
            for (v, row) in r.iter_mut().zip(&rows) {
                let Some(row) = row else { break };
                let q = row.qs.as_ptr();
                *v = if g.kind == Kind::Q4 {
                    // `decode_q4`'s order: chunk 4sb + 2h + s holds values
                    // 256sb + 128h + 32s + (0..32, 64..96).
                    let p = q.add(256 * (ch / 4) + 128 * (ch % 4 / 2) + 32 * (ch % 2));
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(_mm256_loadu_si256(p.cast())),
                        _mm256_loadu_si256(p.add(64).cast()),
                    )
                } else {
                    _mm512_maskz_loadu_epi8(mask, q.add(k).cast())
                };
            }
            let r = transpose16(r);
            let dst = b.bt.add((tile * g.chunks + ch) * 1024);
            for (k4, v) in r.iter().enumerate() {
                _mm512_store_si512(dst.add(k4 * 64).cast(), *v);
            }
        }
        for (t, row) in rows.iter().enumerate() {
            for blk in 0..g.blocks {
                *b.xd.add((tile * g.blocks + blk) * 16 + t) = row.map_or(0.0, |row| row.d[blk]);
            }
            for sb in 0..g.blocks * (g.pairs > 0) as usize {
                let s = |j: usize| -> i16 { row.map_or(0, |row| row.sums[16 * sb + j]) };
                for pr in 0..g.pairs {
                    // Pairs of S32 = two S16 (|S32| ≤ 32·127 fits i16).
                    let (a, c) = (s(4 * pr) + s(4 * pr + 1), s(4 * pr + 2) + s(4 * pr + 3));
                    *b.xs.add(((tile * g.blocks + sb) * g.pairs + pr) * 16 + t) = pair(a, c);
                }
            }
        }
    }
}

/// Two i16 in one i32 lane, as VPDPWSSD reads them (first in the low half).
fn pair(a: i16, b: i16) -> i32 {
    (a as u16 as u32 | ((b as u16 as u32) << 16)) as i32
}

/// Transpose a 16×16 matrix of i32 (row `i` in `r[i]`).
#[target_feature(enable = "avx512f")]
pub(super) fn transpose16(r: [__m512i; 16]) -> [__m512i; 16] {
    let mut a = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // Now, per 128-bit lane L, `c[4i + j]` holds element 4L + j of rows
    // 4i..4i+4.
    let mut c = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        c[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        c[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        c[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        c[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    // A 4×4 transpose of 128-bit lanes for each j.
    let mut o = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let (v0, v1, v2, v3) = (c[j], c[4 + j], c[8 + j], c[12 + j]);
        let e0 = _mm512_shuffle_i32x4::<0x44>(v0, v1);
        let e1 = _mm512_shuffle_i32x4::<0xEE>(v0, v1);
        let e2 = _mm512_shuffle_i32x4::<0x44>(v2, v3);
        let e3 = _mm512_shuffle_i32x4::<0xEE>(v2, v3);
        o[j] = _mm512_shuffle_i32x4::<0x88>(e0, e2);
        o[4 + j] = _mm512_shuffle_i32x4::<0xDD>(e0, e2);
        o[8 + j] = _mm512_shuffle_i32x4::<0x88>(e1, e3);
        o[12 + j] = _mm512_shuffle_i32x4::<0xDD>(e1, e3);
    }
    o
}

// The weights of a prefill's experts are read once each, from DRAM, a row
// tile (16 contiguous rows) at a time. Each `decode` call prefetches its
// share of the next row tile's bytes, in address order, into L2: one
// sequential stream rather than 16 interleaved ones. Measured on 32768 ×
// 2048 with 16 tokens (GFLOP/s, Q4_K / Q6_K): no prefetch 160 / 134; each
// row's own blocks 2 KiB ahead ~240 / ~215 (an earlier head); against that
// on a busier host, 4 alternations: 250 → 259 / 218 → 231.

/// Blocks `blocks` of rows `rt..rt + nr` of `w` into the A layout, and
/// their scales.
///
/// This runs once per row tile and call whatever the token count, so with
/// few tokens (a MoE expert's share of a prefill) it is most of the cost:
/// the scales are unpacked in vector registers, and Q4_K's products take a
/// byte lookup rather than multiplies (see [`decode_q4`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
pub(super) unsafe fn decode(
    g: Geo,
    w: MatRef<'_>,
    rt: usize,
    nr: usize,
    blocks: std::ops::Range<usize>,
    b: Bufs,
) {
    // SAFETY (whole function): writes stay inside the row-tile buffers
    // `rows` sized for `g` (row index < 16), reads inside `w.row(..)`.
    let bb = w.dtype.block_bytes();
    let rb = w.row_bytes();
    let levels = crate::q8::reference::nibble_levels(w.dtype)
        .map_or(_mm_setzero_si128(), |l| _mm_loadu_si128(l.as_ptr().cast()));
    for r in 0..nr {
        // (`w.row` by hand: it was an out-of-line call per row and call.)
        let row = &w.data[(rt + r) * rb..(rt + r + 1) * rb];
        for blk in blocks.clone() {
            let src = &row[blk * bb..(blk + 1) * bb];
            // The next row tile's bytes, in address order: this call's
            // share of them (the tile's rows are contiguous), to L2.
            // (Address arithmetic only: prefetches never fault.)
            let ahead = blocks.start * nr + r * blocks.len() + (blk - blocks.start);
            let p = w.data.as_ptr().wrapping_add((rt + 16) * rb + ahead * bb);
            for o in (0..bb).step_by(64) {
                _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(o).cast());
            }
            match g.kind {
                Kind::Q80 => {
                    *b.wd.add(blk * 16 + r) = f16_at(src, 0);
                    let dst = b.wa.add((blk / 2) * 2048 + (blk % 2) * 1024 + r * 32);
                    std::ptr::copy_nonoverlapping(src[2..34].as_ptr(), dst, 32);
                }
                Kind::Q4 => decode_q4(src, blk, r, b),
                Kind::Q5 | Kind::Q6 => decode_madd(g.kind, src, blk, r, b),
                Kind::IQ4 => decode_iq4(src, blk, r, b),
                Kind::Nib => {
                    // the Q8_0 block of the levels, in Q8_0's place
                    *b.wd.add(blk * 16 + r) = f16_at(src, 0);
                    let dst = b.wa.add((blk / 2) * 2048 + (blk % 2) * 1024 + r * 32);
                    let q = _mm_loadu_si128(src[2..18].as_ptr().cast());
                    let m4 = _mm_set1_epi8(0x0F);
                    let lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, m4));
                    let hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16::<4>(q), m4));
                    _mm_storeu_si128(dst.cast(), lo);
                    _mm_storeu_si128(dst.add(16).cast(), hi);
                }
            }
        }
    }
}

/// Q4_K/Q5_K super-block `sb` of tile row `r`: `d` and `dmin` to `wd` /
/// `wm`, the pairs of mins to `wp`, and the eight 6-bit scales returned as
/// bytes (the low 8 of the vector). `scale_min_k4` in vector lanes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn k4_head(blk: &[u8], sb: usize, r: usize, b: Bufs) -> __m128i {
    // SAFETY: a Q4_K/Q5_K block has at least 144 bytes, so bytes 0..20 are
    // inside it (slicing checks); the stores are within the row-tile
    // buffers (caller).
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(
        blk[..4].as_ptr().cast::<i32>(),
    )));
    *b.wd.add(sb * 16 + r) = _mm_cvtss_f32(dm);
    *b.wm.add(sb * 16 + r) = f32::from_bits(_mm_extract_ps::<1>(dm) as u32);
    // Bytes 4..16 of the block → [sc0..sc7, m0..m7]: the low bits come
    // from bytes 0..3 / 8..11 / 4..7 of the 12, the top 2 bits of scales
    // and mins 4..7 from the top of bytes 0..3 / 4..7. (16-bit shifts:
    // the masks drop what crossed bytes.)
    let v = _mm_loadu_si128(blk[4..20].as_ptr().cast());
    let a = _mm_shuffle_epi8(
        v,
        _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11),
    );
    let low = _mm_and_si128(
        a,
        _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0),
    );
    let mhi = _mm_and_si128(
        _mm_srli_epi16::<4>(a),
        _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15),
    );
    let top = _mm_shuffle_epi8(
        v,
        _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7),
    );
    let top = _mm_and_si128(_mm_srli_epi16::<2>(top), _mm_set1_epi8(0x30));
    let scm = _mm_or_si128(_mm_or_si128(low, mhi), top);
    // Mins as i16 pairs (`[sb][row][pair]`), the first in the low half.
    let mins = _mm_cvtepu8_epi16(_mm_srli_si128::<8>(scm));
    _mm_storeu_si128(b.wp.add((sb * 16 + r) * 4).cast(), mins);
    scm
}

/// Q4_K super-block `sb` of tile row `r`, in the permuted order that
/// [`relayout`] gives the activations: chunk `2h + s` holds the nibbles
/// `s` (low, high) of quant bytes `64h..64h + 64`, i.e. sub-blocks `4h + s`
/// (first 32 bytes) and `4h + s + 2` (last 32). Within a super-block the
/// order of the products is free (their sum is exact and one).
///
/// `c = sc·w` (`w` ≤ 15) has only 16 values per sub-block: a 16-byte
/// table of its low and one of its high bytes. The four sub-blocks of
/// quant bytes `64h..` fill one 64-byte table (entry `16j + w` for
/// sub-block `4h + j`), so each chunk's bytes are one VPERMB (index `w` +
/// 16 × the sub-block's place) per byte of `c`.
///
/// The tables come straight out of word multiplies, in byte order: word
/// `i` holds entries `2i` and `2i + 1` (the same sub-block `j = i/8`), and
/// each byte of `c` is a low or high half of one word product, so one
/// byte permute (the scales into words), three multiplies and a shift per
/// pair of tables replace widening, two word permutes and two two-source
/// byte permutes: the shuffle port, which the lookups keep busy, was the
/// limit (~8% more GFLOP/s at 8-16 tokens).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,f16c")]
unsafe fn decode_q4(blk: &[u8], sb: usize, r: usize, b: Bufs) {
    // SAFETY: loads inside the 144-byte block (slicing checks); stores of
    // chunks `4sb..4sb + 4`, row `r` inside `wa` (caller).
    // Zero-extended: byte 16 (the odd bytes' index) is 0.
    let scm = _mm512_zextsi128_si512(k4_head(blk, sb, r, b));
    let m4 = _mm512_set1_epi8(0x0F);
    let w = |k: usize| _mm512_loadu_si512(TABW.as_ptr().add(32 * k).cast());
    // Even entries' w (0, 2, .., 14), odd entries' (1, 3, .., 15), and the
    // odd ones' × 256.
    let (we, wo, wo8) = (w(0), w(1), w(2));
    let (m_lo, m_hi) = (
        _mm512_set1_epi16(0x00FF),
        _mm512_set1_epi16(0xFF00u16 as i16),
    );
    for h in 0..2 {
        // Words sc_{4h + i/8}.
        let idx = _mm512_loadu_si512(SCW.as_ptr().add(64 * h).cast());
        let s = _mm512_permutexvar_epi8(idx, scm);
        // All products ≤ 15·63 = 945 < 2^16, so exact in words: the even
        // entry's bytes are we·s's low and high bytes; the odd one's low
        // byte is the high byte of (wo·256)·s (mod 2^16, its low byte
        // zero), its high byte that of wo·s. (A VPMULHUW for the even high
        // bytes was widened by the compiler into seven instructions.)
        let pe = _mm512_mullo_epi16(we, s);
        let tlo = _mm512_ternarylogic_epi32::<0xEA>(pe, m_lo, _mm512_mullo_epi16(wo8, s));
        let thi = _mm512_ternarylogic_epi32::<0xEA>(
            _mm512_mullo_epi16(wo, s),
            m_hi,
            _mm512_srli_epi16::<8>(pe),
        );
        let v = _mm512_loadu_si512(blk[16 + 64 * h..16 + 64 * h + 64].as_ptr().cast());
        for s in 0..2 {
            let nib = if s == 0 { v } else { _mm512_srli_epi16::<4>(v) };
            // (w & 15) | place (0xEA: (A & B) | C); the word shift's
            // crossed bits are masked off.
            let place = _mm512_mask_blend_epi8(
                0xFFFF_FFFF_0000_0000,
                _mm512_set1_epi8(16 * s as i8),
                _mm512_set1_epi8(16 * (s as i8 + 2)),
            );
            let idx = _mm512_ternarylogic_epi32::<0xEA>(nib, m4, place);
            let dst = b.wa.add((4 * sb + 2 * h + s) * 2048 + r * 64);
            _mm512_store_si512(dst.cast(), _mm512_permutexvar_epi8(idx, tlo));
            _mm512_store_si512(dst.add(1024).cast(), _mm512_permutexvar_epi8(idx, thi));
        }
    }
}

/// Words `w` of [`decode_q4`]'s tables: the even entries' (`2i mod 16`),
/// the odd ones' (`2i + 1 mod 16`), then the odd ones' × 256.
static TABW: [u16; 96] = {
    let mut a = [0; 96];
    let mut i = 0;
    while i < 32 {
        a[i] = (2 * i % 16) as u16;
        a[32 + i] = ((2 * i + 1) % 16) as u16;
        a[64 + i] = a[32 + i] << 8;
        i += 1;
    }
    a
};

/// VPERMB indices of [`decode_q4`]'s scale words, per half `h`: byte `2i`
/// takes scale `4h + i/8`, byte `2i + 1` byte 16 (zero).
static SCW: [u8; 128] = {
    let mut a = [16; 128];
    let mut i = 0;
    while i < 64 {
        a[i] = (i / 16) as u8;
        a[64 + i] = 4 + (i / 16) as u8;
        i += 2;
    }
    a
};

/// Q5_K and Q6_K super-block `sb` of tile row `r`, in element order: each
/// chunk's `c = sc·w` (Q6_K: `sc·(w − 32)`) from two VPMADDUBSW, split into
/// its low and high bytes.
///
/// The scale words `[sc, 0]`, `[0, sc]` and Q6_K's `32·sc` are each one
/// word permute (the shuffle port has room here) of a vector made once per
/// super-block, rather than shifts per chunk on the port that the
/// multiplies and the other shifts keep busy.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,f16c")]
unsafe fn decode_madd(kind: Kind, blk: &[u8], sb: usize, r: usize, b: Bufs) {
    // SAFETY: loads inside the block (Q5_K 176 bytes, Q6_K 210; slicing
    // checks); stores of chunks `4sb..4sb + 4`, row `r` (caller).
    let scv = if kind == Kind::Q6 {
        // `d` (F16C, as `f16_at` on this CPU, without its feature check).
        let d = std::ptr::read_unaligned(blk[208..210].as_ptr().cast::<u16>());
        *b.wd.add(sb * 16 + r) = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d as i32)));
        _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(
            blk[192..208].as_ptr().cast(),
        )))
    } else {
        _mm512_castsi128_si512(_mm_cvtepu8_epi16(k4_head(blk, sb, r, b)))
    };
    // Words [sc, 0] (scv) and [0, sc]: VPMADDUBSW then gives each even and
    // each odd byte's w·sc as an i16. Q6_K's scales are signed bytes: the
    // offset's words 32·sc from the sign-extended high byte.
    let scv_odd = _mm512_slli_epi16::<8>(scv);
    let scv32 = _mm512_slli_epi16::<5>(_mm512_srai_epi16::<8>(scv_odd));
    for c in 0..4 {
        // The sub-block of each pair of bytes (i16 word i) of chunk
        // c: 2c + i/16, or for Q6_K 4c + i/8.
        let ci = c as i16;
        let idx = if kind == Kind::Q6 {
            let eighths = _mm512_maskz_set1_epi16(0xFF00_FF00, 1);
            _mm512_add_epi16(halves(4 * ci, 4 * ci + 2), eighths)
        } else {
            halves(2 * ci, 2 * ci + 1)
        };
        let q = quants(kind, blk, c);
        let (mut e, mut o) = (
            _mm512_maddubs_epi16(q, _mm512_permutexvar_epi16(idx, scv)),
            _mm512_maddubs_epi16(q, _mm512_permutexvar_epi16(idx, scv_odd)),
        );
        if kind == Kind::Q6 {
            // Q6_K's offset folded in: c = sc·(w − 32), |c| ≤ 4096.
            let sc32 = _mm512_permutexvar_epi16(idx, scv32);
            e = _mm512_sub_epi16(e, sc32);
            o = _mm512_sub_epi16(o, sc32);
        }
        // lo = low bytes, hi = high bytes (0xEA: (A & B) | C). (Two
        // VPERMT2B instead measured slower.)
        let dst = b.wa.add((4 * sb + c) * 2048 + r * 64);
        let lo = _mm512_ternarylogic_epi32::<0xEA>(
            e,
            _mm512_set1_epi16(0x00FF),
            _mm512_slli_epi16::<8>(o),
        );
        let hi = _mm512_ternarylogic_epi32::<0xEA>(
            o,
            _mm512_set1_epi16(0xFF00u16 as i16),
            _mm512_srli_epi16::<8>(e),
        );
        _mm512_store_si512(dst.cast(), lo);
        _mm512_store_si512(dst.add(1024).cast(), hi);
    }
}

/// IQ4_XS super-block `sb` of tile row `r`: `d` to `wd`, and per chunk of
/// 64 values (sub-blocks 2c, 2c + 1) `c = ls·L` as i16 — each half of the
/// chunk one sub-block — split into its low (unsigned) and high (signed)
/// bytes, in element order.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn decode_iq4(blk: &[u8], sb: usize, r: usize, b: Bufs) {
    // SAFETY: loads inside the 136-byte block (slicing checks); stores of
    // chunks `4sb..4sb + 4`, row `r` (caller).
    let d = std::ptr::read_unaligned(blk[..2].as_ptr().cast::<u16>());
    *b.wd.add(sb * 16 + r) = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d as i32)));
    let levels = _mm512_broadcast_i32x4(_mm_loadu_si128(
        crate::quant::iq4::IQ4_NL_VALUES.as_ptr().cast(),
    ));
    for c in 0..4 {
        // bytes of sub-blocks 2c, 2c + 1 to lanes [low, high, low, high]
        // nibbles: element order
        let q = _mm512_castsi256_si512(_mm256_loadu_si256(
            blk[8 + 32 * c..40 + 32 * c].as_ptr().cast(),
        ));
        let idx = _mm512_and_si512(
            _mm512_srlv_epi16(
                _mm512_shuffle_i64x2::<0x50>(q, q),
                _mm512_mask_blend_epi64(0xCC, _mm512_setzero_si512(), _mm512_set1_epi16(4)),
            ),
            _mm512_set1_epi8(0x0F),
        );
        let lv = _mm512_shuffle_epi8(levels, idx);
        let ls = |j: usize| crate::q8::reference::iq4_xs_scale(blk, j) as i16;
        let c0 = _mm512_mullo_epi16(
            _mm512_cvtepi8_epi16(_mm512_castsi512_si256(lv)),
            _mm512_set1_epi16(ls(2 * c)),
        );
        let c1 = _mm512_mullo_epi16(
            _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64::<1>(lv)),
            _mm512_set1_epi16(ls(2 * c + 1)),
        );
        // low bytes (unsigned) and high bytes (signed): c = lo + 256·hi
        let lo = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm512_cvtepi16_epi8(c0)),
            _mm512_cvtepi16_epi8(c1),
        );
        let hi = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16::<8>(c0))),
            _mm512_cvtepi16_epi8(_mm512_srai_epi16::<8>(c1)),
        );
        let dst = b.wa.add((4 * sb + c) * 2048 + r * 64);
        _mm512_store_si512(dst.cast(), lo);
        _mm512_store_si512(dst.add(1024).cast(), hi);
    }
}

/// Words `a` (first 16) and `b` (last 16).
#[target_feature(enable = "avx512f,avx512bw")]
fn halves(a: i16, b: i16) -> __m512i {
    _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(a), _mm512_set1_epi16(b))
}

/// The 64 unsigned quants of chunk `c` (values `64c..64c+64`) of a K block,
/// in element order (as `reference.rs` unpacks them). Word shifts are safe
/// on bytes here: each mask keeps no more than `8 − shift` bits.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quants(kind: Kind, blk: &[u8], c: usize) -> __m512i {
    // SAFETY (loads): all offsets lie inside the block (Q4_K 144 bytes,
    // Q5_K 176, Q6_K 210), checked by the slicing.
    let bcast32 = |s: &[u8]| _mm512_broadcast_i64x4(_mm256_loadu_si256(s[..32].as_ptr().cast()));
    let m4 = _mm512_set1_epi8(0x0F);
    match kind {
        Kind::Q4 | Kind::Q5 => {
            // Values 64c + l: low nibbles of qs[32c + l] (l < 32), high
            // nibbles after.
            let qs = if kind == Kind::Q4 { 16 } else { 48 };
            let v = bcast32(&blk[qs + 32 * c..]);
            let q = _mm512_and_si512(_mm512_srlv_epi16(v, halves(0, 4)), m4);
            if kind == Kind::Q4 {
                return q;
            }
            // Q5_K's fifth bit of value e: bit e/32 of qh[e % 32].
            let h = bcast32(&blk[16..]);
            let s = (2 * c) as i16;
            let hb = _mm512_and_si512(_mm512_srlv_epi16(h, halves(s, s + 1)), _mm512_set1_epi8(1));
            _mm512_or_si512(q, _mm512_slli_epi16::<4>(hb))
        }
        _ => {
            // Q6_K value 128h + t (c = 2h + t/64): low 4 bits from
            // ql[64h + t % 64] >> 4(t/64), high 2 from qh[32h + t % 32] >>
            // 2(t/32).
            let (h, half) = (c / 2, (c % 2) as i16);
            let ql = _mm512_loadu_si512(blk[64 * h..64 * h + 64].as_ptr().cast());
            let lo = if half == 0 {
                ql
            } else {
                _mm512_srli_epi16::<4>(ql)
            };
            // qh's bits 2(t/32).. straight to bits 4, 5: left by 4 or 2
            // (half 0), right by 0 or 2 (half 1).
            let qh = bcast32(&blk[128 + 32 * h..]);
            let hi = if half == 0 {
                _mm512_sllv_epi16(qh, halves(4, 2))
            } else {
                _mm512_srlv_epi16(qh, halves(0, 2))
            };
            let hi = _mm512_and_si512(hi, _mm512_set1_epi8(0x30));
            // (lo & 15) | hi (0xEA: (A & B) | C).
            _mm512_ternarylogic_epi32::<0xEA>(lo, m4, hi)
        }
    }
}
