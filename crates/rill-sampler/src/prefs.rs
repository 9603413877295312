//! Sampling values as a request, the server's flags or a model file give
//! them: each one may be unset, and an unset one falls back to the next
//! source (llama.cpp's order: request, flags, the file's recommendation,
//! then the built-in defaults).

use serde::{Deserialize, Serialize};

use crate::{ConfigError, DryConfig, MirostatConfig, SamplerSeq, DEFAULT_BREAKERS};

/// Optional sampling values, serialized and parsed with the request names
/// (`temperature`, `top_k`, …, `repetition_penalty`); unset ones are left
/// out when serialized, and `null` or a missing field parse as unset.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingPrefs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// HF / llama.cpp multiplicative penalty (`--repeat-penalty`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// llama.cpp's `top_n_sigma`, `typical_p`, `xtc_probability`,
    /// `xtc_threshold` (see [`crate::SamplerConfig`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_n_sigma: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub typical_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xtc_probability: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xtc_threshold: Option<f64>,
    /// llama.cpp's `repeat_last_n`: the penalties' window (0 = the
    /// penalties off, -1 = the whole context).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeat_last_n: Option<i64>,
    /// llama.cpp's `min_keep`: the fewest tokens top-p, min-p, typical and
    /// XTC leave (0 = no floor but the one token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_keep: Option<i64>,
    /// llama.cpp's dynamic temperature (`dynatemp_range`, 0 = off;
    /// `dynatemp_exponent`, default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynatemp_range: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynatemp_exponent: Option<f64>,
    /// llama.cpp's DRY: `dry_multiplier` (0 = off), `dry_base` (below 1:
    /// the default 1.75, as llama-server), `dry_allowed_length`,
    /// `dry_penalty_last_n` (0 = off, -1 = the whole context),
    /// `dry_sequence_breakers` (a non-empty list of strings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_multiplier: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_base: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_allowed_length: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_penalty_last_n: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_sequence_breakers: Option<Vec<String>>,
    /// Mirostat: `mirostat` (0 = off, 1, 2), `mirostat_tau`, `mirostat_eta`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirostat: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirostat_tau: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirostat_eta: Option<f64>,
    /// llama.cpp's `samplers`: the chain's order, names or letters
    /// (see [`crate::Stage`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samplers: Option<SamplerSeq>,
}

impl SamplingPrefs {
    /// `self`'s values, and `lower`'s where `self` has none.
    pub fn or(&self, lower: &SamplingPrefs) -> SamplingPrefs {
        SamplingPrefs {
            temperature: self.temperature.or(lower.temperature),
            top_k: self.top_k.or(lower.top_k),
            top_p: self.top_p.or(lower.top_p),
            min_p: self.min_p.or(lower.min_p),
            presence_penalty: self.presence_penalty.or(lower.presence_penalty),
            frequency_penalty: self.frequency_penalty.or(lower.frequency_penalty),
            repetition_penalty: self.repetition_penalty.or(lower.repetition_penalty),
            top_n_sigma: self.top_n_sigma.or(lower.top_n_sigma),
            typical_p: self.typical_p.or(lower.typical_p),
            xtc_probability: self.xtc_probability.or(lower.xtc_probability),
            xtc_threshold: self.xtc_threshold.or(lower.xtc_threshold),
            repeat_last_n: self.repeat_last_n.or(lower.repeat_last_n),
            min_keep: self.min_keep.or(lower.min_keep),
            dynatemp_range: self.dynatemp_range.or(lower.dynatemp_range),
            dynatemp_exponent: self.dynatemp_exponent.or(lower.dynatemp_exponent),
            dry_multiplier: self.dry_multiplier.or(lower.dry_multiplier),
            dry_base: self.dry_base.or(lower.dry_base),
            dry_allowed_length: self.dry_allowed_length.or(lower.dry_allowed_length),
            dry_penalty_last_n: self.dry_penalty_last_n.or(lower.dry_penalty_last_n),
            dry_sequence_breakers: (self.dry_sequence_breakers.clone())
                .or_else(|| lower.dry_sequence_breakers.clone()),
            mirostat: self.mirostat.or(lower.mirostat),
            mirostat_tau: self.mirostat_tau.or(lower.mirostat_tau),
            mirostat_eta: self.mirostat_eta.or(lower.mirostat_eta),
            samplers: (self.samplers.clone()).or_else(|| lower.samplers.clone()),
        }
    }

    /// `config` with the values of llama.cpp's extra samplers set here
    /// (DRY, Mirostat, dynamic temperature, `repeat_last_n`, `min_keep`,
    /// the order of `samplers`), checked as
    /// llama-server checks them; the sampler's
    /// [`validate`](crate::SamplerConfig::validate) checks the rest.
    pub fn apply_extras(&self, config: &mut crate::SamplerConfig) -> Result<(), ConfigError> {
        let (dry, mirostat) = self.dry_and_mirostat()?;
        config.dry = dry;
        config.mirostat = mirostat;
        if let Some(r) = self.dynatemp_range {
            config.dynatemp_range = r as f32;
        }
        if let Some(e) = self.dynatemp_exponent {
            config.dynatemp_exponent = e as f32;
        }
        if let Some(seq) = &self.samplers {
            config.order = Some(seq.stages()?);
        }
        match self.min_keep {
            None => {}
            Some(n) if n < 0 => {
                return Err(ConfigError {
                    param: "min_keep",
                    message: format!("min_keep must be >= 0 (got {n})"),
                })
            }
            Some(n) => config.min_keep = usize::try_from(n).unwrap_or(usize::MAX),
        }
        match self.repeat_last_n {
            None => {}
            Some(-1) => config.penalty_window = 0,
            Some(0) => {
                config.repetition_penalty = 1.0;
                config.presence_penalty = 0.0;
                config.frequency_penalty = 0.0;
            }
            Some(n) if n < 0 => {
                return Err(ConfigError {
                    param: "repeat_last_n",
                    message: format!("repeat_last_n must be >= -1 (got {n})"),
                })
            }
            Some(n) => config.penalty_window = usize::try_from(n).unwrap_or(usize::MAX),
        }
        Ok(())
    }

    /// DRY's and Mirostat's settings from these values, the defaults where
    /// unset, checked as llama-server checks them (the sampler's
    /// [`validate`](crate::SamplerConfig::validate) checks the rest).
    fn dry_and_mirostat(&self) -> Result<(DryConfig, MirostatConfig), ConfigError> {
        fn bad<T>(param: &'static str, message: String) -> Result<T, ConfigError> {
            Err(ConfigError { param, message })
        }
        let base = DryConfig::default();
        let count = |param: &'static str, v: Option<i64>, default: usize| match v {
            None => Ok(default),
            Some(-1) if param == "dry_penalty_last_n" => Ok(usize::MAX),
            Some(n) if n < 0 => bad(param, format!("{param} must be >= 0 (got {n})")),
            Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        let breakers = match &self.dry_sequence_breakers {
            None => DEFAULT_BREAKERS.iter().map(|s| s.to_string()).collect(),
            Some(list) if list.is_empty() => {
                return bad(
                    "dry_sequence_breakers",
                    "dry_sequence_breakers must be a non-empty array of strings".into(),
                )
            }
            Some(list) => list.clone(),
        };
        let dry = DryConfig {
            multiplier: self.dry_multiplier.map_or(base.multiplier, |m| m as f32),
            base: match self.dry_base {
                Some(b) if b >= 1.0 || !b.is_finite() => b as f32,
                _ => base.base,
            },
            allowed_length: count("dry_allowed_length", self.dry_allowed_length, 2)?,
            penalty_last_n: count("dry_penalty_last_n", self.dry_penalty_last_n, 64)?,
            sequence_breakers: breakers,
        };
        let defaults = MirostatConfig::default();
        let mirostat = MirostatConfig {
            version: match self.mirostat {
                None => 0,
                Some(v @ 0..=2) => v as u8,
                Some(v) => {
                    return bad(
                        "mirostat",
                        format!("mirostat must be 0 (off), 1 or 2 (got {v})"),
                    )
                }
            },
            tau: self.mirostat_tau.map_or(defaults.tau, |t| t as f32),
            eta: self.mirostat_eta.map_or(defaults.eta, |e| e as f32),
        };
        Ok((dry, mirostat))
    }

    /// `temperature 0.6, top_k 20`: what is set, for a startup log; `None`
    /// when nothing is.
    pub fn describe(&self) -> Option<String> {
        let json = serde_json::to_value(self).ok()?;
        let set = json.as_object()?;
        let parts: Vec<String> = set
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_set_value_wins_and_describe_names_the_set_ones() {
        let flags = SamplingPrefs {
            temperature: Some(0.6),
            ..Default::default()
        };
        let file = SamplingPrefs {
            temperature: Some(1.0),
            top_k: Some(20),
            ..Default::default()
        };
        let merged = flags.or(&file);
        assert_eq!(merged.temperature, Some(0.6));
        assert_eq!(merged.top_k, Some(20));
        assert_eq!(merged.top_p, None);
        assert_eq!(
            merged.describe().as_deref(),
            Some("temperature 0.6, top_k 20")
        );
        assert_eq!(SamplingPrefs::default().describe(), None);
        let parsed: SamplingPrefs =
            serde_json::from_str(r#"{"top_p": null, "min_p": 0.05, "other": 1}"#).unwrap();
        assert_eq!(
            parsed,
            SamplingPrefs {
                min_p: Some(0.05),
                ..Default::default()
            }
        );
    }

    #[test]
    fn dry_and_mirostat_take_llama_servers_values() {
        let (dry, miro) = SamplingPrefs::default().dry_and_mirostat().unwrap();
        assert_eq!(
            (dry, miro),
            (DryConfig::default(), MirostatConfig::default())
        );
        assert!(!DryConfig::default().is_on());
        let set = SamplingPrefs {
            dry_multiplier: Some(0.8),
            dry_base: Some(0.5),
            dry_penalty_last_n: Some(-1),
            dry_sequence_breakers: Some(vec!["\n\n".into()]),
            mirostat: Some(2),
            mirostat_tau: Some(3.0),
            ..Default::default()
        };
        let (dry, miro) = set.dry_and_mirostat().unwrap();
        // A base below 1 is the default's, as llama-server does; -1 is the
        // whole context.
        assert_eq!(dry.base, 1.75);
        assert_eq!(dry.penalty_last_n, usize::MAX);
        assert_eq!(dry.sequence_breakers, vec!["\n\n".to_string()]);
        assert!(dry.is_on());
        assert_eq!((miro.version, miro.tau, miro.eta), (2, 3.0, 0.1));
        // The penalties' window: -1 the whole history (0 here), 0 off.
        let mut c = crate::SamplerConfig {
            repetition_penalty: 1.3,
            ..Default::default()
        };
        let window = |n: i64, c: &mut crate::SamplerConfig| {
            let p = SamplingPrefs {
                repeat_last_n: Some(n),
                dynatemp_range: Some(0.5),
                ..Default::default()
            };
            p.apply_extras(c)
        };
        window(5, &mut c).unwrap();
        assert_eq!(
            (c.penalty_window, c.repetition_penalty, c.dynatemp_range),
            (5, 1.3, 0.5)
        );
        window(-1, &mut c).unwrap();
        assert_eq!(c.penalty_window, 0);
        window(0, &mut c).unwrap();
        assert_eq!(c.repetition_penalty, 1.0);
        assert_eq!(window(-2, &mut c).unwrap_err().param, "repeat_last_n");
        for (bad, param) in [
            (
                SamplingPrefs {
                    mirostat: Some(3),
                    ..Default::default()
                },
                "mirostat",
            ),
            (
                SamplingPrefs {
                    dry_allowed_length: Some(-1),
                    ..Default::default()
                },
                "dry_allowed_length",
            ),
            (
                SamplingPrefs {
                    dry_penalty_last_n: Some(-2),
                    ..Default::default()
                },
                "dry_penalty_last_n",
            ),
            (
                SamplingPrefs {
                    dry_sequence_breakers: Some(vec![]),
                    ..Default::default()
                },
                "dry_sequence_breakers",
            ),
        ] {
            assert_eq!(bad.dry_and_mirostat().unwrap_err().param, param);
        }
    }
}
