//! Numeric kernels. They know tensors and encodings, nothing of models or files.
//!
//! - [`quant`]: decoding of every supported weight encoding, fused decode+dot.
//! - `scaled`: separate scale tensors (FP8 tiles, NVFP4 groups) applied as rows are decoded.
//! - [`attention`]: causal grouped-query softmax attention over a KV cache, blocked.
//! - [`gdn`]: the gated delta rule, token by token and chunkwise.
//! - [`kv`]: KV cache encodings (f16, bf16, q8_0, q5_1, q4_0) and the view attention reads.
//! - [`matmul`]: weight matrix × activations, threaded over output rows
//!   (blocked microkernels in `gemm`, one canonical order per output).
//! - [`q8`]: the opt-in products with 8-bit activations ([`Precision::Q8`]).
//! - [`ops`]: element-wise and row-wise f32 operations (norms, activations, softmax).
//! - [`simd`]: the kernel classes ([`Isa`]), one chosen per run and passed down.
//! - [`threads`]: the thread pool the forward pass runs on.
pub mod attention;
pub mod conv;
pub mod gdn;
mod gemm;
pub mod kv;
pub mod layout;
pub mod matmul;
pub mod ops;
pub mod q8;
pub mod quant;
mod scaled;
pub mod simd;
mod small;
pub mod threads;

pub use matmul::{
    matmul_many_on, matmul_many_with, matmul_on, matmul_with, MatJob, MatRef, Scales,
};
pub use q8::Precision;
pub use simd::Isa;
pub use threads::Threads;

/// The integration tests' helpers (splitmix64 `Rng`, fixture matrices),
/// for the unit tests too.
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod test_common;

/// Helpers shared by the unit tests.
#[cfg(test)]
mod test_util {

    /// The xorshift64 stream from state `s` (not 0).
    pub fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        }
    }

    /// Deterministic pseudo-random values in [-1, 1) (xorshift64).
    pub fn noise(seed: u64, n: usize) -> Vec<f32> {
        let mut next = xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        (0..n)
            .map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }

    /// The attention shape of `n_head` query heads over `n_head_kv` KV
    /// heads of `head_dim`.
    pub fn shape(n_head: usize, n_head_kv: usize, head_dim: usize) -> crate::attention::AttnShape {
        crate::attention::AttnShape {
            n_head,
            n_head_kv,
            head_dim,
        }
    }
}
