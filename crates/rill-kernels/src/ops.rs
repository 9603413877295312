//! Row-wise f32 operations of the forward pass. All accumulate in f32
//! (sums of squares in f64 would differ from the references, which use f32).

/// `out = x / sqrt(mean(x²) + eps) ⊙ w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), w.len());
    debug_assert_eq!(x.len(), out.len());
    let scale = rms_scale(x, eps);
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * scale * wi;
    }
}

/// In-place RMSNorm.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    debug_assert_eq!(x.len(), w.len());
    let scale = rms_scale(x, eps);
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = *xi * scale * wi;
    }
}

/// `1 / sqrt(mean(x²) + eps)`.
pub fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss = sum_squares(x);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// In-place L2 normalisation: `x / sqrt(Σx² + eps)`.
pub fn l2_norm_inplace(x: &mut [f32], eps: f32) {
    let scale = 1.0 / (sum_squares(x) + eps).sqrt();
    for v in x {
        *v *= scale;
    }
}

fn sum_squares(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..8 {
            acc[i] += c[i] * c[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for v in rest {
        s += v * v;
    }
    s
}

use crate::simd::{on_widest_vectors, Isa};

/// f32 dot product on kernel class `isa`. Panics if the CPU cannot run `isa`.
pub fn dot_f32_with(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    isa.check();
    assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: `isa.check()` confirmed AVX2+FMA+F16C; lengths are equal.
        return unsafe { crate::simd::x86::dot_f32(a, b) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: `isa.check()` confirmed NEON; lengths are equal.
        return unsafe { crate::simd::neon::dot_f32(a, b) };
    }
    dot_f32_scalar(a, b)
}

/// The reference f32 dot: several accumulators (vectorisable).
fn dot_f32_scalar(a: &[f32], b: &[f32]) -> f32 {
    dot8(a, b, |acc| acc.iter().sum())
}

/// A scalar dot in 8 accumulators: lane `i` sums `a[c]·b[c]` of the
/// columns `c ≡ i (mod 8)` of the whole chunks of 8, `reduce` folds the
/// lanes, then the remaining columns are added one by one. The reference
/// dot above and `gemm`'s canonical scalar order differ only in `reduce`.
#[inline(always)]
pub(crate) fn dot8(a: &[f32], b: &[f32], reduce: impl Fn(&[f32; 8]) -> f32) -> f32 {
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = reduce(&acc);
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Σ x (several accumulators; used by the bandwidth probe).
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for i in 0..8 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + rest
}

/// `y += a · x` on kernel class `isa` (fused multiply-add on x86-64 and
/// aarch64, so it may differ from the scalar path in the last bit). Panics
/// if the CPU cannot run `isa`.
pub fn axpy_with(isa: Isa, a: f32, x: &[f32], y: &mut [f32]) {
    isa.check();
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: `isa.check()` confirmed AVX2+FMA+F16C; lengths are equal.
        return unsafe { crate::simd::x86::axpy(a, x, y) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: `isa.check()` confirmed NEON; lengths are equal.
        return unsafe { crate::simd::neon::axpy(a, x, y) };
    }
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// eˣ from plain f32 arithmetic (no libm call), so that loops over slices
/// of it vectorise: range reduction x = n·ln2 + r (|r| ≤ ln2/2, ln2 in two
/// parts), a degree-7 Taylor polynomial of eʳ (truncation < 1e-8
/// relative), 2ⁿ put into the exponent bits. Within a few ulp of `exp` for
/// x in [−87.3, 88]; clamped there (eˣ stays a normal number, never 0 or
/// ∞: e.g. `1/(1 + eˣ)` is 1, or ~1e-38, at the ends). Only `+ − ×` and
/// integer operations, which the compiler neither reorders nor fuses, so
/// every instruction-set path gives the same bits.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5·2²³: adding it rounds to an integer, held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.0);
    let shifted = x * LOG2E + MAGIC;
    let n = shifted - MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + c;
    }
    let e = (shifted.to_bits().wrapping_sub(MAGIC.to_bits()) as i32 + 127) as u32;
    p * f32::from_bits(e << 23)
}

/// `y[i] = f(y[i], x[i])` with `f` inlined into a loop compiled for the
/// widest vectors this CPU has. `f` must be plain f32 arithmetic (as
/// [`exp_fast`]): the compiler vectorises it without changing a result.
#[inline(always)]
fn zip_map_with(isa: Isa, y: &mut [f32], x: &[f32], f: impl Fn(f32, f32) -> f32 + Copy) {
    isa.check();
    assert_eq!(y.len(), x.len(), "length mismatch");
    #[inline(always)]
    fn body(y: &mut [f32], x: &[f32], f: impl Fn(f32, f32) -> f32) {
        for (a, &b) in y.iter_mut().zip(x) {
            *a = f(*a, b);
        }
    }
    on_widest_vectors!(isa, (y: &mut [f32] = y, x: &[f32] = x, f: impl Fn(f32, f32) -> f32 = f)
        => body(y, x, f));
    body(y, x, f)
}

/// `g[i] = silu(g[i]) · u[i]` (SwiGLU), vectorised ([`exp_fast`]) on
/// kernel class `isa`.
pub fn swiglu_inplace_with(isa: Isa, g: &mut [f32], u: &[f32]) {
    zip_map_with(isa, g, u, |g, u| g / (1.0 + exp_fast(-g)) * u)
}

/// `y[i] *= silu(z[i])` (the gated norm's gate), vectorised on `isa`.
pub fn mul_silu_inplace_with(isa: Isa, y: &mut [f32], z: &[f32]) {
    zip_map_with(isa, y, z, |y, z| y * (z / (1.0 + exp_fast(-z))))
}

/// `y[i] *= sigmoid(z[i])` (an output gate), vectorised on `isa`.
pub fn mul_sigmoid_inplace_with(isa: Isa, y: &mut [f32], z: &[f32]) {
    zip_map_with(isa, y, z, |y, z| y * (1.0 / (1.0 + exp_fast(-z))))
}

/// `y[i] = silu(y[i])`, vectorised on `isa`.
pub fn silu_inplace_with(isa: Isa, y: &mut [f32]) {
    // `x` is `y` itself: a copy would cost more than the unused loads.
    isa.check();
    #[inline(always)]
    fn body(y: &mut [f32]) {
        for a in y.iter_mut() {
            *a = *a / (1.0 + exp_fast(-*a));
        }
    }
    on_widest_vectors!(isa, (y: &mut [f32] = y) => body(y));
    body(y)
}

/// `ln(1 + eˣ)`, linear above 20 as PyTorch's `softplus` (threshold 20).
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// In-place numerically stable softmax.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_fast_is_close_to_exp_and_the_same_on_every_path() {
        let xs: Vec<f32> = (-8800..=8800).map(|i| i as f32 * 0.01 + 0.003).collect();
        for &x in xs.iter().filter(|&&x| (-87.3..=88.0).contains(&x)) {
            let (got, want) = (exp_fast(x) as f64, (x as f64).exp());
            assert!(
                ((got - want) / want).abs() < 4e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(exp_fast(-1000.0) > 0.0 && exp_fast(1000.0).is_finite());
        let u: Vec<f32> = xs.iter().map(|x| (x * 0.37).sin()).collect();
        let mut want = xs.clone();
        swiglu_inplace_with(Isa::Scalar, &mut want, &u);
        for isa in Isa::available() {
            let mut got = xs.clone();
            swiglu_inplace_with(isa, &mut got, &u);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa:?}"
            );
        }
        for (&x, (&w, &u)) in xs.iter().zip(want.iter().zip(&u)) {
            let exact = silu(x) * u;
            assert!((w - exact).abs() <= 1e-6 * (1.0 + exact.abs()), "silu({x})");
        }
    }

    #[test]
    fn rms_norm_matches_definition() {
        let x = [1.0f32, -2.0, 3.0, 0.5];
        let w = [1.0f32, 2.0, 0.5, -1.0];
        let mut out = [0f32; 4];
        rms_norm(&x, &w, 1e-6, &mut out);
        let ms = x.iter().map(|v| v * v).sum::<f32>() / 4.0;
        for i in 0..4 {
            let want = x[i] / (ms + 1e-6).sqrt() * w[i];
            assert!((out[i] - want).abs() < 1e-6);
        }
    }

    #[test]
    fn softmax_sums_to_one_and_survives_large_inputs() {
        let mut x = [1000.0f32, 1001.0, 999.0];
        softmax_inplace(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[0] && x[0] > x[2]);
    }

    #[test]
    fn softplus_is_stable() {
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert_eq!(softplus(100.0), 100.0);
        assert!(softplus(-100.0) >= 0.0);
    }

    #[test]
    fn dot_handles_remainders() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..19).map(|i| 1.0 - i as f32 * 0.5).collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        for isa in Isa::available() {
            assert!((dot_f32_with(isa, &a, &b) - want).abs() < 1e-3, "{isa}");
        }
    }
}
