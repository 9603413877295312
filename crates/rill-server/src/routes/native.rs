//! `POST /completion` (also `/completions`): llama-server's own completion
//! API, which its scripts and front ends (SillyTavern's llama.cpp source,
//! for one) speak: `n_predict`, llama-server's sampler names and defaults,
//! `n_probs`, and replies with `content`, `stop_type`, `timings`. Streamed,
//! each event is one object and the last has `"stop": true` (no `[DONE]`).

use crate::choices;
use crate::errors::{parse_json, ApiError};
use crate::openai::params::{build_request, check_token_ids};
use crate::openai::responses::{StreamClock, Timings};
use crate::openai::types::{Prompt, SamplingFields};
use crate::routes::completions::prompt_list;
use crate::sse::{self, ChunkBuilder};
use crate::state::AppState;
use crate::structured::ConstraintFields;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rill_engine::{Done, Event, FinishReason, PromptProgress, Request, TokenInfo};
use rill_sampler::SamplingPrefs;
use rill_tokenizer::Tokenizer;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
struct NativeRequest {
    prompt: Prompt,
    #[serde(flatten)]
    sampling: SamplingFields,
    /// Tokens to generate: -1 (or none) = until the end, 0 = the prompt
    /// only.
    n_predict: Option<i64>,
    stream: Option<bool>,
    /// Alternatives per generated token in `completion_probabilities`.
    n_probs: Option<i64>,
    /// Those as probabilities after the sampling chain (`prob`,
    /// `top_probs`) instead of the model's log-probabilities.
    post_sampling_probs: Option<bool>,
    /// The generated token ids in `tokens`.
    return_tokens: Option<bool>,
    /// `[[id or text, bias or false], …]`, or OpenAI's object.
    logit_bias: Option<Value>,
    /// llama-server's name of `repetition_penalty`.
    repeat_penalty: Option<f64>,
    /// Completions per prompt (llama-server's name; `n` is its alias).
    n_cmpl: Option<i64>,
    /// Past this many milliseconds of generation, stop at the next token
    /// that brings a newline (0 or less: no limit).
    t_max_predict_ms: Option<i64>,
    /// A generated line after the first indented by fewer spaces or tabs
    /// ends the text where its content starts (code completion: the
    /// completion left the block; 0 or less: no limit).
    n_indent: Option<i64>,
    /// While the prompt runs, a partial object with its `prompt_progress`
    /// after each prefill chunk (streams only).
    return_progress: Option<bool>,
    /// Every streamed object carries the running `timings`.
    timings_per_token: Option<bool>,
    /// Only these fields of the final object, by path (`a/b` for field `b`
    /// of object `a`), flat under their paths; missing ones left out.
    response_fields: Option<Vec<String>>,
    #[serde(flatten)]
    constraint: ConstraintFields,
}

/// llama-server's sampling defaults (its `common_params_sampling`), under
/// a request's values and the server's flags.
fn native_defaults() -> SamplingPrefs {
    SamplingPrefs {
        temperature: Some(0.8),
        top_k: Some(40),
        top_p: Some(0.95),
        min_p: Some(0.05),
        ..SamplingPrefs::default()
    }
}

pub async fn completion(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: NativeRequest = parse_json(&body?)?;
    let mut sampling = req.sampling.clone();
    let n = match req.n_cmpl {
        Some(_) => choices::count_named("n_cmpl", req.n_cmpl)?,
        None => choices::count(sampling.n)?,
    };
    sampling.prefs.repetition_penalty = sampling.prefs.repetition_penalty.or(req.repeat_penalty);
    sampling.prefs = (sampling.prefs)
        .or(&state.config.sampling)
        .or(&native_defaults());
    // `n_predict: 0` runs the prompt alone: one token is drawn and dropped.
    let prompt_only = req.n_predict == Some(0);
    match req.n_predict {
        None | Some(-1) => sampling = sampling.or_n_predict(state.config.n_predict),
        Some(0) => sampling.max_tokens = Some(1),
        Some(n) if n < -1 => {
            return Err(ApiError::bad_param(
                "n_predict",
                format!("n_predict must be >= -1 (got {n})"),
            ))
        }
        Some(n) => sampling.max_tokens = Some(n),
    }
    sampling.logit_bias = match &req.logit_bias {
        None => None,
        Some(v) => Some(logit_bias(&state.tok, v)?),
    };
    let n_probs = match req.n_probs {
        None | Some(0) => None,
        Some(k) if (1..=crate::openai::params::MAX_TOP_LOGPROBS).contains(&k) => Some(k as usize),
        Some(k) => {
            return Err(ApiError::bad_param(
                "n_probs",
                format!("n_probs must be in [0, 20] (got {k})"),
            ))
        }
    };
    let mut request = build_request(&sampling, n_probs, state.ctx_size())?;
    request.post_sampling_probs = req.post_sampling_probs == Some(true);
    request.generation_time_limit = (req.t_max_predict_ms)
        .filter(|&ms| ms > 0)
        .map(|ms| std::time::Duration::from_millis(ms as u64));
    request.min_indent = req.n_indent.map_or(0, |n| n.max(0) as usize);
    request.report_progress = req.stream == Some(true) && req.return_progress == Some(true);
    check_token_ids(&request, state.tok.vocab_size())?;
    request.constraint =
        (req.constraint.grammar()?).map(|grammar| rill_engine::ConstraintRequest {
            grammar,
            after: None,
        });
    let prompts = prompt_list(&state, req.prompt.clone()).await?;
    let stream = req.stream == Some(true);
    if prompts.len() * n > choices::MAX_SEQUENCES {
        return Err(ApiError::bad_param(
            "prompt",
            format!(
                "at most {} completions (prompts × n_cmpl) per request",
                choices::MAX_SEQUENCES
            ),
        ));
    }
    let requests = (prompts.iter())
        .map(|p| Request {
            prompt: p.clone(),
            ..request.clone()
        })
        .collect();
    // Prompt-major: reply `p·n + j` is prompt `p`'s completion `j`.
    let mut submitted = choices::submit_all(&state, requests, n).await?;
    let view = View {
        state: state.clone(),
        settings: settings(&request, req.n_predict, stream),
        return_tokens: req.return_tokens == Some(true) || stream,
        generate: !prompt_only,
        post_sampling: request.post_sampling_probs,
        fields: req.response_fields.clone().filter(|f| !f.is_empty()),
    };
    if stream {
        let mut builders: Vec<NativeStream> = (0..submitted.len())
            .map(|index| NativeStream {
                view: view.clone(),
                prompt: prompts[index / n].clone(),
                predicted: 0,
                index,
                clock: (req.timings_per_token == Some(true))
                    .then(|| StreamClock::new(prompts[index / n].len())),
                new_line: false,
            })
            .collect();
        if submitted.len() > 1 {
            // Every completion's objects as they come, each with its `index`.
            let tail: choices::Tail = Box::new(|_| Vec::new());
            return Ok(choices::response(submitted, builders, tail, state.clone()));
        }
        let choice = submitted.pop().expect("one prompt");
        let builder = builders.pop().expect("one builder");
        return Ok(sse::response(choice.handle, builder, state.clone()));
    }
    let mut out = Vec::with_capacity(submitted.len());
    for (index, mut choice) in submitted.into_iter().enumerate() {
        let (mut text, mut ids, mut probs) = (String::new(), Vec::new(), Vec::new());
        let done = loop {
            match choice.recv().await {
                Some(Event::Text { .. }) if prompt_only => {}
                Some(Event::Text { text: t, tokens }) => {
                    text.push_str(&t);
                    for tk in &tokens {
                        ids.push(tk.id);
                        if tk.logprob.is_some() {
                            probs.push(token_probs(&state.tok, tk, view.post_sampling));
                        }
                    }
                }
                Some(Event::Prompt { .. } | Event::Progress(_)) => {}
                Some(Event::Done(d)) => {
                    state.observe_done(&d);
                    break d;
                }
                Some(Event::Error(f)) => return Err(ApiError::failed(f)),
                None => return Err(ApiError::engine_stopped()),
            }
        };
        let mut o = view.last(index, &prompts[index / n], &done, text, &ids);
        if n_probs.is_some() {
            o.insert("completion_probabilities".into(), Value::Array(probs));
        }
        out.push(view.pick(Value::Object(o)));
    }
    Ok(match out.len() {
        1 => Json(out.pop().expect("one")),
        _ => Json(Value::Array(out)),
    }
    .into_response())
}

/// What every reply of a request shares.
#[derive(Clone)]
struct View {
    state: Arc<AppState>,
    settings: Value,
    return_tokens: bool,
    /// False for `n_predict: 0`: the token drawn is dropped.
    generate: bool,
    /// `completion_probabilities` as probabilities after the chain.
    post_sampling: bool,
    /// `response_fields`: the paths the final object keeps (none: all).
    fields: Option<Vec<String>>,
}

impl View {
    /// The final object `v` cut to `response_fields`, as llama-server: each
    /// path found (`/` between the keys of nested objects) under its path.
    fn pick(&self, v: Value) -> Value {
        let Some(paths) = &self.fields else { return v };
        let mut out = Map::new();
        for path in paths {
            let found = (path.split('/')).try_fold(&v, |at, key| at.as_object()?.get(key));
            if let Some(found) = found {
                out.insert(path.clone(), found.clone());
            }
        }
        Value::Object(out)
    }

    /// The final object of a completion (`content` the whole text, or ""
    /// at the end of a stream).
    fn last(
        &self,
        index: usize,
        prompt: &[u32],
        d: &Done,
        content: String,
        ids: &[u32],
    ) -> Map<String, Value> {
        let predicted = if self.generate {
            d.completion_tokens
        } else {
            0
        };
        let stop_type = match d.finish {
            _ if !self.generate => "limit",
            FinishReason::Stop if d.stop_word.is_some() => "word",
            FinishReason::Stop => "eos",
            FinishReason::Length => "limit",
            FinishReason::Cancelled => "none",
        };
        let tok = &self.state.tok;
        let v = json!({
            "index": index,
            "content": content,
            "tokens": if self.return_tokens && self.generate { ids.to_vec() } else { Vec::new() },
            "id_slot": -1,
            "stop": true,
            "model": self.state.config.model_id,
            "tokens_predicted": predicted,
            "tokens_evaluated": d.prompt_tokens,
            "tokens_cached": d.cached_tokens,
            "generation_settings": self.settings,
            "prompt": tok.decode(prompt).unwrap_or_default(),
            "has_new_line": content.contains('\n'),
            "truncated": false,
            "stop_type": stop_type,
            "stopping_word": d.stop_word.clone().unwrap_or_default(),
            "timings": Timings::from_done(d),
        });
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object literal"),
        }
    }
}

/// The settings a reply reports (`generation_settings`).
fn settings(r: &Request, n_predict: Option<i64>, stream: bool) -> Value {
    let s = &r.sampler;
    json!({
        "n_predict": n_predict.unwrap_or(-1),
        "seed": s.seed,
        "temperature": s.temperature,
        "dynatemp_range": s.dynatemp_range,
        "dynatemp_exponent": s.dynatemp_exponent,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "typical_p": s.typical_p,
        "top_n_sigma": s.top_n_sigma,
        "xtc_probability": s.xtc_probability,
        "xtc_threshold": s.xtc_threshold,
        "repeat_penalty": s.repetition_penalty,
        "repeat_last_n": s.penalty_window,
        "min_keep": s.min_keep,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "dry_multiplier": s.dry.multiplier,
        "dry_base": s.dry.base,
        "dry_allowed_length": s.dry.allowed_length,
        "dry_sequence_breakers": s.dry.sequence_breakers,
        "mirostat": s.mirostat.version,
        "mirostat_tau": s.mirostat.tau,
        "mirostat_eta": s.mirostat.eta,
        "samplers": rill_sampler::order_names(s.order.as_deref()),
        "stop": r.stop,
        "ignore_eos": r.ignore_eos,
        "n_probs": r.logprobs.unwrap_or(0),
        "stream": stream,
    })
}

/// One token's `completion_probabilities` entry: log-probabilities
/// (`logprob`, `top_logprobs`), or with `post` the probabilities after the
/// sampling chain (`prob`, `top_probs`; the token info holds their logs).
fn token_probs(tok: &Tokenizer, t: &TokenInfo, post: bool) -> Value {
    let (key, top_key) = match post {
        true => ("prob", "top_probs"),
        false => ("logprob", "top_logprobs"),
    };
    let entry = |id: u32, logprob: f32| {
        let bytes = tok.token_to_piece(id).unwrap_or_default();
        let mut v = json!({
            "id": id,
            "token": String::from_utf8_lossy(bytes),
            "bytes": bytes,
        });
        v[key] = json!(if post { logprob.exp() } else { logprob });
        v
    };
    let mut v = entry(t.id, t.logprob.unwrap_or(0.0));
    v[top_key] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
    v
}

/// llama-server's `logit_bias`: pairs `[id or text, bias or false]` (a
/// text biases each of its tokens; `false` bans), or OpenAI's object; as
/// the OpenAI object `build_request` checks.
fn logit_bias(tok: &Tokenizer, v: &Value) -> Result<Map<String, Value>, ApiError> {
    let bad = |m: &str| ApiError::bad_param("logit_bias", m);
    let pairs = match v {
        Value::Object(m) => return Ok(m.clone()),
        Value::Array(a) => a,
        _ => {
            return Err(bad(
                "logit_bias must be a list of [token, bias] pairs or an object",
            ))
        }
    };
    let mut out = Map::new();
    for p in pairs {
        let [key, bias] = p.as_array().map(Vec::as_slice).unwrap_or_default() else {
            return Err(bad("each logit_bias entry is a [token, bias] pair"));
        };
        let bias = match bias {
            Value::Bool(false) => json!(-100.0),
            Value::Number(_) => bias.clone(),
            _ => return Err(bad("a logit_bias bias is a number or false")),
        };
        let ids = match key {
            Value::Number(n) => vec![n
                .as_u64()
                .ok_or_else(|| bad("a token id is a non-negative integer"))?],
            Value::String(s) => tok.encode(s, false).into_iter().map(u64::from).collect(),
            _ => return Err(bad("a logit_bias token is an id or a text")),
        };
        for id in ids {
            out.insert(id.to_string(), bias.clone());
        }
    }
    Ok(out)
}

/// The stream of one completion: an object per piece of text, then the
/// final object (empty `content`, `"stop": true`), each with the
/// completion's `index` (prompt-major, as the replies of a batch).
struct NativeStream {
    view: View,
    prompt: Vec<u32>,
    predicted: usize,
    index: usize,
    /// `timings_per_token`: the running timings on every object.
    clock: Option<StreamClock>,
    /// The text sent so far had a newline (the final object's
    /// `has_new_line`, whose own `content` is empty).
    new_line: bool,
}

impl NativeStream {
    /// A partial object (llama-server's shape) with `content` and the ids
    /// of the tokens that made it.
    fn partial(&self, content: String, ids: Vec<u32>) -> Value {
        json!({
            "index": self.index,
            "content": content,
            "tokens": ids,
            "stop": false,
            "id_slot": -1,
            "tokens_predicted": self.predicted,
            "tokens_evaluated": self.prompt.len(),
        })
    }
}

impl ChunkBuilder for NativeStream {
    /// llama-server's shape: a partial object without text, with the
    /// prompt's `prompt_progress`.
    fn progress(&mut self, progress: PromptProgress) -> Vec<String> {
        let mut v = self.partial(String::new(), Vec::new());
        v["prompt_progress"] = crate::sse::progress_json(&progress);
        vec![v.to_string()]
    }

    fn text(&mut self, text: String, tokens: Vec<TokenInfo>) -> Vec<String> {
        if !self.view.generate {
            return Vec::new();
        }
        self.new_line |= text.contains('\n');
        self.predicted += tokens.len();
        let mut v = self.partial(text, tokens.iter().map(|t| t.id).collect());
        if let Some(clock) = &mut self.clock {
            clock.tokens(tokens.len());
            v["timings"] = json!(clock.timings());
        }
        if tokens.iter().any(|t| t.logprob.is_some()) {
            let tok = &self.view.state.tok;
            let post = self.view.post_sampling;
            v["completion_probabilities"] =
                tokens.iter().map(|t| token_probs(tok, t, post)).collect();
        }
        vec![v.to_string()]
    }

    fn done(&mut self, done: Done) -> Vec<String> {
        let mut o = (self.view).last(self.index, &self.prompt, &done, String::new(), &[]);
        o.insert("has_new_line".into(), self.new_line.into());
        vec![self.view.pick(Value::Object(o)).to_string()]
    }

    fn end_marker(&self) -> Option<&'static str> {
        None
    }
}
