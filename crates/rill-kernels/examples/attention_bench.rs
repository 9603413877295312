//! Attention prefill micro-benchmark: GFLOP/s of `attend_causal` for a
//! block of new rows at a given depth over an f16 (or f32) cache.
//!
//! `cargo run --release -p rill-kernels --example attention_bench [-- DEPTH ROWS THREADS DTYPE]`
//! (defaults 8192 512 2 f16; the Qwen3.5 geometry: 16 query heads, 2 KV
//! heads of 256; `PAGED=1`: the cache in the sequences' 256-position
//! pages). The FLOPs counted are the causal scores and P·V: two
//! multiply-adds per (query head, key at or before it, dimension) each.

use std::time::Instant;

use rill_dtype::DType;
use rill_kernels::attention::{attend_causal, AttnShape};
use std::sync::Arc;

use rill_kernels::kv::{encode, encoded_len, KvRows, KvSide, KV_PAGE_POSITIONS};
use rill_kernels::{Isa, Threads};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| args.get(i).map_or(d, |s| s.parse().expect("a number"));
    let (depth, m, nt) = (arg(0, 8192), arg(1, 512), arg(2, 2));
    let dtype = match args.get(3).map(String::as_str) {
        Some("f32") => DType::F32,
        _ => DType::F16,
    };
    let shape = AttnShape {
        n_head: 16,
        n_head_kv: 2,
        head_dim: 256,
    };
    let (nh, nkv, hd) = (shape.n_head, shape.n_head_kv, shape.head_dim);
    let len = depth + m;
    let val = |i: usize| ((i.wrapping_mul(2654435761) >> 7) % 2001) as f32 / 1000.0 - 1.0;
    let q: Vec<f32> = (0..m * nh * hd).map(val).collect();
    let kf: Vec<f32> = (0..len * nkv * hd).map(|i| val(i + 7)).collect();
    let vf: Vec<f32> = (0..len * nkv * hd).map(|i| val(i + 13)).collect();
    let coded = |x: &[f32]| {
        let mut b = vec![0u8; encoded_len(dtype, x.len())];
        if dtype != DType::F32 {
            encode(dtype, x, &mut b);
        }
        b
    };
    let (kb, vb) = (coded(&kf), coded(&vf));
    let side = |f: &'static [f32], b: &'static [u8]| KvSide {
        rows: if dtype == DType::F32 {
            KvRows::F32(f)
        } else {
            KvRows::Coded { dtype, bytes: b }
        },
        exact: None,
    };
    let (kf, vf, kb, vb) = (kf.leak(), vf.leak(), kb.leak(), vb.leak());
    // `PAGED=1`: the coded cache in pages of `KV_PAGE_POSITIONS`, as the
    // model's sequences hold it.
    let paged = std::env::var("PAGED").is_ok_and(|v| v == "1") && dtype != DType::F32;
    let page = |b: &[u8]| -> &'static [Arc<Vec<u8>>] {
        let per = encoded_len(dtype, nkv * hd) * KV_PAGE_POSITIONS;
        b.chunks(per)
            .map(|c| Arc::new(c.to_vec()))
            .collect::<Vec<_>>()
            .leak()
    };
    let (kp, vp) = (page(kb), page(vb));
    let side = |f: &'static [f32], b: &'static [u8], p: &'static [Arc<Vec<u8>>]| {
        if paged {
            KvSide {
                rows: KvRows::PagedCoded {
                    dtype,
                    pages: p,
                    page_positions: KV_PAGE_POSITIONS,
                },
                exact: None,
            }
        } else {
            side(f, b)
        }
    };
    let threads = Threads::new(nt);
    let isa = Isa::best();
    let mut scratch = vec![0f32; threads.count() * shape.scratch_per_thread()];
    let mut out = vec![0f32; m * nh * hd];
    let macs: f64 = (0..m).map(|t| (depth + t + 1) as f64).sum::<f64>() * (nh * hd * 2) as f64;
    let mut best = f64::MAX;
    let reps = std::env::var("REPS").map_or(5, |r| r.parse().expect("a number"));
    for _ in 0..reps {
        let t = Instant::now();
        attend_causal(
            isa,
            &threads,
            shape,
            &q,
            m,
            depth,
            side(kf, kb, kp),
            side(vf, vb, vp),
            &mut scratch,
            &mut out,
        );
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{isa} {dtype:?}{} depth {depth} rows {m} threads {nt}: {:.1} ms, {:.1} GFLOP/s",
        if paged { " paged" } else { "" },
        best * 1e3,
        2.0 * macs / best / 1e9
    );
}
