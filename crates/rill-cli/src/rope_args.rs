//! The RoPE scaling flags every command that runs the model takes, as
//! llama.cpp spells them (`--rope-scaling yarn --rope-scale 4
//! --yarn-orig-ctx 32768`): they replace what the file says, field by field.

use rill_model::{RopeOverride, RopeScalingType};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct RopeArgs {
    /// RoPE scaling: none, linear or yarn (default: what the file says).
    #[arg(long, value_parser = parse_scaling_type, env = "RILL_ROPE_SCALING")]
    pub rope_scaling: Option<RopeScalingType>,
    /// How many times the context is stretched (llama.cpp's `--rope-scale`;
    /// alone, on a file without scaling: linear).
    #[arg(long, value_parser = parse_positive, allow_hyphen_values = true, env = "RILL_ROPE_SCALE")]
    pub rope_scale: Option<f32>,
    /// YaRN: the model's original (unscaled) context; default the file's.
    #[arg(long, value_parser = parse_orig_ctx, env = "RILL_YARN_ORIG_CTX")]
    pub yarn_orig_ctx: Option<usize>,
    /// YaRN: how much of the extrapolation ramp is used (default 1; 0 =
    /// linear interpolation).
    #[arg(long, value_parser = parse_non_negative, allow_hyphen_values = true, env = "RILL_YARN_EXT_FACTOR")]
    pub yarn_ext_factor: Option<f32>,
    /// YaRN: what cos and sin are multiplied by (transformers'
    /// `attention_factor`; default 0.1·ln(factor) + 1).
    #[arg(long, value_parser = parse_non_negative, allow_hyphen_values = true, env = "RILL_YARN_ATTN_FACTOR")]
    pub yarn_attn_factor: Option<f32>,
    /// YaRN: pairs turning more often than this over the original context
    /// keep their frequency (default 32).
    #[arg(long, value_parser = parse_positive, allow_hyphen_values = true, env = "RILL_YARN_BETA_FAST")]
    pub yarn_beta_fast: Option<f32>,
    /// YaRN: pairs turning less often than this are fully interpolated
    /// (default 1).
    #[arg(long, value_parser = parse_positive, allow_hyphen_values = true, env = "RILL_YARN_BETA_SLOW")]
    pub yarn_beta_slow: Option<f32>,
}

fn parse_scaling_type(s: &str) -> Result<RopeScalingType, String> {
    s.parse()
}

fn parse_number(s: &str) -> Result<f32, String> {
    let v: f32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !v.is_finite() {
        return Err(format!("`{s}` is not a finite number"));
    }
    Ok(v)
}

fn parse_positive(s: &str) -> Result<f32, String> {
    let v = parse_number(s)?;
    if v <= 0.0 {
        return Err(format!("{v} must be greater than 0"));
    }
    Ok(v)
}

fn parse_non_negative(s: &str) -> Result<f32, String> {
    let v = parse_number(s)?;
    if v < 0.0 {
        return Err(format!("{v} must not be negative"));
    }
    Ok(v)
}

fn parse_orig_ctx(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) | Err(_) => Err(format!("`{s}` is not a positive number of tokens")),
        Ok(n) => Ok(n),
    }
}

impl RopeArgs {
    pub fn overrides(&self) -> RopeOverride {
        RopeOverride {
            kind: self.rope_scaling,
            factor: self.rope_scale,
            orig_ctx: self.yarn_orig_ctx,
            ext_factor: self.yarn_ext_factor,
            attn_factor: self.yarn_attn_factor,
            beta_fast: self.yarn_beta_fast,
            beta_slow: self.yarn_beta_slow,
        }
    }

    /// Put the flags' settings into `model`, said on stderr when the model
    /// scales its positions at all.
    pub fn apply(&self, model: &mut rill_model::Model) -> anyhow::Result<()> {
        model.override_rope(&self.overrides())?;
        let c = &model.config;
        if c.rope_scaling.kind != RopeScalingType::None {
            eprintln!(
                "rill: RoPE scaling {} (trained context {})",
                c.rope_scaling.describe(c.n_ctx_train),
                c.n_ctx_train
            );
        }
        Ok(())
    }
}
