//! Checking request parameters and turning them into an engine request.

use super::types::SamplingFields;
use crate::errors::ApiError;
use rill_engine::Request;
use rill_sampler::SamplerConfig;
pub use rill_sampler::SamplingPrefs;

/// Most alternatives per token a client may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: i64 = 20;
/// Most stop strings per request.
pub const MAX_STOPS: usize = 16;
/// Longest stop string, in bytes (the engine scans them at every token).
pub const MAX_STOP_BYTES: usize = 1024;

fn finite(name: &str, v: Option<f64>) -> Result<Option<f64>, ApiError> {
    match v {
        Some(x) if !x.is_finite() => Err(ApiError::bad_param(
            name,
            format!("{name} must be a finite number"),
        )),
        other => Ok(other),
    }
}

/// A fresh seed for requests that do not give one.
pub fn random_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    splitmix(t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed))
}

pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random alphanumeric string (ids of completions and tool calls).
pub fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(len);
    let mut x = random_seed();
    for i in 0..len {
        if i % 8 == 7 {
            x = splitmix(x);
        }
        out.push(ALPHABET[(x % ALPHABET.len() as u64) as usize] as char);
        x /= ALPHABET.len() as u64;
    }
    out
}

/// Check the shared parameters and build the engine request (prompt left
/// empty; `logprobs` as given).
pub fn build_request(
    f: &SamplingFields,
    logprobs: Option<usize>,
    ctx_size: usize,
) -> Result<Request, ApiError> {
    // `n` is the route's (several choices are several requests).
    let max_tokens = match f.max_tokens {
        None => ctx_size,
        Some(m) if m < 1 => {
            return Err(ApiError::bad_param(
                "max_tokens",
                format!("max_tokens must be at least 1 (got {m})"),
            ))
        }
        Some(m) => usize::try_from(m).unwrap_or(usize::MAX).min(ctx_size),
    };
    // Ranges are the sampler's to check (below), the same for every front
    // end; here only what JSON can carry that the sampler's types cannot.
    let temperature = finite("temperature", f.prefs.temperature)?.unwrap_or(1.0);
    let top_p = finite("top_p", f.prefs.top_p)?.unwrap_or(1.0);
    let min_p = finite("min_p", f.prefs.min_p)?.unwrap_or(0.0);
    let top_k = match f.prefs.top_k {
        None | Some(-1) => 0,
        Some(k) if k < 0 => {
            return Err(ApiError::bad_param(
                "top_k",
                format!("top_k must be >= 0, or -1 for no limit (got {k})"),
            ))
        }
        Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
    };
    let presence = finite("presence_penalty", f.prefs.presence_penalty)?.unwrap_or(0.0);
    let frequency = finite("frequency_penalty", f.prefs.frequency_penalty)?.unwrap_or(0.0);
    let repetition = finite("repetition_penalty", f.prefs.repetition_penalty)?.unwrap_or(1.0);
    let top_n_sigma = finite("top_n_sigma", f.prefs.top_n_sigma)?.unwrap_or(0.0);
    let typical_p = finite("typical_p", f.prefs.typical_p)?.unwrap_or(1.0);
    let xtc_probability = finite("xtc_probability", f.prefs.xtc_probability)?.unwrap_or(0.0);
    let xtc_threshold = finite("xtc_threshold", f.prefs.xtc_threshold)?.unwrap_or(0.1);
    let stop = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > MAX_STOPS {
        return Err(ApiError::bad_param(
            "stop",
            format!("at most {MAX_STOPS} stop strings"),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_param(
            "stop",
            "stop strings must not be empty",
        ));
    }
    if stop.iter().any(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad_param(
            "stop",
            format!("stop strings are limited to {MAX_STOP_BYTES} bytes"),
        ));
    }
    let mut sampler = SamplerConfig {
        temperature: temperature as f32,
        top_k,
        top_p: top_p as f32,
        min_p: min_p as f32,
        repetition_penalty: repetition as f32,
        presence_penalty: presence as f32,
        frequency_penalty: frequency as f32,
        top_n_sigma: top_n_sigma as f32,
        typical_p: typical_p as f32,
        xtc_probability: xtc_probability as f32,
        xtc_threshold: xtc_threshold as f32,
        seed: f.seed.map_or_else(random_seed, |s| s as u64),
        logit_bias: logit_bias(f.logit_bias.as_ref())?,
        ..SamplerConfig::default()
    };
    (f.prefs.apply_extras(&mut sampler)).map_err(|e| ApiError::bad_param(e.param, e.message))?;
    sampler
        .validate()
        .map_err(|e| ApiError::bad_param(e.param, e.message))?;
    Ok(Request {
        prompt: Vec::new(),
        max_tokens,
        sampler,
        stop,
        logprobs,
        post_sampling_probs: false,
        prompt_logprobs: match f.prompt_logprobs {
            None => None,
            Some(k) => logprobs_count(true, Some(k), "prompt_logprobs")?,
        },
        cache_prompt: f.cache_prompt.unwrap_or(true),
        ignore_eos: f.ignore_eos.unwrap_or(false),
        min_tokens: match f.min_tokens {
            None => 0,
            Some(m) if m < 0 || m as u64 > max_tokens as u64 => {
                return Err(ApiError::bad_param(
                    "min_tokens",
                    format!("min_tokens must be in [0, max_tokens = {max_tokens}] (got {m})"),
                ))
            }
            Some(m) => m as usize,
        },
        stop_token_ids: match &f.stop_token_ids {
            None => Vec::new(),
            Some(ids) => (ids.iter())
                .map(|&i| {
                    u32::try_from(i).map_err(|_| {
                        ApiError::bad_param(
                            "stop_token_ids",
                            format!("stop_token_ids holds {i}, not a token id"),
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        },
        include_stop_str: f.include_stop_str_in_output.unwrap_or(false),
        generation_time_limit: None,
        min_indent: 0,
        report_progress: false,
        cache_points: Vec::new(),
        constraint: None,
        draft_max: match f.speculative_n_max {
            None => None,
            Some(n) if n < 0 => {
                return Err(ApiError::bad_param(
                    "speculative.n_max",
                    format!("speculative.n_max must be >= 0 (got {n})"),
                ))
            }
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        },
        thinking_budget: None,
    })
}

/// Most entries in a `logit_bias` map (OpenAI's limit).
pub const MAX_LOGIT_BIAS_ENTRIES: usize = 300;

/// `logit_bias` as (token id, bias) pairs; ids are checked against the
/// vocabulary by [`check_token_ids`], ranges by the sampler.
fn logit_bias(
    m: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<Vec<(u32, f32)>, ApiError> {
    let p = "logit_bias";
    let Some(m) = m else { return Ok(Vec::new()) };
    if m.len() > MAX_LOGIT_BIAS_ENTRIES {
        return Err(ApiError::bad_param(
            p,
            format!(
                "logit_bias has {} entries; at most {MAX_LOGIT_BIAS_ENTRIES}",
                m.len()
            ),
        ));
    }
    m.iter()
        .map(|(k, v)| {
            let id: u32 = k.trim().parse().map_err(|_| {
                ApiError::bad_param(p, format!("logit_bias key {k:?} is not a token id"))
            })?;
            let b = v.as_f64().ok_or_else(|| {
                ApiError::bad_param(p, format!("logit_bias of token {id} must be a number"))
            })?;
            Ok((id, b as f32))
        })
        .collect()
}

/// Token ids a request names (`logit_bias`) must be in the vocabulary.
pub fn check_token_ids(req: &Request, n_vocab: usize) -> Result<(), ApiError> {
    if let Some(id) = req
        .stop_token_ids
        .iter()
        .find(|&&id| id as usize >= n_vocab)
    {
        return Err(ApiError::bad_param(
            "stop_token_ids",
            format!("stop_token_ids names token {id}, outside the vocabulary ({n_vocab} tokens)"),
        ));
    }
    match req
        .sampler
        .logit_bias
        .iter()
        .find(|(id, _)| *id as usize >= n_vocab)
    {
        Some((id, _)) => Err(ApiError::bad_param(
            "logit_bias",
            format!("logit_bias names token {id}, outside the vocabulary ({n_vocab} tokens)"),
        )),
        None => Ok(()),
    }
}

/// `top_logprobs` checked: `None` when log-probabilities are off.
pub fn logprobs_count(
    enabled: bool,
    top: Option<i64>,
    param: &str,
) -> Result<Option<usize>, ApiError> {
    match top {
        Some(k) if !(0..=MAX_TOP_LOGPROBS).contains(&k) => Err(ApiError::bad_param(
            param,
            format!("{param} must be in [0, {MAX_TOP_LOGPROBS}] (got {k})"),
        )),
        Some(k) if enabled => Ok(Some(k as usize)),
        Some(k) if k > 0 => Err(ApiError::bad_param(
            param,
            format!("{param} requires logprobs to be true"),
        )),
        _ if enabled => Ok(Some(0)),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A request's sampling fields, as a client would send them.
    fn fields(j: serde_json::Value) -> SamplingFields {
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn request_over_flags_over_file_over_built_in() {
        let d = SamplingPrefs {
            temperature: Some(0.6),
            top_k: Some(20),
            ..Default::default()
        };
        let bare = fields(json!({})).or_defaults(&d);
        let r = build_request(&bare, None, 100).unwrap();
        assert_eq!(
            (r.sampler.temperature, r.sampler.top_k, r.sampler.top_p),
            (0.6, 20, 1.0)
        );
        let asked = fields(json!({"temperature": 0.1})).or_defaults(&d);
        let r = build_request(&asked, None, 100).unwrap();
        assert_eq!((r.sampler.temperature, r.sampler.top_k), (0.1, 20));
    }

    #[test]
    fn defaults_and_ranges() {
        let r = build_request(&fields(json!({})), None, 100).unwrap();
        assert_eq!(r.max_tokens, 100);
        assert_eq!(r.sampler.temperature, 1.0);
        let bad = [
            json!({"max_tokens": -1}),
            json!({"temperature": -0.5}),
            json!({"top_p": 1.5}),
            json!({"top_p": 0.0}),
            json!({"min_p": 2.0}),
            json!({"top_k": -3}),
            json!({"presence_penalty": 3.0}),
            json!({"repetition_penalty": 0.0}),
            json!({"stop": ""}),
            json!({"stop": "x".repeat(2000)}),
        ];
        for j in bad {
            let e = build_request(&fields(j.clone()), None, 100).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{j}");
            assert!(e.param.is_some(), "{j}");
        }
        let big = fields(json!({"top_k": -1, "max_tokens": 1u64 << 40, "seed": 7}));
        let r = build_request(&big, None, 64).unwrap();
        assert_eq!((r.sampler.top_k, r.max_tokens, r.sampler.seed), (0, 64, 7));
    }

    #[test]
    fn logprob_counts() {
        assert_eq!(logprobs_count(false, None, "top_logprobs").unwrap(), None);
        assert_eq!(logprobs_count(true, None, "top_logprobs").unwrap(), Some(0));
        assert_eq!(
            logprobs_count(true, Some(3), "top_logprobs").unwrap(),
            Some(3)
        );
        assert!(logprobs_count(false, Some(3), "top_logprobs").is_err());
        assert!(logprobs_count(true, Some(21), "top_logprobs").is_err());
        assert!(logprobs_count(true, Some(-1), "top_logprobs").is_err());
    }

    #[test]
    fn ids_are_alphanumeric_and_differ() {
        let a = random_id(24);
        assert_eq!(a.len(), 24);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, random_id(24));
    }
}
