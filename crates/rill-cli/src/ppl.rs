//! The arithmetic of `rill perplexity`, as llama-perplexity defines it (so
//! the figures compare): per scored position the negative log-likelihood of
//! the next token from the row's log-softmax (maximum in f32, the sum of
//! `expf(l − max)` in f64), perplexity `exp(mean nll)` with its standard
//! error, and for KL divergence the base run's log-probabilities stored as
//! llama.cpp stores them (`--kl-divergence-base`: `_logits_`, n_ctx,
//! n_vocab, n_chunk, the tokens, then per scored row two f32 — scale and
//! minimum — and one u16 per vocabulary entry), so a base file written by
//! either tool is read by the other.

use anyhow::{bail, ensure, Context, Result};
use std::io::{Read, Write};

/// `max`, `ln Σ exp(l − max)` and the arg max of one row of logits.
struct RowStats {
    max: f32,
    imax: usize,
    log_sum_exp: f64,
}

fn row_stats(logits: &[f32]) -> RowStats {
    let (mut max, mut imax) = (logits[0], 0);
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max {
            (max, imax) = (l, i);
        }
    }
    let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    RowStats {
        max,
        imax,
        log_sum_exp: sum.ln(),
    }
}

/// The negative log-likelihood of `tok` under a row of logits.
pub fn nll(logits: &[f32], tok: usize) -> f64 {
    let s = row_stats(logits);
    -((logits[tok] - s.max) as f64 - s.log_sum_exp)
}

/// Sums of the nll and its square over scored positions.
#[derive(Default, Debug, Clone, Copy)]
pub struct Perplexity {
    pub sum: f64,
    pub sum2: f64,
    pub count: usize,
}

impl Perplexity {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// `exp(mean nll)` and its standard error (llama-perplexity's
    /// "Final estimate: PPL = … +/- …").
    pub fn value(&self) -> (f64, f64) {
        let n = self.count as f64;
        let mean = self.sum / n;
        let ppl = mean.exp();
        let var = self.sum2 / n - mean * mean;
        let unc = if var > 0.0 && self.count > 1 {
            (var / (n - 1.0)).sqrt() * ppl
        } else {
            0.0
        };
        (ppl, unc)
    }
}

/// u16 values per stored row: two f32 then the vocabulary, padded to even.
pub fn stored_row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// A row's log-probabilities as llama.cpp stores them: the logits from
/// `max − 16` up, on 65,535 steps; returns the nll of `tok`.
pub fn store_row(logits: &[f32], tok: usize, out: &mut [u16]) -> f64 {
    let s = row_stats(logits);
    let min = logits
        .iter()
        .fold(logits[0], |a, &b| a.min(b))
        .max(s.max - 16.0);
    let log_sum_exp = s.log_sum_exp as f32;
    let min_log_prob = min - s.max - log_sum_exp;
    let scale = (s.max - min) / 65535.0;
    out[0..2].copy_from_slice(&split_f32(scale));
    out[2..4].copy_from_slice(&split_f32(min_log_prob));
    let q = &mut out[4..4 + logits.len()];
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (o, &l) in q.iter_mut().zip(logits) {
            *o = if l > min {
                (inv * (l - min)).round_ties_even() as u16
            } else {
                0
            };
        }
    } else {
        q.fill(0);
    }
    (s.max + log_sum_exp - logits[tok]) as f64
}

fn split_f32(x: f32) -> [u16; 2] {
    let b = x.to_le_bytes();
    [
        u16::from_le_bytes([b[0], b[1]]),
        u16::from_le_bytes([b[2], b[3]]),
    ]
}

fn join_f32(a: u16, b: u16) -> f32 {
    let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
    f32::from_le_bytes([a[0], a[1], b[0], b[1]])
}

/// What KL divergence against a base run accumulates.
#[derive(Default, Debug, Clone)]
pub struct Divergence {
    pub ppl: Perplexity,
    pub base: Perplexity,
    pub sum_nll_nll_base: f64,
    pub kld: Vec<f32>,
    pub p_diff: Vec<f32>,
    pub same_top: usize,
}

impl Divergence {
    /// One scored row against its stored base row.
    pub fn add(&mut self, logits: &[f32], base: &[u16], tok: usize) {
        let s = row_stats(logits);
        let log_sum_exp = s.log_sum_exp as f32;
        let (scale, min_log_prob) = (join_f32(base[0], base[1]), join_f32(base[2], base[3]));
        let base = &base[4..4 + logits.len()];
        let nll = s.max + log_sum_exp - logits[tok];
        let nll_base = -(scale * base[tok] as f32 + min_log_prob);
        self.ppl.add(nll as f64);
        self.base.add(nll_base as f64);
        self.sum_nll_nll_base += nll as f64 * nll_base as f64;
        let top = s.max + log_sum_exp;
        let (mut sum, mut imax_base, mut best) = (0f64, 0usize, f32::NEG_INFINITY);
        for (i, (&q, &l)) in base.iter().zip(logits).enumerate() {
            let lp_base = scale * q as f32 + min_log_prob;
            if i == 0 || lp_base > best {
                (best, imax_base) = (lp_base, i);
            }
            if lp_base > -16.0 {
                sum += (lp_base.exp() * (lp_base - l + top)) as f64;
            }
        }
        self.kld.push(sum as f32);
        self.same_top += usize::from(imax_base == s.imax);
        self.p_diff.push((-nll).exp() - (-nll_base).exp());
    }

    /// Mean KL divergence and its standard error.
    pub fn mean_kld(&self) -> (f64, f64) {
        mean_and_error(self.kld.iter().map(|&v| v as f64))
    }

    /// RMS of the top token's probability change.
    pub fn rms_p_diff(&self) -> f64 {
        let n = self.p_diff.len() as f64;
        (self.p_diff.iter().map(|&d| (d as f64).powi(2)).sum::<f64>() / n).sqrt()
    }

    /// `ln(PPL(Q) / PPL(base))` and its standard error (the two runs'
    /// nlls are correlated: their covariance counts).
    pub fn log_ppl_ratio(&self) -> (f64, f64) {
        let n = self.ppl.count as f64;
        let (a, b) = (self.ppl.sum / n, self.base.sum / n);
        let err = |p: &Perplexity, m: f64| ((p.sum2 / n - m * m).max(0.0) / (n - 1.0)).sqrt();
        let cov = (self.sum_nll_nll_base / n - a * b) / (n - 1.0);
        let (ea, eb) = (err(&self.ppl, a), err(&self.base, b));
        (a - b, (ea * ea + eb * eb - 2.0 * cov).max(0.0).sqrt())
    }

    /// The `q` quantile of the KL divergences (linear between ranks).
    pub fn kld_quantile(&self, q: f64) -> f64 {
        let mut v = self.kld.clone();
        v.sort_by(f32::total_cmp);
        let p = q * (v.len() - 1) as f64;
        let (i, f) = (p as usize, p.fract());
        (1.0 - f) * v[i] as f64 + f * v[(i + 1).min(v.len() - 1)] as f64
    }
}

fn mean_and_error(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut s, mut s2, mut n) = (0f64, 0f64, 0f64);
    for x in xs {
        s += x;
        s2 += x * x;
        n += 1.0;
    }
    let m = s / n;
    let var = s2 / n - m * m;
    (
        m,
        if var > 0.0 && n > 10.0 {
            (var / (n - 1.0)).sqrt()
        } else {
            0.0
        },
    )
}

/// The head of a base file: the evaluation's geometry and tokens.
pub struct BaseHeader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    pub tokens: Vec<u32>,
}

pub fn write_header(w: &mut impl Write, h: &BaseHeader) -> Result<()> {
    w.write_all(b"_logits_")?;
    for v in [h.n_ctx, h.n_vocab, h.n_chunk] {
        w.write_all(&(v as i32).to_le_bytes())?;
    }
    for &t in &h.tokens[..h.n_chunk * h.n_ctx] {
        w.write_all(&(t as i32).to_le_bytes())?;
    }
    Ok(())
}

pub fn write_rows(w: &mut impl Write, rows: &[u16]) -> Result<()> {
    let bytes: Vec<u8> = rows.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(w.write_all(&bytes)?)
}

pub fn read_header(r: &mut impl Read) -> Result<BaseHeader> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .context("the base file is too short")?;
    ensure!(
        &magic == b"_logits_",
        "not a log-probability file (no _logits_ header)"
    );
    let mut int = || -> Result<i32> {
        let mut b = [0u8; 4];
        r.read_exact(&mut b)
            .context("the base file's header is cut short")?;
        Ok(i32::from_le_bytes(b))
    };
    let (n_ctx, n_vocab, n_chunk) = (int()?, int()?, int()?);
    if n_ctx < 2 || n_vocab < 1 || n_chunk < 1 {
        bail!("bad base file header: n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}");
    }
    let (n_ctx, n_vocab, n_chunk) = (n_ctx as usize, n_vocab as usize, n_chunk as usize);
    let n = n_ctx
        .checked_mul(n_chunk)
        .filter(|&n| n < (1 << 31))
        .context("bad base file header: too many tokens")?;
    let mut bytes = vec![0u8; n * 4];
    r.read_exact(&mut bytes)
        .context("the base file's tokens are cut short")?;
    let tokens = bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as u32)
        .collect();
    Ok(BaseHeader {
        n_ctx,
        n_vocab,
        n_chunk,
        tokens,
    })
}

pub fn read_rows(r: &mut impl Read, out: &mut [u16]) -> Result<()> {
    let mut bytes = vec![0u8; out.len() * 2];
    r.read_exact(&mut bytes)
        .context("the base file's log-probabilities are cut short")?;
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = u16::from_le_bytes([c[0], c[1]]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seed: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 60.0)
            .collect()
    }

    #[test]
    fn nll_is_the_log_softmax() {
        let l = row(1, 300);
        let z: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        for tok in [0, 17, 299] {
            let want = z.ln() - l[tok] as f64;
            assert!((nll(&l, tok) - want).abs() < 1e-5, "{tok}");
        }
    }

    #[test]
    fn a_row_against_its_own_stored_copy_has_no_divergence() {
        let mut d = Divergence::default();
        for s in 0..20 {
            let l = row(s, 301);
            let mut stored = vec![0u16; stored_row_len(301)];
            let nll_a = store_row(&l, 5, &mut stored);
            assert!((nll_a - nll(&l, 5)).abs() < 1e-4);
            d.add(&l, &stored, 5);
        }
        let (kld, _) = d.mean_kld();
        // The stored copy is the row to 16/65535 in the logits.
        assert!(kld.abs() < 1e-4, "KLD {kld}");
        assert_eq!(d.same_top, 20);
        assert!(d.rms_p_diff() < 1e-3);
        assert!(d.log_ppl_ratio().0.abs() < 1e-3);
        // Against another row it is large and positive.
        let mut other = vec![0u16; stored_row_len(301)];
        store_row(&row(99, 301), 5, &mut other);
        let mut e = Divergence::default();
        e.add(&row(1, 301), &other, 5);
        assert!(e.kld[0] > 0.1, "{}", e.kld[0]);
    }

    #[test]
    fn base_files_round_trip_and_bad_ones_are_refused() {
        let h = BaseHeader {
            n_ctx: 4,
            n_vocab: 3,
            n_chunk: 2,
            tokens: (0..8).collect(),
        };
        let mut buf = Vec::new();
        write_header(&mut buf, &h).unwrap();
        write_rows(&mut buf, &[1, 2, 3]).unwrap();
        let mut r = &buf[..];
        let back = read_header(&mut r).unwrap();
        assert_eq!((back.n_ctx, back.n_vocab, back.n_chunk), (4, 3, 2));
        assert_eq!(back.tokens, h.tokens);
        let mut rows = [0u16; 3];
        read_rows(&mut r, &mut rows).unwrap();
        assert_eq!(rows, [1, 2, 3]);
        assert!(read_rows(&mut r, &mut rows).is_err());
        let e = read_header(&mut &b"_logitz_"[..]).err().unwrap();
        assert!(e.to_string().contains("_logits_"), "{e}");
        let e = read_header(&mut &buf[..12]).err().unwrap();
        assert!(e.to_string().contains("cut short"), "{e}");
    }

    #[test]
    fn perplexity_of_a_uniform_guess_is_the_vocabulary() {
        let mut p = Perplexity::default();
        let l = vec![0f32; 50];
        for t in 0..10 {
            p.add(nll(&l, t));
        }
        let (ppl, unc) = p.value();
        assert!((ppl - 50.0).abs() < 1e-9 && unc < 1e-5, "{ppl} {unc}");
    }
}
