//! `POST /v1/completions` (raw text in, text out).

use crate::choices::{self, usage_of};
use crate::errors::{parse_json, ApiError};
use crate::openai::logprobs::CompletionLogprobs;
use crate::openai::params::{build_request, logprobs_count, random_id};
use crate::openai::responses::{now, Completion, CompletionChoice, Timings, Usage};
use crate::openai::types::{CompletionRequest, Prompt};
use crate::routes::finish_reason;
use crate::sse::{self, ChunkBuilder};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rill_engine::{Done, Event, TokenInfo};
use rill_tokenizer::Tokenizer;
use std::sync::Arc;

pub async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse_json(&body?)?;
    state.check_model(req.model.as_deref())?;
    if req.best_of.is_some_and(|b| b != 1) {
        return Err(ApiError::bad_param(
            "best_of",
            "only best_of = 1 is supported",
        ));
    }
    let n = choices::count(req.sampling.n)?;
    if req.echo == Some(true) {
        return Err(ApiError::bad_param("echo", "echo is not supported"));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad_param("suffix", "suffix is not supported"));
    }
    let logprobs = match req.logprobs {
        None => None,
        Some(k) => logprobs_count(true, Some(k), "logprobs")?,
    };
    let sampling = req
        .sampling
        .clone()
        .or_defaults(&state.config.sampling)
        .or_n_predict(state.config.n_predict);
    let mut request = build_request(&sampling, logprobs, state.ctx_size())?;
    crate::openai::params::check_token_ids(&request, state.tok.vocab_size())?;
    request.prompt = prompt_tokens(&state, req.prompt.clone()).await?;
    request.constraint = req
        .constraint
        .grammar()?
        .map(|grammar| rill_engine::ConstraintRequest {
            grammar,
            after: None,
        });
    let return_ids = req.return_token_ids == Some(true);
    let prompt_ids = return_ids.then(|| request.prompt.clone());
    let mut submitted = choices::submit(&state, request, n).await.map_err(|mut e| {
        if e.param.is_some() {
            e.param = Some("prompt".into());
        }
        e
    })?;
    let include_usage = req.streaming.include_usage();
    let (id, created) = (format!("cmpl-{}", random_id(24)), now());
    let builder = |index: usize| CompletionStream {
        id: id.clone(),
        index,
        created,
        model: state.config.model_id.clone(),
        tok: state.tok.clone(),
        logprobs: logprobs.is_some(),
        offset: 0,
        // With several choices the usage chunk comes once, after all.
        include_usage: include_usage && n == 1,
    };
    if req.streaming.enabled() {
        if n == 1 {
            let choice = submitted.pop().expect("one choice");
            return Ok(sse::response(choice.handle, builder(0), state.clone()));
        }
        let builders = (0..n).map(builder).collect();
        let tail_chunk = builder(0);
        let tail: choices::Tail = Box::new(move |dones: &[Done]| match include_usage {
            true => vec![tail_chunk.chunk(String::new(), None, None, Some(usage_of(dones)))],
            false => Vec::new(),
        });
        return Ok(choices::response(submitted, builders, tail, state.clone()));
    }
    let mut out = Vec::with_capacity(n);
    let mut dones = Vec::with_capacity(n);
    for (index, choice) in submitted.into_iter().enumerate() {
        let (mut c, d) = collect(&state, choice, index, logprobs.is_some()).await?;
        c.prompt_token_ids = prompt_ids.clone();
        if !return_ids {
            c.token_ids = None;
        }
        out.push(c);
        dones.push(d);
    }
    let body = Completion {
        id,
        object: "text_completion",
        created,
        model: state.config.model_id.clone(),
        choices: out,
        usage: Some(usage_of(&dones)),
        timings: Some(Timings::from_done(&dones[0])),
    };
    Ok(Json(body).into_response())
}

/// One choice, read to its end: its text, logprobs and token ids.
async fn collect(
    state: &AppState,
    mut choice: choices::Choice,
    index: usize,
    logprobs: bool,
) -> Result<(CompletionChoice, Done), ApiError> {
    let mut text = String::new();
    let mut lp = CompletionLogprobs::default();
    let mut ids = Vec::new();
    let mut offset = 0;
    let done = loop {
        match choice.recv().await {
            Some(Event::Text { text: t, tokens }) => {
                ids.extend(tokens.iter().map(|t| t.id));
                for tk in &tokens {
                    lp.push(&state.tok, tk, offset);
                }
                offset += t.chars().count();
                text.push_str(&t);
            }
            Some(Event::Done(d)) => {
                state.observe_done(&d);
                break d;
            }
            Some(Event::Error(f)) => return Err(ApiError::failed(f)),
            None => return Err(ApiError::internal("the engine stopped")),
        }
    };
    let choice = CompletionChoice {
        index,
        text,
        logprobs: logprobs.then_some(lp),
        finish_reason: Some(finish_reason(&done, false)),
        prompt_token_ids: None,
        token_ids: Some(ids),
    };
    Ok((choice, done))
}

/// The prompt as token ids: text is tokenized (special tokens parsed), ids
/// are checked against the vocabulary. Only one prompt per request.
pub(crate) async fn prompt_tokens(
    state: &Arc<AppState>,
    prompt: Prompt,
) -> Result<Vec<u32>, ApiError> {
    let one = |n: usize| {
        if n == 1 {
            Ok(())
        } else {
            Err(ApiError::bad_param(
                "prompt",
                format!("batched prompts ({n}) are not supported; send one prompt per request"),
            ))
        }
    };
    let text = match prompt {
        Prompt::Text(t) => t,
        Prompt::Texts(mut v) => {
            one(v.len())?;
            v.remove(0)
        }
        Prompt::Tokens(ids) => return token_ids(&state.tok, &ids),
        Prompt::TokenBatch(v) => {
            one(v.len())?;
            return token_ids(&state.tok, &v[0]);
        }
    };
    if text.is_empty() {
        return Err(ApiError::bad_param("prompt", "the prompt is empty"));
    }
    let st = state.clone();
    tokio::task::spawn_blocking(move || st.encode_prompt(&text))
        .await
        .map_err(|e| ApiError::internal(format!("tokenization failed: {e}")))
}

fn token_ids(tok: &Tokenizer, ids: &[i64]) -> Result<Vec<u32>, ApiError> {
    let n = tok.vocab_size();
    ids.iter()
        .map(|&i| {
            u32::try_from(i)
                .ok()
                .filter(|&u| (u as usize) < n)
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "prompt",
                        format!("token id {i} is outside the vocabulary (0..{n})"),
                    )
                })
        })
        .collect()
}

/// The chunks of a streamed completion.
struct CompletionStream {
    id: String,
    /// The choice's index.
    index: usize,
    created: u64,
    model: String,
    tok: Arc<Tokenizer>,
    logprobs: bool,
    /// Characters of text sent so far.
    offset: usize,
    include_usage: bool,
}

impl CompletionStream {
    fn chunk(
        &self,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
        usage: Option<Usage>,
    ) -> String {
        let c = Completion {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices: if usage.is_some() {
                Vec::new()
            } else {
                vec![CompletionChoice {
                    index: self.index,
                    text,
                    logprobs,
                    finish_reason: finish,
                    prompt_token_ids: None,
                    token_ids: None,
                }]
            },
            usage,
            timings: None,
        };
        serde_json::to_string(&c).unwrap_or_default()
    }
}

impl ChunkBuilder for CompletionStream {
    fn text(&mut self, text: String, tokens: Vec<TokenInfo>) -> Vec<String> {
        let lp = self.logprobs.then(|| {
            let mut lp = CompletionLogprobs::default();
            for t in &tokens {
                lp.push(&self.tok, t, self.offset);
            }
            lp
        });
        self.offset += text.chars().count();
        if text.is_empty() && lp.as_ref().is_none_or(CompletionLogprobs::is_empty) {
            return Vec::new();
        }
        vec![self.chunk(text, lp, None, None)]
    }

    fn done(&mut self, done: Done) -> Vec<String> {
        let mut out =
            vec![self.chunk(String::new(), None, Some(finish_reason(&done, false)), None)];
        if self.include_usage {
            out.push(self.chunk(String::new(), None, None, Some(Usage::from_done(&done))));
        }
        out
    }
}
