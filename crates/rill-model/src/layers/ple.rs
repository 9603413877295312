//! PLE, qwen4exp's n-gram memory on one layer (DESIGN.md §2.5): hashed
//! 2- … N-gram ids of the token and its predecessors pick rows of a very
//! large table (read in place from the mapped file, a row at a time), which
//! every residual stream takes in through its own gate, plus a dilated
//! causal conv over recent positions:
//!
//! - predecessor `s` of the token at `p` is `t[p − s]`, or EOS when an EOS
//!   lies in `t[p − s ..= p − 1]` (the window resets at EOS; before the
//!   sequence, EOS); for each n-gram order `n`, `mix = ⊕_{s<n} t_s · m_s`
//!   (the products stay below 2⁶³, as transformers' int64 hashing), and
//!   head `h` of that order reads row `mix mod size_h + offset_h`;
//! - `e` = the heads' rows side by side; `key = W_k e` (a key per stream),
//!   `value = W_v e`;
//! - per stream `g = ⟨norm_key(key)_s, norm_query(x)_s⟩ / √n_embd`,
//!   `gated_s = σ(sign(g)·√max(|g|, 1e-6)) · value`;
//! - `out = gated + silu(conv(norm_conv(gated)))`, the conv depthwise over
//!   `taps` positions `ngram` apart (its history: the last
//!   `(taps − 1)·ngram` normed rows), and `x += out`.

use crate::config::{ModelConfig, PleConfig};
use crate::error::ModelError;
use crate::scratch::{Buf, Exec};
use crate::state_io::{put_f32s, put_u64, Reader};
use crate::weights::{Binder, Experts, Matrix};
use rill_kernels::ops::{rms_norm, sigmoid, silu};
use rill_kernels::{matmul_many_on, MatJob, MatRef};
use std::ops::Range;

pub(crate) struct PleWeights {
    cfg: PleConfig,
    streams: usize,
    n_embd: usize,
    eps: f32,
    /// `[rows × row_dim]`, rows of every head's hash range.
    table: Table,
    /// `[streams·n_embd × heads·row_dim]`.
    key: Matrix,
    /// `[n_embd × heads·row_dim]`.
    value: Matrix,
    norm_key: Vec<f32>,
    norm_query: Vec<f32>,
    norm_conv: Vec<f32>,
    /// `[streams·n_embd × taps]`.
    conv: Vec<f32>,
}

/// The n-gram table: one tensor (GGUF), or shards of equal rows laid end
/// to end (a Hugging Face checkpoint's `ngram_embedding.shard_{k}`).
enum Table {
    One(Matrix),
    Shards {
        parts: Experts,
        rows_per_part: usize,
    },
}

impl Table {
    fn row(&self, row: usize) -> (MatRef<'_>, usize) {
        match self {
            Table::One(m) => (m.view(), row),
            Table::Shards {
                parts,
                rows_per_part,
            } => (parts.expert(row / rows_per_part), row % rows_per_part),
        }
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        match self {
            Table::One(m) => m.byte_len() / m.rows.max(1),
            Table::Shards {
                parts,
                rows_per_part,
            } => parts.bytes_per_expert() / rows_per_part.max(&1),
        }
    }
}

/// A sequence's PLE history.
#[derive(Clone, Debug)]
pub(crate) struct PleState {
    /// The last `ngram − 1` tokens, oldest first (EOS before the sequence).
    tokens: Vec<u32>,
    /// The conv's inputs of the last `(taps − 1)·ngram` positions, oldest
    /// first, `[rows × streams·n_embd]` (zeros before the sequence).
    conv: Vec<f32>,
}

impl PleState {
    pub fn new(c: &ModelConfig) -> PleState {
        let q = c.qwen4exp.as_ref().expect("PLE belongs to qwen4exp");
        let p = q.ple.as_ref().expect("a PLE state needs a PLE layer");
        PleState {
            tokens: vec![p.eos; p.ngram - 1],
            conv: vec![0.0; p.conv_history() * q.streams * c.n_embd],
        }
    }

    pub fn bytes(&self) -> usize {
        self.tokens.len() * 4 + self.conv.len() * 4
    }

    /// The history as bytes (`crate::state_io`'s format).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        put_u64(out, self.tokens.len() as u64);
        for &t in &self.tokens {
            put_u64(out, t as u64);
        }
        put_f32s(out, &self.conv);
    }

    /// A history written by [`write_to`](Self::write_to) into `self` (a
    /// fresh state of the same model: its sizes are the model's).
    pub fn read_into(&mut self, r: &mut Reader) -> Result<(), String> {
        if r.usize()? != self.tokens.len() {
            return Err("a PLE token history of another length".into());
        }
        for t in self.tokens.iter_mut() {
            *t = u32::try_from(r.u64()?).map_err(|_| "a PLE token past u32")?;
        }
        let conv = r.f32s()?;
        if conv.len() != self.conv.len() {
            return Err("a PLE conv history of another size".into());
        }
        self.conv = conv;
        Ok(())
    }
}

/// One sequence's rows of a step and its state.
pub(crate) struct PleSeq<'a> {
    pub rows: Range<usize>,
    pub tokens: &'a [u32],
    pub state: &'a mut PleState,
}

impl PleWeights {
    pub fn bind(b: &Binder, c: &ModelConfig, p: &str) -> Result<PleWeights, ModelError> {
        let q = c.qwen4exp.as_ref().expect("PLE belongs to qwen4exp");
        let cfg = q.ple.clone().expect("bound where the config has PLE");
        let (s, h) = (q.streams, c.n_embd);
        let e = cfg.heads() * cfg.row_dim;
        let name = "per_layer_token_embd.weight";
        let shape = b
            .shape(name)?
            .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        let (table, rows) = match shape[..] {
            [_, rows] => (Table::One(b.table(name, rows as usize, cfg.row_dim)?), rows),
            [_, per, parts] => {
                let n = parts as usize;
                let table = Table::Shards {
                    parts: b.table_parts(name, n, per as usize, cfg.row_dim)?,
                    rows_per_part: per as usize,
                };
                (table, per * parts)
            }
            _ => {
                return Err(ModelError::BadShape {
                    name: name.into(),
                    got: shape,
                    want: vec![cfg.row_dim as u64, 0],
                })
            }
        };
        let end = (cfg.offsets.iter().zip(&cfg.sizes))
            .map(|(o, n)| o + n)
            .max()
            .unwrap_or(0);
        if end > rows {
            return Err(ModelError::Inconsistent(format!(
                "PLE heads reach row {end} of a {rows}-row n-gram table"
            )));
        }
        let largest = cfg.multipliers.iter().max().copied().unwrap_or(0) as u128;
        if (c.n_vocab as u128) * largest > i64::MAX as u128 {
            return Err(ModelError::Inconsistent(
                "PLE multipliers overflow 63 bits for this vocabulary".into(),
            ));
        }
        let taps = cfg.conv_kernel;
        Ok(PleWeights {
            streams: s,
            n_embd: h,
            eps: c.rms_eps,
            table,
            key: b.matrix(&format!("{p}.ple_key.weight"), s * h, e)?,
            value: b.matrix(&format!("{p}.ple_value.weight"), h, e)?,
            norm_key: b.vector(&format!("{p}.ple_norm_key.weight"), s * h)?,
            norm_query: b.vector(&format!("{p}.ple_norm_query.weight"), s * h)?,
            norm_conv: b.vector(&format!("{p}.ple_norm_conv.weight"), s * h)?,
            conv: b.small(
                &format!("{p}.ple_conv1d.weight"),
                &[taps as u64, (s * h) as u64],
            )?,
            cfg,
        })
    }

    /// Bytes one token reads: the projections, the vectors, and one table
    /// row per head (the table itself stays in the file).
    pub fn decode_weight_bytes(&self) -> u64 {
        let rows = self.cfg.heads() * self.table.row_bytes();
        let v =
            self.norm_key.len() + self.norm_query.len() + self.norm_conv.len() + self.conv.len();
        (self.key.byte_len() + self.value.byte_len() + rows + v * 4) as u64
    }

    /// The table row of each head for a token `t0` and its predecessors
    /// `prev` (newest first, already reset at EOS).
    fn rows_of(&self, t0: u32, prev: &[u32], out: &mut [u64]) {
        let p = &self.cfg;
        for n in 2..=p.ngram {
            let mut mix = (t0 as u64).wrapping_mul(p.multipliers[0]);
            for s in 1..n {
                mix ^= (prev[s - 1] as u64).wrapping_mul(p.multipliers[s]);
            }
            let heads = (n - 2) * p.heads_per_ngram..(n - 1) * p.heads_per_ngram;
            for hd in heads {
                out[hd] = mix % p.sizes[hd] + p.offsets[hd];
            }
        }
    }

    /// Add the layer's output to the residual `x` (`[n × streams·n_embd]`).
    pub fn forward<'s>(
        &self,
        ex: Exec<'_>,
        x: &mut [f32],
        n: usize,
        seqs: impl IntoIterator<Item = PleSeq<'s>>,
    ) {
        let p = &self.cfg;
        let (s, h) = (self.streams, self.n_embd);
        let wide = s * h;
        let (heads, rd) = (p.heads(), p.row_dim);
        let e_dim = heads * rd;
        let mut seqs: Vec<PleSeq> = seqs.into_iter().collect();

        // The n-gram rows of every token, gathered from the table.
        let mut emb = Buf::for_output(ex.ws, n * e_dim);
        let mut ids = vec![0u64; heads];
        let mut prev = vec![p.eos; p.ngram - 1];
        for sq in &seqs {
            // `hist`: the state's tokens then this step's, oldest first.
            let hist: Vec<u32> = sq.state.tokens.iter().chain(sq.tokens).copied().collect();
            let back = p.ngram - 1;
            for (i, t) in sq.rows.clone().enumerate() {
                let at = back + i;
                let mut reset = false;
                for (s_, pv) in prev.iter_mut().enumerate() {
                    let tok = hist[at - 1 - s_];
                    reset |= tok == p.eos;
                    *pv = if reset { p.eos } else { tok };
                }
                self.rows_of(hist[at], &prev, &mut ids);
                for (hd, &row) in ids.iter().enumerate() {
                    let dst = &mut emb[t * e_dim + hd * rd..t * e_dim + (hd + 1) * rd];
                    let (part, r) = self.table.row(row as usize);
                    part.dequantize_row(ex.isa, r, dst);
                }
            }
        }
        let mut key = Buf::for_output(ex.ws, n * wide);
        let mut value = Buf::for_output(ex.ws, n * h);
        matmul_many_on(
            ex.isa,
            ex.precision,
            ex.threads,
            &mut [
                MatJob {
                    w: self.key.view(),
                    x: &emb,
                    n,
                    out: &mut key,
                    pick: None,
                },
                MatJob {
                    w: self.value.view(),
                    x: &emb,
                    n,
                    out: &mut value,
                    pick: None,
                },
            ],
        );
        drop(emb);

        // Gates per stream, the gated values and their normed copies.
        let mut gated = Buf::for_output(ex.ws, n * wide);
        let mut normed = Buf::for_output(ex.ws, n * wide);
        let (mut kn, mut qn) = (vec![0f32; h], vec![0f32; h]);
        let scale = 1.0 / (h as f32).sqrt();
        for t in 0..n {
            for st in 0..s {
                let at = t * wide + st * h;
                let w = st * h..(st + 1) * h;
                rms_norm(
                    &key[at..at + h],
                    &self.norm_key[w.clone()],
                    self.eps,
                    &mut kn,
                );
                rms_norm(
                    &x[at..at + h],
                    &self.norm_query[w.clone()],
                    self.eps,
                    &mut qn,
                );
                let g = kn.iter().zip(&qn).map(|(a, b)| a * b).sum::<f32>() * scale;
                let g = g.abs().max(1e-6).sqrt() * sign(g);
                let gate = sigmoid(g);
                let v = &value[t * h..(t + 1) * h];
                for (o, &vi) in gated[at..at + h].iter_mut().zip(v) {
                    *o = gate * vi;
                }
                rms_norm(
                    &gated[at..at + h],
                    &self.norm_conv[w],
                    self.eps,
                    &mut normed[at..at + h],
                );
            }
        }
        drop(key);
        drop(value);

        // The dilated causal conv per sequence, over its history then its
        // rows; then `x += gated + silu(conv)`, and the history moves on.
        let (taps, dil) = (p.conv_kernel, p.ngram);
        let hist_rows = p.conv_history();
        for sq in seqs.iter_mut() {
            let rows = sq.rows.clone();
            let m = rows.len();
            let mut u: Vec<f32> = Vec::with_capacity((hist_rows + m) * wide);
            u.extend_from_slice(&sq.state.conv);
            u.extend_from_slice(&normed[rows.start * wide..rows.end * wide]);
            for i in 0..m {
                let t = rows.start + i;
                let row = &mut x[t * wide..(t + 1) * wide];
                let g = &gated[t * wide..(t + 1) * wide];
                for (ch, xi) in row.iter_mut().enumerate() {
                    let w = &self.conv[ch * taps..(ch + 1) * taps];
                    let mut acc = 0.0f32;
                    for (k, &wk) in w.iter().enumerate() {
                        let src = hist_rows + i - (taps - 1 - k) * dil;
                        acc += wk * u[src * wide + ch];
                    }
                    *xi += g[ch] + silu(acc);
                }
            }
            sq.state.conv.clear();
            sq.state.conv.extend_from_slice(&u[m * wide..]);
            let keep = p.ngram - 1;
            let all: Vec<u32> = sq.state.tokens.iter().chain(sq.tokens).copied().collect();
            sq.state.tokens.clear();
            sq.state.tokens.extend_from_slice(&all[all.len() - keep..]);
        }
    }
}

fn sign(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    }
}
