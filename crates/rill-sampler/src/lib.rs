//! Picking the next token from a row of logits.
//!
//! The chain, in order (as llama.cpp applies it): logit bias →
//! repetition / presence /
//! frequency penalties over the recent history → DRY → top-n-σ → top-k →
//! typical → top-p → min-p → XTC → temperature → a draw from the remaining
//! distribution; a user may reorder or leave out the stages between the
//! bias and the draw ([`SamplerConfig::order`], llama.cpp's `samplers`).
//! With Mirostat on, as in llama.cpp, the chain is logit bias →
//! temperature → Mirostat's own cut and draw. Temperature 0 is
//! greedy (argmax after penalties; ties go to the lower id). A seed makes the
//! draws reproducible.

mod chain;
mod cuts;
mod drawn;
mod dry;
mod logprobs;
mod mirostat;
mod order;
mod prefs;
mod rng;

use std::sync::Arc;

use cuts::{
    keep_at_least_one, min_p_keep, sigma_floor, softmax, softmax_wide, sort_best_first, top_k_into,
    top_p_keep, typical_cut, weight, xtc_cut,
};
pub use drawn::Drawn;
pub use dry::{Breakers, DryConfig, DEFAULT_BREAKERS};
pub use logprobs::{log_softmax, logprobs, Logprobs};
pub use mirostat::MirostatConfig;
pub use order::{order_names, SamplerSeq, Stage, DEFAULT_ORDER};

pub use prefs::SamplingPrefs;
pub use rng::Rng;

/// Sampling parameters. `Default` is greedy.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// Top-n-σ (llama.cpp `--top-nsigma`): keep the logits within `n`
    /// standard deviations of the best (over the finite ones); ≤ 0 = off.
    pub top_n_sigma: f32,
    /// Locally typical sampling (`--typical`): keep the tokens whose
    /// surprise is closest to the entropy, up to this mass; 1.0 = off.
    pub typical_p: f32,
    /// XTC (`--xtc-probability`, `--xtc-threshold`): with this probability
    /// per token, drop every token at or above the threshold's probability
    /// but the least likely of them; 0.0 = off (a threshold over 0.5 too).
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    /// llama.cpp's `min_keep`: top-p, min-p, typical and XTC keep at least
    /// this many tokens (top-k and top-n-σ do not look at it); 0 or 1 =
    /// at least one, as always.
    pub min_keep: usize,
    /// Multiplicative penalty on tokens seen in the window (1.0 = off),
    /// as in HF / llama.cpp: positive logits are divided, negative multiplied.
    pub repetition_penalty: f32,
    /// Subtracted once from every token seen in the window (OpenAI semantics).
    pub presence_penalty: f32,
    /// Subtracted per occurrence in the window.
    pub frequency_penalty: f32,
    /// How many most recent tokens the penalties look at (0 = all).
    pub penalty_window: usize,
    /// Dynamic temperature (llama.cpp's `dynatemp_range`, 0 = off): the
    /// temperature moves within ± this around `temperature` with the
    /// normalised entropy of the kept candidates raised to
    /// `dynatemp_exponent`.
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
    /// DRY, the penalty on extending a repeated sequence (after the
    /// penalties above). Its breakers reach a sampler as tokens
    /// ([`Sampler::with_breakers`]).
    pub dry: DryConfig,
    /// Mirostat (with it on, the penalties, DRY and the cuts are not
    /// applied, as in llama.cpp).
    pub mirostat: MirostatConfig,
    pub seed: u64,
    /// Added to these tokens' logits before anything else (OpenAI's
    /// `logit_bias`, in [-100, 100]); -100 bans the token.
    pub logit_bias: Vec<(u32, f32)>,
    /// The stages after the bias, in order (llama.cpp's `samplers`); a
    /// stage not listed is not applied. `None`: [`DEFAULT_ORDER`].
    pub order: Option<Vec<Stage>>,
}

/// OpenAI's range of a logit bias; the low end bans the token.
pub const MAX_LOGIT_BIAS: f32 = 100.0;

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            top_n_sigma: 0.0,
            typical_p: 1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            min_keep: 0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_window: 64,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            dry: DryConfig::default(),
            mirostat: MirostatConfig::default(),
            seed: 0,
            logit_bias: Vec::new(),
            order: None,
        }
    }
}

/// Why a configuration was refused: the parameter (by its API name) and
/// what is wrong with it. Every front end checks sampling parameters here.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub param: &'static str,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl SamplerConfig {
    /// Check ranges, so bad user input is an error rather than NaNs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |param: &'static str, message: String| Err(ConfigError { param, message });
        let named = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("top_n_sigma", self.top_n_sigma),
            ("typical_p", self.typical_p),
            ("xtc_probability", self.xtc_probability),
            ("xtc_threshold", self.xtc_threshold),
            ("repetition_penalty", self.repetition_penalty),
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("dynatemp_range", self.dynatemp_range),
            ("dynatemp_exponent", self.dynatemp_exponent),
            ("dry_multiplier", self.dry.multiplier),
            ("dry_base", self.dry.base),
            ("mirostat_tau", self.mirostat.tau),
            ("mirostat_eta", self.mirostat.eta),
        ];
        if let Some((name, _)) = named.iter().find(|(_, v)| !v.is_finite()) {
            return bad(name, format!("{name} must be a finite number"));
        }
        if self.temperature < 0.0 {
            return bad(
                "temperature",
                format!("temperature must be >= 0 (got {})", self.temperature),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(
                "top_p",
                format!("top_p must be in (0, 1] (got {})", self.top_p),
            );
        }
        if !(self.typical_p > 0.0 && self.typical_p <= 1.0) {
            return bad(
                "typical_p",
                format!("typical_p must be in (0, 1] (got {})", self.typical_p),
            );
        }
        for (name, v) in [
            ("min_p", self.min_p),
            ("xtc_probability", self.xtc_probability),
            ("xtc_threshold", self.xtc_threshold),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(name, format!("{name} must be in [0, 1] (got {v})"));
            }
        }
        if self.repetition_penalty <= 0.0 {
            return bad(
                "repetition_penalty",
                format!(
                    "repetition_penalty must be > 0 (got {})",
                    self.repetition_penalty
                ),
            );
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(name, format!("{name} must be in [-2, 2] (got {v})"));
            }
        }
        if self.dynatemp_range < 0.0 {
            return bad(
                "dynatemp_range",
                format!("dynatemp_range must be >= 0 (got {})", self.dynatemp_range),
            );
        }
        if self.mirostat.version > 2 {
            return bad(
                "mirostat",
                format!(
                    "mirostat must be 0 (off), 1 or 2 (got {})",
                    self.mirostat.version
                ),
            );
        }
        if self.dry.multiplier < 0.0 {
            return bad(
                "dry_multiplier",
                format!("dry_multiplier must be >= 0 (got {})", self.dry.multiplier),
            );
        }
        for &(id, b) in &self.logit_bias {
            if !(b.is_finite() && (-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(&b)) {
                return bad(
                    "logit_bias",
                    format!("logit_bias of token {id} must be in [-100, 100] (got {b})"),
                );
            }
        }
        Ok(())
    }
}

/// A sampler with its own random stream (and Mirostat's running bound).
#[derive(Clone, Debug)]
pub struct Sampler {
    config: SamplerConfig,
    rng: Rng,
    /// Scratch: (token, logit) candidates.
    cand: Vec<(u32, f32)>,
    /// DRY's sequence breakers as tokens.
    breakers: Arc<Breakers>,
    /// Mirostat's bound on the surprise, in bits.
    mu: f32,
    /// How many of a draw's most likely tokens [`Self::last_draw`] keeps
    /// (`None`: draws are not recorded).
    record: Option<usize>,
    last: Option<Drawn>,
}

impl Sampler {
    /// A sampler for `config`; DRY runs without sequence breakers until
    /// [`with_breakers`](Self::with_breakers) gives them.
    pub fn new(config: SamplerConfig) -> Result<Sampler, ConfigError> {
        config.validate()?;
        let rng = Rng::new(config.seed);
        let mu = 2.0 * config.mirostat.tau;
        Ok(Sampler {
            config,
            rng,
            cand: Vec::new(),
            breakers: Arc::default(),
            mu,
            record: None,
            last: None,
        })
    }

    /// DRY's sequence breakers (the config's, as [`Breakers::build`] makes
    /// them of the model's vocabulary).
    pub fn with_breakers(mut self, breakers: Arc<Breakers>) -> Sampler {
        self.breakers = breakers;
        self
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// It always takes the highest (biased, penalised) logit.
    pub fn is_greedy(&self) -> bool {
        // Dynamic temperature reaches above 0 even from 0 (llama.cpp). In
        // an order of the user's, temperature 0 keeps the best token where
        // it stands (after an XTC or a typical cut before it, say), or is
        // not applied at all.
        self.config.temperature == 0.0
            && self.config.dynatemp_range <= 0.0
            && self.config.custom_order().is_none()
    }

    /// It always takes the highest logit of the row as given: greedy, with
    /// no bias and no penalties.
    pub fn takes_the_best_logit(&self) -> bool {
        let c = &self.config;
        self.is_greedy()
            && c.logit_bias.is_empty()
            && c.repetition_penalty == 1.0
            && c.presence_penalty == 0.0
            && c.frequency_penalty == 0.0
            && !c.dry.is_on()
    }

    /// Mirostat's update for a drawn token of probability `p` (in the
    /// distribution it was drawn from).
    fn observe(&mut self, p: f64) {
        let m = self.config.mirostat;
        if m.version != 0 {
            let surprise = -p.log2() as f32;
            self.mu -= m.eta * (surprise - m.tau);
        }
    }

    /// Pick the next token given `logits` (one row) and the tokens so far.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let probs = match self.draw(logits, history) {
            Draw::Greedy(t) => {
                self.note(t, None);
                return t;
            }
            Draw::From(probs) => probs,
        };
        let r = self.rng.next_f64();
        let mut cum = 0.0;
        let mut pick = probs.len() - 1;
        for (i, p) in probs.iter().enumerate() {
            cum += p;
            if r < cum {
                pick = i;
                break;
            }
        }
        self.observe(probs[pick]);
        let token = self.cand[pick].0;
        self.note(token, Some(&probs));
        token
    }

    /// Speculative verification of `draft`, a token a draft model proposed
    /// with certainty (greedy drafting: its proposal q is one-hot). With
    /// p the distribution [`sample`](Self::sample) draws from, the draft is
    /// kept with probability min(1, p/q) = p(draft); otherwise the token is
    /// drawn from the normalised residual max(0, p − q), which is p with the
    /// draft taken out. So the token returned is distributed exactly as
    /// `sample`'s (Leviathan et al. 2023, Chen et al. 2023); greedy returns
    /// what `sample` returns. The caller keeps going while the result equals
    /// the draft.
    pub fn verify(&mut self, logits: &[f32], history: &[u32], draft: u32) -> u32 {
        let probs = match self.draw(logits, history) {
            Draw::Greedy(t) => {
                self.note(t, None);
                return t;
            }
            Draw::From(probs) => probs,
        };
        let p_draft = (self.cand.iter().zip(&probs))
            .find(|(c, _)| c.0 == draft)
            .map_or(0.0, |(_, &p)| p);
        if self.rng.next_f64() < p_draft {
            self.observe(p_draft);
            self.note(draft, Some(&probs));
            return draft;
        }
        // The residual: every candidate but the draft, renormalised.
        let r = self.rng.next_f64() * (1.0 - p_draft);
        let mut cum = 0.0;
        let mut last = None;
        for (c, &p) in self.cand.iter().zip(&probs) {
            if c.0 == draft {
                continue;
            }
            cum += p;
            last = Some((c.0, p));
            if r < cum {
                break;
            }
        }
        // Past the loop: rounding at the top end, or a distribution that is
        // all draft (then p_draft = 1 and it was kept above).
        let (token, p) = last.unwrap_or((draft, p_draft));
        self.observe(p);
        self.note(token, Some(&probs));
        token
    }

    /// The candidates (`self.cand`, best first) and their probabilities
    /// after top-k → top-p → min-p → temperature, for a penalised row.
    /// What a pick from `logits` after `history` comes down to, bias and
    /// penalties applied: the greedy token at temperature 0, else the
    /// candidates' probabilities (`self.cand`, in that order).
    fn draw(&mut self, logits: &[f32], history: &[u32]) -> Draw {
        if self.takes_the_best_logit() {
            // Nothing to change in the row: no copy of it.
            return Draw::Greedy(argmax(logits));
        }
        let mut row = logits.to_vec();
        apply_bias(&self.config, &mut row);
        if self.config.mirostat.version != 0 {
            let t = self.config.temperature;
            if t == 0.0 {
                return Draw::Greedy(argmax(&row));
            }
            row.iter_mut().for_each(|l| *l /= t);
            let m = self.config.mirostat;
            return Draw::From(mirostat::distribution(&m, self.mu, &row, &mut self.cand));
        }
        if let Some(order) = self.config.custom_order() {
            let order = order.to_vec();
            return Draw::From(self.chain(row, history, &order));
        }
        apply_penalties(&self.config, &mut row, history);
        dry::apply(&self.config.dry, &self.breakers, &mut row, history);
        if self.is_greedy() {
            return Draw::Greedy(argmax(&row));
        }
        Draw::From(self.distribution(&row))
    }

    /// The candidates (`self.cand`) and their probabilities at the
    /// temperature. With a cut (top-n-σ, top-k, typical, top-p, min-p,
    /// XTC) the candidates are the kept ones, best first (ties to the lower
    /// id), each cut decided on the probabilities at temperature 1 over
    /// what the cuts before it kept, as in llama.cpp. Without one, every
    /// token, in id order. The whole vocabulary is sorted only for typical
    /// sampling without top-k: the top-k are picked by a scan, and top-p /
    /// min-p first pass over the tokens a logit threshold shows they must
    /// keep (sorting 248k candidates took ~10 ms a token).
    fn distribution(&mut self, row: &[f32]) -> Vec<f64> {
        let c = self.config.cuts();
        let v = row.len();
        let top_k = match c.top_k {
            k if k > 0 && k < v => k,
            _ => v,
        };
        self.cand.clear();
        let typical = c.typical_p < 1.0;
        let xtc = c.xtc_probability > 0.0 && c.xtc_threshold <= 0.5;
        let sigma = c.top_n_sigma > 0.0;
        if top_k == v && c.top_p >= 1.0 && c.min_p <= 0.0 && !typical && !xtc && !sigma {
            self.cand
                .extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
            return match self.temperature_now(c.temperature) {
                t if t > 0.0 => softmax_wide(&self.cand, t),
                _ => self.only_the_best(),
            };
        }
        let floor = match sigma {
            true => sigma_floor(row, c.top_n_sigma),
            false => f32::NEG_INFINITY,
        };
        let mut probs = if top_k < v || typical {
            if top_k < v {
                top_k_into(row, top_k, &mut self.cand);
            } else {
                self.cand
                    .extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
                sort_best_first(&mut self.cand);
            }
            keep_at_least_one(&mut self.cand, |l| l >= floor);
            softmax(&self.cand, 1.0)
        } else {
            self.kept_superset(row, floor)
        };
        if typical {
            probs = typical_cut(&mut self.cand, &probs, c.typical_p, c.min_keep);
        }
        let mut keep = probs.len();
        if c.top_p < 1.0 {
            keep = top_p_keep(&probs, c.top_p, c.min_keep);
        }
        if c.min_p > 0.0 {
            keep = keep.min(min_p_keep(&probs, c.min_p, c.min_keep));
        }
        self.cand.truncate(keep.max(1));
        if xtc && self.cand.len() > 1 && self.rng.next_f64() < c.xtc_probability as f64 {
            xtc_cut(&mut self.cand, c.xtc_threshold, c.min_keep);
        }
        match self.temperature_now(c.temperature) {
            t if t > 0.0 => softmax(&self.cand, t),
            _ => self.only_the_best(),
        }
    }

    /// The temperature of this draw: the configured one, or with dynamic
    /// temperature on, `min + (max − min) · (H / ln n)^exponent` over the
    /// candidates' probabilities at temperature 1 (H their entropy, n how
    /// many; min = max(0, t − range), max = t + range), as llama.cpp's
    /// `temp_ext`.
    fn temperature_now(&self, t: f32) -> f32 {
        let c = &self.config;
        if c.dynatemp_range <= 0.0 || self.cand.len() <= 1 {
            return t;
        }
        let p = softmax_wide(&self.cand, 1.0);
        let entropy: f64 = -p
            .iter()
            .filter(|&&p| p > 0.0)
            .map(|&p| p * p.ln())
            .sum::<f64>();
        let normalised = (entropy / (self.cand.len() as f64).ln()) as f32;
        let (lo, hi) = ((t - c.dynatemp_range).max(0.0), t + c.dynatemp_range);
        lo + (hi - lo) * normalised.powf(c.dynatemp_exponent)
    }

    /// A temperature of 0 reached by dynamic temperature: the best
    /// candidate (ties to the lower id) alone.
    fn only_the_best(&mut self) -> Vec<f64> {
        sort_best_first(&mut self.cand);
        self.cand.truncate(1);
        vec![1.0]
    }

    /// Without top-k: the tokens that top-p and min-p may keep (`self.cand`,
    /// best first), and their probabilities at temperature 1 over the whole
    /// row. A token is kept only if every better one is, so the kept ones
    /// are those above some logit: min-p's bound is `max + ln(min_p)`, and
    /// top-p's the highest threshold (in steps of 4 below the max) whose
    /// tokens hold at least `top_p` of the mass. (Bounds are a little loose:
    /// the exact cuts follow on these.)
    fn kept_superset(&mut self, row: &[f32], floor: f32) -> Vec<f64> {
        let c = &self.config;
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            // −∞ everywhere, or +∞: the plain path.
            self.cand
                .extend(row.iter().enumerate().map(|(i, &l)| (i as u32, l)));
            sort_best_first(&mut self.cand);
            keep_at_least_one(&mut self.cand, |l| l >= floor);
            return softmax(&self.cand, 1.0);
        }
        // (The best token is never below top-n-σ's floor.)
        let weight = |l: f32| if l >= floor { weight(l - max) } else { 0.0 };
        let z: f64 = row.iter().map(|&l| weight(l) as f64).sum();
        let mut bound = floor;
        if c.min_p > 0.0 {
            bound = bound.max(max + c.min_p.ln() - 1e-3);
        }
        if c.top_p < 1.0 {
            let mut step = 4.0;
            loop {
                let t = max - step;
                if t <= bound || step > 90.0 {
                    break;
                }
                let mass: f64 = row
                    .iter()
                    .filter(|&&l| l >= t)
                    .map(|&l| weight(l) as f64)
                    .sum();
                if mass / z >= c.top_p as f64 + 1e-4 {
                    bound = t;
                    break;
                }
                step += 4.0;
            }
        }
        // Too few above the bound for `min_keep`: every token top-n-σ keeps.
        if c.min_keep > 1 && row.iter().filter(|&&l| l >= bound || l.is_nan()).count() < c.min_keep
        {
            bound = floor;
        }
        self.cand.extend(
            (row.iter().enumerate())
                .filter(|&(_, &l)| l >= bound || l.is_nan())
                .map(|(i, &l)| (i as u32, l)),
        );
        sort_best_first(&mut self.cand);
        self.cand
            .iter()
            .map(|&(_, l)| ((l as f64 - max as f64).exp()) / z)
            .collect()
    }
}

impl SamplerConfig {
    /// The order when it is not llama.cpp's default one.
    pub fn custom_order(&self) -> Option<&[Stage]> {
        self.order.as_deref().filter(|o| *o != DEFAULT_ORDER)
    }

    /// The cut parameters, apart from the bias list (copied per token).
    fn cuts(&self) -> Cuts {
        Cuts {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            top_n_sigma: self.top_n_sigma,
            typical_p: self.typical_p,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            min_keep: self.min_keep,
        }
    }
}

/// See [`SamplerConfig::cuts`].
struct Cuts {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    top_n_sigma: f32,
    typical_p: f32,
    xtc_probability: f32,
    xtc_threshold: f32,
    min_keep: usize,
}

/// The logit bias: added, or -∞ at -100 (a ban, as OpenAI means it).
/// Ids outside the row are the caller's to refuse; here they are skipped.
fn apply_bias(c: &SamplerConfig, row: &mut [f32]) {
    for &(id, b) in &c.logit_bias {
        if let Some(l) = row.get_mut(id as usize) {
            *l = if b <= -MAX_LOGIT_BIAS {
                f32::NEG_INFINITY
            } else {
                *l + b
            };
        }
    }
}

fn apply_penalties(c: &SamplerConfig, row: &mut [f32], history: &[u32]) {
    let off =
        c.repetition_penalty == 1.0 && c.presence_penalty == 0.0 && c.frequency_penalty == 0.0;
    if off || history.is_empty() {
        return;
    }
    let window = if c.penalty_window == 0 {
        history
    } else {
        &history[history.len().saturating_sub(c.penalty_window)..]
    };
    let mut counts: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    for &t in window {
        *counts.entry(t).or_default() += 1;
    }
    for (&t, &n) in &counts {
        let Some(l) = row.get_mut(t as usize) else {
            continue;
        };
        if *l > 0.0 {
            *l /= c.repetition_penalty;
        } else {
            *l *= c.repetition_penalty;
        }
        *l -= c.presence_penalty + c.frequency_penalty * n as f32;
    }
}

/// See [`Sampler::draw`].
enum Draw {
    Greedy(u32),
    From(Vec<f64>),
}

/// Index of the largest logit; ties go to the lower id.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests;
