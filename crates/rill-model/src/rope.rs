//! Rotary position embedding with context scaling (none, linear, YaRN), as
//! a value any architecture's attention takes: [`RopeScaling`] says how the
//! positions are scaled (read from the file, overridden by flags), and
//! [`Rope`] holds what a layer needs at run time — one frequency per
//! rotated pair and the factor `cos` and `sin` are multiplied by.
//!
//! YaRN ("YaRN: Efficient Context Window Extension", arXiv 2309.00071) as
//! transformers' `_compute_yarn_parameters` and ggml's `rope_yarn` compute
//! it: pairs that turn fewer than `beta_slow` times over the original
//! context are interpolated (frequency / factor), pairs that turn more than
//! `beta_fast` times are kept, a linear ramp between them; cos and sin are
//! scaled by `0.1·ln(factor) + 1`. Only the rotated dims exist here, so a
//! partial rotary embedding (Qwen3.5's 64 of 256) is scaled on its own
//! dims, as both references do.

use crate::error::ModelError;

/// How rotary positions are scaled past the trained context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RopeScalingType {
    /// The plain rotary embedding.
    #[default]
    None,
    /// Every frequency divided by the factor (position interpolation).
    Linear,
    /// YaRN: interpolate the slow pairs, keep the fast ones, scale cos/sin.
    Yarn,
}

impl RopeScalingType {
    pub fn name(self) -> &'static str {
        match self {
            RopeScalingType::None => "none",
            RopeScalingType::Linear => "linear",
            RopeScalingType::Yarn => "yarn",
        }
    }
}

impl std::str::FromStr for RopeScalingType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(RopeScalingType::None),
            "linear" => Ok(RopeScalingType::Linear),
            "yarn" => Ok(RopeScalingType::Yarn),
            _ => Err(format!(
                "unknown RoPE scaling `{s}` (rill runs none, linear and yarn)"
            )),
        }
    }
}

/// The YaRN defaults of the paper and of both references.
pub const YARN_BETA_FAST: f32 = 32.0;
pub const YARN_BETA_SLOW: f32 = 1.0;

/// How a model's rotary positions are scaled: part of [`crate::ModelConfig`]
/// (from `{arch}.rope.scaling.*` or `rope_parameters`), replaced field by
/// field by a [`RopeOverride`] (the command line).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeScaling {
    pub kind: RopeScalingType,
    /// How many times the context is stretched (llama.cpp's `--rope-scale`,
    /// the inverse of its `rope_freq_scale`); 1 = no scaling.
    pub factor: f32,
    /// The context the model was trained with before scaling (YaRN's
    /// correction range is computed over it); `None`: the file's
    /// `context_length` (as llama.cpp's `n_ctx_orig_yarn`).
    pub orig_ctx: Option<usize>,
    /// How much of YaRN's extrapolation ramp is used (0 = linear
    /// interpolation only); `None`: 1 with YaRN, 0 otherwise.
    pub ext_factor: Option<f32>,
    /// What cos and sin are multiplied by (transformers' `attention_factor`);
    /// `None`: `0.1·ln(factor) + 1` with YaRN (1 when factor ≤ 1), else 1.
    pub attn_factor: Option<f32>,
    /// A further multiplier of cos and sin (`{arch}.rope.scaling.attn_factor`,
    /// llama.cpp's `rope_attn_factor`).
    pub attn_scale: f32,
    /// Pairs turning more than this often over the original context keep
    /// their frequency.
    pub beta_fast: f32,
    /// Pairs turning less than this often are interpolated fully.
    pub beta_slow: f32,
}

impl Default for RopeScaling {
    fn default() -> Self {
        RopeScaling {
            kind: RopeScalingType::None,
            factor: 1.0,
            orig_ctx: None,
            ext_factor: None,
            attn_factor: None,
            attn_scale: 1.0,
            beta_fast: YARN_BETA_FAST,
            beta_slow: YARN_BETA_SLOW,
        }
    }
}

/// Settings that replace the file's (`--rope-scaling`, `--rope-scale`,
/// `--yarn-orig-ctx`, `--yarn-ext-factor`, `--yarn-attn-factor`,
/// `--yarn-beta-fast`, `--yarn-beta-slow`, as llama.cpp names them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeOverride {
    pub kind: Option<RopeScalingType>,
    pub factor: Option<f32>,
    pub orig_ctx: Option<usize>,
    pub ext_factor: Option<f32>,
    pub attn_factor: Option<f32>,
    pub beta_fast: Option<f32>,
    pub beta_slow: Option<f32>,
}

impl RopeOverride {
    pub fn is_empty(&self) -> bool {
        *self == RopeOverride::default()
    }
}

impl RopeScaling {
    /// This scaling with `o`'s settings in place of its own. A factor given
    /// for a file that scales nothing scales linearly (llama.cpp's default
    /// type); `--rope-scaling none` turns any factor off.
    pub fn with(mut self, o: &RopeOverride) -> RopeScaling {
        if let Some(f) = o.factor {
            self.factor = f;
            if self.kind == RopeScalingType::None && o.kind.is_none() {
                self.kind = RopeScalingType::Linear;
            }
        }
        if let Some(k) = o.kind {
            self.kind = k;
        }
        if self.kind == RopeScalingType::None {
            self.factor = 1.0;
        }
        self.orig_ctx = o.orig_ctx.or(self.orig_ctx);
        self.ext_factor = o.ext_factor.or(self.ext_factor);
        self.attn_factor = o.attn_factor.or(self.attn_factor);
        self.beta_fast = o.beta_fast.unwrap_or(self.beta_fast);
        self.beta_slow = o.beta_slow.unwrap_or(self.beta_slow);
        self
    }

    /// Refuse settings no rotary embedding can use.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |s: String| Err(ModelError::Inconsistent(s));
        let finite_pos = |x: f32| x.is_finite() && x > 0.0;
        if !finite_pos(self.factor) {
            return bad(format!("RoPE scaling factor {} (must be > 0)", self.factor));
        }
        if self.orig_ctx == Some(0) {
            return bad("YaRN original context 0".into());
        }
        for (name, v) in [
            ("YaRN extrapolation factor", self.ext_factor),
            ("YaRN attention factor", self.attn_factor),
            ("RoPE attention factor", Some(self.attn_scale)),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return bad(format!("{name} {v} (must be ≥ 0)"));
                }
            }
        }
        if !finite_pos(self.beta_fast) || !finite_pos(self.beta_slow) {
            return bad(format!(
                "YaRN beta_fast {} / beta_slow {} (must be > 0)",
                self.beta_fast, self.beta_slow
            ));
        }
        Ok(())
    }

    /// The context this scaling is meant for: the original context times
    /// the factor (llama.cpp's `n_ctx_orig_yarn / rope_freq_scale`).
    pub fn scaled_context(&self, n_ctx_train: usize) -> usize {
        let orig = self.orig_ctx.unwrap_or(n_ctx_train);
        (orig as f64 * self.factor as f64).round() as usize
    }

    /// One line for the logs: `yarn ×4 over 32768` or `none`.
    pub fn describe(&self, n_ctx_train: usize) -> String {
        match self.kind {
            RopeScalingType::None => "none".into(),
            RopeScalingType::Linear => format!("linear ×{}", self.factor),
            RopeScalingType::Yarn => format!(
                "yarn ×{} over an original context of {}",
                self.factor,
                self.orig_ctx.unwrap_or(n_ctx_train)
            ),
        }
    }

    fn ext(&self) -> f32 {
        self.ext_factor.unwrap_or(match self.kind {
            RopeScalingType::Yarn => 1.0,
            _ => 0.0,
        })
    }
}

/// What a rotary layer needs at run time: `inv_freq[i]` is the angle pair
/// `i` turns per position, `mscale` multiplies its cos and sin.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    pub inv_freq: Vec<f32>,
    pub mscale: f32,
}

impl Rope {
    /// The rotary embedding of a model's attention layers.
    pub fn of(c: &crate::ModelConfig) -> Rope {
        Rope::new(c.rope_theta, c.n_rot, &c.rope_scaling, c.n_ctx_train)
    }

    /// The rotary embedding over `n_rot` dims (pairs `i` and `i + n_rot/2`)
    /// with base `theta`, scaled as `s` says; `n_ctx_train` stands for a
    /// missing original context.
    pub fn new(theta: f32, n_rot: usize, s: &RopeScaling, n_ctx_train: usize) -> Rope {
        let half = n_rot / 2;
        // f32 throughout, in the order transformers computes it.
        let pos_freq: Vec<f32> = (0..half)
            .map(|i| theta.powf((2 * i) as f32 / n_rot as f32))
            .collect();
        let extrapolated = pos_freq.iter().map(|&p| 1.0 / p);
        let mut mscale = s.attn_scale;
        let inv_freq = match s.kind {
            RopeScalingType::None => extrapolated.collect(),
            RopeScalingType::Linear => {
                mscale *= s.attn_factor.unwrap_or(1.0);
                pos_freq.iter().map(|&p| 1.0 / (s.factor * p)).collect()
            }
            RopeScalingType::Yarn => {
                let ext = s.ext();
                let orig = s.orig_ctx.unwrap_or(n_ctx_train).max(1);
                let (low, high) = yarn_correction_range(
                    s.beta_fast as f64,
                    s.beta_slow as f64,
                    n_rot,
                    theta as f64,
                    orig,
                );
                let default_attn = if ext != 0.0 && s.factor > 1.0 {
                    0.1 * s.factor.ln() + 1.0
                } else {
                    1.0
                };
                mscale *= s.attn_factor.unwrap_or(default_attn);
                let span = if high == low { 0.001 } else { high - low };
                pos_freq
                    .iter()
                    .zip(extrapolated)
                    .enumerate()
                    .map(|(i, (&p, extra))| {
                        let interp = 1.0 / (s.factor * p);
                        let ramp = ((i as f32 - low) / span).clamp(0.0, 1.0);
                        // How much of the pair keeps its own frequency.
                        let keep = (1.0 - ramp) * ext;
                        interp * (1.0 - keep) + extra * keep
                    })
                    .collect()
            }
        };
        Rope { inv_freq, mscale }
    }
}

/// The pair indices between which YaRN's ramp runs: where a pair turns
/// `beta_fast` and `beta_slow` times over `orig` positions, floored and
/// ceiled, clamped to the rotated pairs.
fn yarn_correction_range(
    beta_fast: f64,
    beta_slow: f64,
    n_rot: usize,
    theta: f64,
    orig: usize,
) -> (f32, f32) {
    let dim = |rotations: f64| {
        n_rot as f64 * (orig as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
            / (2.0 * theta.ln())
    };
    let low = dim(beta_fast).floor().max(0.0);
    let high = dim(beta_slow).ceil().min(n_rot as f64 - 1.0);
    (low as f32, high as f32)
}

/// Most rotary pairs a [`Rotation`] keeps (head_dim 512, fully rotated);
/// more are rotated as they come.
const MAX_ROPE_PAIRS: usize = 256;

/// One position's rotation, `sin` and `cos` of each pair's angle (times the
/// rope's `mscale`), for every head of a row: the values [`rope_neox`]
/// computes per head.
pub(crate) struct Rotation<'f> {
    rope: &'f Rope,
    pos: usize,
    sin: [f32; MAX_ROPE_PAIRS],
    cos: [f32; MAX_ROPE_PAIRS],
}

impl<'f> Rotation<'f> {
    pub fn new(rope: &'f Rope) -> Rotation<'f> {
        Rotation {
            rope,
            pos: 0,
            sin: [0.0; MAX_ROPE_PAIRS],
            cos: [0.0; MAX_ROPE_PAIRS],
        }
    }

    pub fn set(&mut self, pos: usize) {
        self.pos = pos;
        if self.rope.inv_freq.len() <= MAX_ROPE_PAIRS {
            for (i, &f) in self.rope.inv_freq.iter().enumerate() {
                (self.sin[i], self.cos[i]) = sin_cos(pos, f, self.rope.mscale);
            }
        }
    }

    /// [`rope_neox`] at the last [`set`](Self::set)'s position.
    pub fn apply(&self, x: &mut [f32]) {
        let half = self.rope.inv_freq.len();
        if half > MAX_ROPE_PAIRS {
            return rope_neox(x, self.pos, self.rope);
        }
        for i in 0..half {
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * self.cos[i] - b * self.sin[i];
            x[i + half] = a * self.sin[i] + b * self.cos[i];
        }
    }
}

/// The scaled sin and cos of pair frequency `f` at `pos`.
#[inline]
fn sin_cos(pos: usize, f: f32, mscale: f32) -> (f32, f32) {
    // f32 angle, as the references compute it; scaled after, as they do.
    let (s, c) = (pos as f32 * f).sin_cos();
    (s * mscale, c * mscale)
}

/// Rotate the first `2·inv_freq.len()` dims of `x` (NeoX pairing: i with
/// i + rot/2); the rest pass through.
pub(crate) fn rope_neox(x: &mut [f32], pos: usize, rope: &Rope) {
    let half = rope.inv_freq.len();
    for (i, &f) in rope.inv_freq.iter().enumerate() {
        let (sin, cos) = sin_cos(pos, f, rope.mscale);
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * cos - b * sin;
        x[i + half] = a * sin + b * cos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(theta: f32, n_rot: usize) -> Rope {
        Rope::new(theta, n_rot, &RopeScaling::default(), 4096)
    }

    #[test]
    fn a_rows_rotation_gives_rope_neox_bits() {
        for rope in [
            plain(1e7, 64),
            Rope::new(
                1e4,
                64,
                &RopeScaling {
                    kind: RopeScalingType::Yarn,
                    factor: 4.0,
                    orig_ctx: Some(64),
                    ..Default::default()
                },
                256,
            ),
        ] {
            let x: Vec<f32> = (0..256).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut rot = Rotation::new(&rope);
            for pos in [0, 1, 17, 4095, 262_143] {
                rot.set(pos);
                let (mut a, mut b) = (x.clone(), x.clone());
                rope_neox(&mut a, pos, &rope);
                rot.apply(&mut b);
                assert!(
                    a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "pos {pos}"
                );
            }
        }
    }

    #[test]
    fn rope_rotates_pairs_and_keeps_norm() {
        let rope = Rope {
            inv_freq: vec![1.0, 0.01],
            mscale: 1.0,
        };
        let mut x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let norm0: f32 = x[..4].iter().map(|v| v * v).sum();
        rope_neox(&mut x, 3, &rope);
        let norm1: f32 = x[..4].iter().map(|v| v * v).sum();
        assert!((norm0 - norm1).abs() < 1e-4);
        // dims past the rotary part pass through
        assert_eq!(&x[4..], &[5.0, 6.0]);
        // pair (0, 2) rotated by angle 3
        let (s, c) = 3f32.sin_cos();
        assert!((x[0] - (1.0 * c - 3.0 * s)).abs() < 1e-6);
        assert!((x[2] - (1.0 * s + 3.0 * c)).abs() < 1e-6);
    }

    /// The formulas by hand, in f64, for a case whose ramp is inside the
    /// pairs: theta 1e4, 32 rotated dims, original context 64, factor 4.
    #[test]
    fn yarn_frequencies_follow_the_paper() {
        let s = RopeScaling {
            kind: RopeScalingType::Yarn,
            factor: 4.0,
            orig_ctx: Some(64),
            ..Default::default()
        };
        let rope = Rope::new(1e4, 32, &s, 256);
        // low = floor(32·ln(64/(32·2π)) / (2·ln 1e4)) < 0 → 0;
        // high = ceil(32·ln(64/(2π)) / (2·ln 1e4)) = ceil(4.03) = 5.
        assert_eq!(yarn_correction_range(32.0, 1.0, 32, 1e4, 64), (0.0, 5.0));
        for (i, &f) in rope.inv_freq.iter().enumerate() {
            let base = 1e4f64.powf(-(2.0 * i as f64) / 32.0);
            let keep = 1.0 - (i as f64 / 5.0).clamp(0.0, 1.0);
            let want = base / 4.0 * (1.0 - keep) + base * keep;
            assert!(((f as f64 - want) / want).abs() < 1e-6, "pair {i}");
        }
        assert!((rope.mscale - (0.1 * 4f32.ln() + 1.0)).abs() < 1e-7);
        // An explicit attention factor replaces the default one.
        let r2 = Rope::new(
            1e4,
            32,
            &RopeScaling {
                attn_factor: Some(1.0),
                ..s
            },
            256,
        );
        assert_eq!(r2.mscale, 1.0);
        assert_eq!(r2.inv_freq, rope.inv_freq);
    }

    #[test]
    fn linear_divides_and_none_is_the_plain_rope() {
        let lin = RopeScaling {
            kind: RopeScalingType::Linear,
            factor: 2.0,
            ..Default::default()
        };
        let (p, l) = (plain(1e4, 16), Rope::new(1e4, 16, &lin, 0));
        for (a, b) in p.inv_freq.iter().zip(&l.inv_freq) {
            assert!((a / 2.0 - b).abs() <= 1e-7 * a);
        }
        assert_eq!((p.mscale, l.mscale), (1.0, 1.0));
        // `--rope-scaling none` turns a file's YaRN off entirely.
        let off = RopeScaling {
            kind: RopeScalingType::Yarn,
            factor: 4.0,
            ..Default::default()
        }
        .with(&RopeOverride {
            kind: Some(RopeScalingType::None),
            ..Default::default()
        });
        assert_eq!(Rope::new(1e4, 16, &off, 0), p);
    }

    #[test]
    fn a_factor_alone_scales_linearly_as_llama_cpp() {
        let s = RopeScaling::default().with(&RopeOverride {
            factor: Some(2.0),
            ..Default::default()
        });
        assert_eq!((s.kind, s.factor), (RopeScalingType::Linear, 2.0));
        let y = RopeScaling::default().with(&RopeOverride {
            kind: Some(RopeScalingType::Yarn),
            factor: Some(4.0),
            orig_ctx: Some(32768),
            ..Default::default()
        });
        assert_eq!(y.scaled_context(262_144), 131_072);
        assert!(RopeScaling {
            factor: 0.0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!("longrope".parse::<RopeScalingType>().is_err());
    }
}
