//! Sampling values as a request, the server's flags or a model file give
//! them: each one may be unset, and an unset one falls back to the next
//! source (llama.cpp's order: request, flags, the file's recommendation,
//! then the built-in defaults).

use serde::{Deserialize, Serialize};

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
        }
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
}
