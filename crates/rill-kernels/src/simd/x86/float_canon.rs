//! BF16 and F16 rows widened in registers and multiplied in the canonical
//! order, for a few tokens (decode): the same bits as widening the rows
//! into a buffer and running the blocked path (widening is exact), without
//! the store and reload. Hugging Face folders keep their LM head, embeddings
//! and small projections in BF16; BF16 / F16 GGUFs are all such rows.
//!
//! Rows are walked in blocks of 16 values, so the 16-lane order of the
//! AVX-512 path (`Canon16`) and the 8-lane one of AVX2 (`Canon`) both come
//! out of one decoder; a row whose length is not a multiple of 16 keeps the
//! blocked path (its element-wise tail).

use std::arch::x86_64::*;

use super::avx2_blocks::{Canon, Canon16, Emit};

/// 16 BF16 values at `p`: each the top half of an f32.
#[inline(always)]
unsafe fn block_bf16<E: Emit>(p: *const u8, e: &mut E) {
    let v = _mm256_loadu_si256(p as *const __m256i);
    let wide = |h: __m128i| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)));
    e.put(0, wide(_mm256_castsi256_si128(v)), 0);
    e.put(8, wide(_mm256_extracti128_si256::<1>(v)), 0);
}

/// 16 F16 values at `p`.
#[inline(always)]
unsafe fn block_f16<E: Emit>(p: *const u8, e: &mut E) {
    e.put(0, _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)), 0);
    e.put(
        8,
        _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i)),
        0,
    );
}

/// `canon_NAME::<R, T>(w, x, cols)` in the AVX2 order and
/// `canon16_NAME` in the AVX-512 one, over blocks of 16 values.
macro_rules! canon_float {
    ($($block:ident: $canon:ident, $canon16:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $canon<const R: usize, const T: usize>(
            w: *const u8,
            x: *const f32,
            cols: usize,
        ) -> [[f32; T]; R] {
            super::canon_rows::<Canon<T>, R, T>(w, x, cols, (32, 16), |b, e| $block(b, e))
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $canon16<const R: usize, const T: usize>(
            w: *const u8,
            x: *const f32,
            cols: usize,
        ) -> [[f32; T]; R] {
            super::canon_rows::<Canon16<T>, R, T>(w, x, cols, (32, 16), |b, e| $block(b, e))
        }
    )*};
}

canon_float! {
    block_bf16: canon_bf16, canon16_bf16;
    block_f16: canon_f16, canon16_f16;
}
