//! Encoding f32 rows into the K super-block types Q4_K, Q5_K and Q6_K and
//! the non-linear IQ4_NL / IQ4_XS: what `rill convert --type q4_k_m` and
//! `rill quantize` write.
//!
//! The search is ggml's reference quantizer without an importance matrix
//! (what `llama-quantize` runs when it is given none), written from its
//! definition so that a file's error is no worse than llama.cpp's:
//! - Q4_K / Q5_K: each sub-block of 32 gets an affine fit `x ≈ s·q − m`
//!   (`q` in 0..=15 or 0..=31, `m ≥ 0`), chosen among a sweep of candidate
//!   inverse scales by weighted least squares (weights `σ + |x|`, `σ` the
//!   block's RMS); the 8 scales and mins are then themselves quantized to 6
//!   bits against the block's largest (`d`, `dmin` as f16), and the quants
//!   recomputed with the scales as stored.
//! - Q6_K: each sub-block of 16 gets a symmetric fit `x ≈ s·(q − 32)`,
//!   `q − 32` in −32..=31, chosen among 19 candidate inverse scales by least
//!   squares weighted by `x²`; the 16 scales are stored as i8 against the
//!   block's largest (sign kept), and the quants recomputed from them.
//! - IQ4_NL / IQ4_XS: each sub-block of 32 gets the x²-weighted
//!   least-squares scale against the 16 fixed levels, the best of 15
//!   candidates; IQ4_XS stores its 8 scales as 6-bit multiples of the
//!   block's largest over 32, and re-picks the levels against them.
//!
//! Every rounding is to the nearest integer, ties to even, as ggml's
//! `nearest_int` does.

use half::f16;

const QK: usize = 256;
/// Below this a group is treated as all zeros (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, for |v| < 2²²: adding 1.5·2²³ leaves
/// the rounded integer in the low mantissa bits (no SSE4.1 `roundss` in a
/// portable build, and `rintf` is a call).
#[inline(always)]
fn nearest(v: f32) -> i32 {
    let shifted = v + 12_582_912.0;
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The value of largest magnitude (the first of equals) and its magnitude.
fn signed_max(x: impl IntoIterator<Item = f32>) -> (f32, f32) {
    x.into_iter().fold((0.0, 0.0), |(max, amax), v| {
        if v.abs() > amax {
            (v, v.abs())
        } else {
            (max, amax)
        }
    })
}

fn f16_round(v: f32) -> (u16, f32) {
    let h = f16::from_f32(v);
    (h.to_bits(), h.to_f32())
}

/// The weighted affine fit of one sub-block: quants into `l`, returns
/// `(scale, min)` with `x ≈ scale·l − min` and `min ≥ 0`. Starts from the
/// plain min/max fit and keeps the best of `nstep + 1` candidate inverse
/// scales `(rmin + rdelta·i + nmax) / (max − min)`, each refitted by least
/// squares.
#[allow(clippy::too_many_arguments)]
fn affine_fit(
    x: &[f32],
    w: &[f32],
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    l: &mut [u8],
    aux: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.iter_mut().for_each(|q| *q = 0);
        return (0.0, -min);
    }
    let quant = |iscale: f32, v: f32, min: f32| nearest(iscale * (v - min)).clamp(0, nmax);
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0f32;
    for i in 0..n {
        let q = quant(iscale, x[i], min);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        best += w[i] * (diff * diff);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let q = quant(iscale, x[i], min);
            aux[i] = q as u8;
            let q = q as f32;
            sum_l += w[i] * q;
            sum_l2 += w[i] * q * q;
            sum_xl += w[i] * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if err < best {
                l.copy_from_slice(aux);
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The x²-weighted symmetric fit of one Q6_K sub-block: quants (offset by
/// `nmax`) into `l`, returns the scale.
fn symmetric_fit(x: &[f32], nmax: i32, l: &mut [u8]) -> f32 {
    let (max, amax) = signed_max(x.iter().copied());
    if amax < GROUP_MAX_EPS {
        l.iter_mut().for_each(|q| *q = 0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        x.iter().fold((0f32, 0f32), |(lx, l2), &v| {
            let q = quant(iscale, v) as f32;
            let w = v * v;
            (lx + w * v * q, l2 + w * q * q)
        })
    };
    let mut iscale = -(nmax as f32) / max;
    for (q, &v) in l.iter_mut().zip(x) {
        *q = (quant(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (q, &v) in l.iter_mut().zip(x) {
                *q = (quant(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q4_K (`bits` 4) or Q5_K (`bits` 5): one 256-element block.
pub(super) fn q45_k(x: &[f32], bits: u32, out: &mut Vec<u8>) {
    let nmax = (1i32 << bits) - 1;
    let (rmin, nstep) = if bits == 4 { (-1.0, 20) } else { (-0.5, 15) };
    let mut l = [0u8; QK];
    let mut aux = [0u8; 32];
    let mut w = [0f32; 32];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let sum_x2: f32 = xs.iter().map(|v| v * v).sum();
        let av_x = (sum_x2 / 32.0).sqrt();
        for (wi, v) in w.iter_mut().zip(xs) {
            *wi = av_x + v.abs();
        }
        let (s, m) = affine_fit(
            xs,
            &w,
            nmax,
            rmin,
            0.1,
            nstep,
            &mut l[32 * j..32 * j + 32],
            &mut aux,
        );
        scales[j] = s;
        mins[j] = m;
        max_scale = max_scale.max(s);
        max_min = max_min.max(m);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..8 {
        let ls = nearest(inv_scale * scales[j]).min(63) as u8;
        let lm = nearest(inv_min * mins[j]).min(63) as u8;
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d_bits, d) = f16_round(max_scale / 63.0);
    let (dmin_bits, dmin) = f16_round(max_min / 63.0);
    // the quants again, against the scales as they are stored
    for j in 0..8 {
        let (sc, m) = super::k_quants::scale_min_k4(&packed, j);
        let dl = d * sc as f32;
        if dl == 0.0 {
            continue;
        }
        let ml = dmin * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest((x[i] + ml) / dl).clamp(0, nmax) as u8;
        }
    }
    out.extend_from_slice(&d_bits.to_le_bytes());
    out.extend_from_slice(&dmin_bits.to_le_bytes());
    out.extend_from_slice(&packed);
    if bits == 5 {
        let mut qh = [0u8; 32];
        for (c, chunk) in l.chunks_exact(64).enumerate() {
            for (k, h) in qh.iter_mut().enumerate() {
                *h |= (chunk[k] >> 4) << (2 * c);
                *h |= (chunk[k + 32] >> 4) << (2 * c + 1);
            }
        }
        out.extend_from_slice(&qh);
    }
    for chunk in l.chunks_exact(64) {
        out.extend((0..32).map(|k| (chunk[k] & 0x0F) | ((chunk[k + 32] & 0x0F) << 4)));
    }
}

/// Q6_K: one 256-element block.
pub(super) fn q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0u8; QK];
    let mut scales = [0f32; 16];
    for (ib, s) in scales.iter_mut().enumerate() {
        *s = symmetric_fit(&x[16 * ib..16 * ib + 16], 32, &mut l[16 * ib..16 * ib + 16]);
    }
    let (max_scale, max_abs) = signed_max(scales);
    let start = out.len();
    if max_abs < GROUP_MAX_EPS {
        out.resize(start + 210, 0);
        return;
    }
    let iscale = -128.0 / max_scale;
    let (d_bits, d) = f16_round(1.0 / iscale);
    let mut sc = [0i8; 16];
    for (c, s) in sc.iter_mut().zip(&scales) {
        *c = nearest(iscale * s).min(127) as i8;
    }
    for (j, &c) in sc.iter().enumerate() {
        let dl = d * c as f32;
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest(x[i] / dl).clamp(-32, 31) + 32) as u8;
        }
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for h in 0..2 {
        let half = &l[128 * h..128 * h + 128];
        for k in 0..32 {
            let q = [half[k], half[k + 32], half[k + 64], half[k + 96]];
            ql[64 * h + k] = (q[0] & 0x0F) | ((q[2] & 0x0F) << 4);
            ql[64 * h + k + 32] = (q[1] & 0x0F) | ((q[3] & 0x0F) << 4);
            qh[32 * h + k] =
                (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&c| c as u8));
    out.extend_from_slice(&d_bits.to_le_bytes());
}

/// The index of the IQ4_NL level nearest `x` (the lower one on a tie).
fn nearest_level(x: f32) -> u8 {
    let v = &super::iq4::IQ4_NL_VALUES;
    if x <= v[0] as f32 {
        return 0;
    }
    if x >= v[15] as f32 {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v[mid] as f32 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - (v[hi - 1] as f32) < v[hi] as f32 - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// The x²-weighted least-squares scale of one sub-block of 32 against the
/// IQ4_NL levels: the plain fit from its largest value, then the best of 15
/// candidate inverse scales `(i + level₀) / max`, i in −7..=7 (0 for an
/// all-zero sub-block). The levels are picked again once the scale is
/// stored, so none are kept here.
fn iq4_fit(x: &[f32]) -> f32 {
    const NTRY: i32 = 7;
    let v = &super::iq4::IQ4_NL_VALUES;
    let v0 = v[0] as f32;
    let (max, amax) = signed_max(x.iter().copied());
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let sums = |id: f32| {
        x.iter().fold((0f32, 0f32), |(sqx, sq2), &e| {
            let q = v[nearest_level(id * e) as usize] as f32;
            let w = e * e;
            (sqx + w * q * e, sq2 + w * q * q)
        })
    };
    let (sqx, sq2) = sums(1.0 / (-max / v0));
    let mut d = if sq2 > 0.0 { sqx / sq2 } else { 0.0 };
    let mut best = d * sqx;
    for itry in -NTRY..=NTRY {
        let (sqx, sq2) = sums((itry as f32 + v0) / max);
        if sq2 > 0.0 && sqx * sqx > best * sq2 {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    d
}

/// Levels of 32 values at inverse scale `id`, packed as IQ4_NL's 16 bytes.
fn iq4_pack(x: &[f32], id: f32, out: &mut Vec<u8>) {
    let mut l = [0u8; 32];
    for (q, &e) in l.iter_mut().zip(x) {
        *q = nearest_level(id * e);
    }
    out.extend((0..16).map(|j| l[j] | (l[j + 16] << 4)));
}

fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// IQ4_NL: one block of 32.
pub(super) fn iq4_nl(x: &[f32], out: &mut Vec<u8>) {
    let d = iq4_fit(x);
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    iq4_pack(x, inverse(d), out);
}

/// IQ4_XS: one block of 256, eight sub-block scales stored as 6-bit
/// multiples of `d = −max_scale / 32` (max_scale the scale of largest
/// magnitude, sign kept).
pub(super) fn iq4_xs(x: &[f32], out: &mut Vec<u8>) {
    let scales: [f32; 8] = std::array::from_fn(|ib| iq4_fit(&x[32 * ib..32 * ib + 32]));
    let (max_scale, _) = signed_max(scales);
    let d = -max_scale / 32.0;
    let ls = scales.map(|s| nearest(inverse(d) * s).clamp(-32, 31));
    let (mut scales_h, mut scales_l) = (0u16, [0u8; 4]);
    for (ib, &l) in ls.iter().enumerate() {
        let l = (l + 32) as u8;
        scales_l[ib / 2] |= (l & 0x0F) << (4 * (ib % 2));
        scales_h |= u16::from(l >> 4) << (2 * ib);
    }
    out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
    out.extend_from_slice(&scales_h.to_le_bytes());
    out.extend_from_slice(&scales_l);
    for (ib, &l) in ls.iter().enumerate() {
        iq4_pack(&x[32 * ib..32 * ib + 32], inverse(d * l as f32), out);
    }
}
