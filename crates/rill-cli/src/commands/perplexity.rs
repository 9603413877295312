//! `rill perplexity`: llama-perplexity's measurement, so the figures compare
//! with llama.cpp's on the same file and text. The text is tokenized once
//! (a BOS in front when the vocabulary asks for one; special tokens not
//! parsed), cut into non-overlapping windows of `-c` tokens (the first
//! replaced by BOS when the vocabulary adds one), each evaluated from an
//! empty state; the second half of each window is scored (the row at
//! position `p` predicts token `p + 1`). With `--kl-divergence-base FILE`
//! the scored rows' log-probabilities are written in llama.cpp's format;
//! with `--kl-divergence` too, the run is compared with that file instead
//! (on the file's own tokens and windows).

use crate::load;
use crate::ppl::{self, BaseHeader, Divergence, Perplexity};
use anyhow::{bail, ensure, Context, Result};
use rill_kernels::Threads;
use rill_model::{Model, Outputs, Rows, Runner, SequenceState, StepOutputs};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Model file (GGUF; any file of a split set). Default: the demo model
    /// inside the binary.
    #[arg(short, long)]
    model: Option<PathBuf>,
    /// The text to measure (plain UTF-8, e.g. wikitext-2's wiki.test.raw).
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Tokens per window (0 = the model's trained context).
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx_size: usize,
    /// Evaluate at most this many windows (default: all the text holds).
    #[arg(long)]
    chunks: Option<usize>,
    #[command(flatten)]
    compute: crate::compute_args::ComputeArgs,
    /// A file of the base run's log-probabilities (llama.cpp's format):
    /// written by this run, or read with `--kl-divergence`.
    #[arg(long)]
    kl_divergence_base: Option<PathBuf>,
    /// Compare with the base run of `--kl-divergence-base` (KL divergence,
    /// perplexity ratio, top-token agreement).
    #[arg(long, requires = "kl_divergence_base")]
    kl_divergence: bool,
    /// Print one JSON object with the results.
    #[arg(long)]
    json: bool,
}

/// Rows of logits asked for per forward call while scoring (bounds the
/// output buffer: 64 × a 248k vocabulary is 64 MB).
const SCORE_ROWS: usize = 64;

/// Evaluates one window and hands each scored row (positions
/// `n_ctx / 2 .. n_ctx − 1`) with the token it predicts to `score`.
struct Windows<'a> {
    model: &'a Model,
    run: Runner,
    kv: rill_model::KvConfig,
    bos: Option<u32>,
    out: StepOutputs,
}

impl Windows<'_> {
    fn eval(&mut self, window: &[u32], mut score: impl FnMut(&[f32], u32)) -> Result<()> {
        let n_ctx = window.len();
        let first = n_ctx / 2;
        let mut input = window.to_vec();
        if let Some(b) = self.bos {
            input[0] = b;
        }
        let mut st = SequenceState::with_kv(self.model, n_ctx, self.kv)?;
        self.model.forward_into(
            &self.run,
            &mut st,
            &input[..first],
            Outputs::NONE,
            &mut self.out,
        )?;
        let v = self.model.config.n_vocab;
        let mut p = first;
        while p < n_ctx - 1 {
            let m = SCORE_ROWS.min(n_ctx - 1 - p);
            let o = Outputs::logits(Rows::All);
            self.model
                .forward_into(&self.run, &mut st, &input[p..p + m], o, &mut self.out)?;
            let logits = self.out.logits(0);
            for i in 0..m {
                score(&logits[i * v..(i + 1) * v], window[p + i + 1]);
            }
            p += m;
        }
        Ok(())
    }
}

pub fn run(a: Args) -> Result<()> {
    let (loaded, kernels, precision, kv) =
        a.compute.open(&a.model, None, rill_load::Prefault::Now)?;
    let model = &loaded.model;
    let tok = &loaded.tokenizer;
    let n_vocab = model.config.n_vocab;
    let bos = if tok.add_bos_token() {
        tok.bos_id()
    } else {
        None
    };
    let mut windows = Windows {
        model,
        run: Runner::new(Threads::new(a.compute.threads), kernels, precision),
        kv,
        bos,
        out: StepOutputs::new(),
    };
    let started = std::time::Instant::now();

    if a.kl_divergence {
        let path = a.kl_divergence_base.as_ref().expect("clap requires it");
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let mut r = BufReader::new(f);
        let h = ppl::read_header(&mut r).with_context(|| format!("{}", path.display()))?;
        ensure!(
            h.n_vocab == n_vocab,
            "{}: the base run has a vocabulary of {}, this model {n_vocab}",
            path.display(),
            h.n_vocab
        );
        if let Some(&bad) = h.tokens.iter().find(|&&t| t as usize >= n_vocab) {
            bail!(
                "{}: token id {bad} is out of the vocabulary",
                path.display()
            );
        }
        let n_chunk = a.chunks.map_or(h.n_chunk, |c| c.min(h.n_chunk));
        eprintln!(
            "rill: KL divergence against {} ({n_chunk} windows of {} tokens)",
            path.display(),
            h.n_ctx
        );
        let nv = ppl::stored_row_len(n_vocab);
        let scored = h.n_ctx - 1 - h.n_ctx / 2;
        let mut base = vec![0u16; scored * nv];
        let mut d = Divergence::default();
        for c in 0..n_chunk {
            ppl::read_rows(&mut r, &mut base)?;
            let mut i = 0;
            windows.eval(&h.tokens[c * h.n_ctx..(c + 1) * h.n_ctx], |l, t| {
                d.add(l, &base[i * nv..(i + 1) * nv], t as usize);
                i += 1;
            })?;
            eprint!("[{}]{:.4},", c + 1, d.ppl.value().0);
        }
        eprintln!();
        report_divergence(&d, a.json, started.elapsed().as_secs_f64());
        return Ok(());
    }

    let Some(path) = &a.file else {
        bail!("give the text to measure with -f FILE");
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {} as UTF-8 text", path.display()))?;
    let mut tokens: Vec<u32> = bos.into_iter().collect();
    tokens.extend(tok.encode(&text, false));
    let n_ctx = load::context(a.ctx_size, model)?;
    ensure!(n_ctx >= 4, "-c must be at least 4 tokens");
    ensure!(
        tokens.len() >= 2 * n_ctx,
        "{} tokenizes to {} tokens; a context of {n_ctx} needs at least {}",
        path.display(),
        tokens.len(),
        2 * n_ctx
    );
    let n_chunk = a
        .chunks
        .map_or(tokens.len() / n_ctx, |c| c.min(tokens.len() / n_ctx));
    eprintln!(
        "rill: perplexity over {n_chunk} windows of {n_ctx} tokens ({} tokens in the text)",
        tokens.len()
    );
    let mut writer = match &a.kl_divergence_base {
        Some(p) => {
            let f = File::create(p).with_context(|| format!("cannot create {}", p.display()))?;
            let mut w = BufWriter::new(f);
            let h = BaseHeader {
                n_ctx,
                n_vocab,
                n_chunk,
                tokens: tokens.clone(),
            };
            ppl::write_header(&mut w, &h)?;
            Some(w)
        }
        None => None,
    };
    let nv = ppl::stored_row_len(n_vocab);
    let mut stored = Vec::new();
    let mut total = Perplexity::default();
    for c in 0..n_chunk {
        stored.clear();
        windows.eval(&tokens[c * n_ctx..(c + 1) * n_ctx], |l, t| {
            if writer.is_some() {
                let at = stored.len();
                stored.resize(at + nv, 0);
                total.add(ppl::store_row(l, t as usize, &mut stored[at..]));
            } else {
                total.add(ppl::nll(l, t as usize));
            }
        })?;
        if let Some(w) = &mut writer {
            ppl::write_rows(w, &stored)?;
        }
        eprint!("[{}]{:.4},", c + 1, total.value().0);
    }
    eprintln!();
    if let Some(mut w) = writer {
        w.flush()?;
    }
    let (value, unc) = total.value();
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        let j = serde_json::json!({
            "ppl": value,
            "ppl_error": unc,
            "n_ctx": n_ctx,
            "chunks": n_chunk,
            "tokens_scored": total.count,
            "text_tokens": tokens.len(),
            "kv": kv.describe(),
            "precision": precision.name(),
            "seconds": secs,
        });
        println!("{j}");
    } else {
        println!("Final estimate: PPL = {value:.4} +/- {unc:.5}");
        eprintln!("rill: {} tokens scored in {secs:.1} s", total.count);
    }
    Ok(())
}

fn report_divergence(d: &Divergence, json: bool, secs: f64) {
    let (ppl_q, ppl_q_unc) = d.ppl.value();
    let (ppl_b, ppl_b_unc) = d.base.value();
    let (ratio, ratio_unc) = d.log_ppl_ratio();
    let (kld, kld_unc) = d.mean_kld();
    let same_top = d.same_top as f64 / d.kld.len() as f64;
    if json {
        let j = serde_json::json!({
            "ppl": ppl_q,
            "ppl_error": ppl_q_unc,
            "ppl_base": ppl_b,
            "ppl_base_error": ppl_b_unc,
            "ln_ppl_ratio": ratio,
            "ln_ppl_ratio_error": ratio_unc,
            "kld_mean": kld,
            "kld_error": kld_unc,
            "kld_median": d.kld_quantile(0.5),
            "kld_99": d.kld_quantile(0.99),
            "kld_max": d.kld_quantile(1.0),
            "rms_dp": d.rms_p_diff(),
            "same_top": same_top,
            "tokens_scored": d.kld.len(),
            "seconds": secs,
        });
        println!("{j}");
        return;
    }
    println!("====== Perplexity statistics ======");
    println!("Mean PPL(Q)                   : {ppl_q:10.6} ± {ppl_q_unc:10.6}");
    println!("Mean PPL(base)                : {ppl_b:10.6} ± {ppl_b_unc:10.6}");
    println!("Mean ln(PPL(Q)/PPL(base))     : {ratio:10.6} ± {ratio_unc:10.6}");
    println!(
        "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
        ratio.exp(),
        ratio.exp() * ratio_unc
    );
    println!();
    println!("====== KL divergence statistics ======");
    println!("Mean    KLD: {kld:10.6} ± {kld_unc:10.6}");
    println!("Maximum KLD: {:10.6}", d.kld_quantile(1.0));
    println!("99.0%   KLD: {:10.6}", d.kld_quantile(0.99));
    println!("Median  KLD: {:10.6}", d.kld_quantile(0.5));
    println!();
    println!("RMS Δp    : {:6.3} %", 100.0 * d.rms_p_diff());
    println!("Same top p: {:6.3} %", 100.0 * same_top);
}
