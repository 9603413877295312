//! `POST /v1/completions` (raw text in, text out).

use crate::choices::{self, usage_of};
use crate::errors::{parse_json, ApiError};
use crate::openai::logprobs::{echo_text, CompletionLogprobs};
use crate::openai::params::{build_request, logprobs_count, random_id};
use crate::openai::responses::{now, Completion, CompletionChoice, Timings, Usage};
use crate::openai::types::{CompletionRequest, Piece, Prompt};
use crate::routes::finish_reason;
use crate::sse::{self, ChunkBuilder};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rill_engine::{Done, Event, PromptProgress, TokenInfo};
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
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad_param("suffix", "suffix is not supported"));
    }
    let logprobs = match req.logprobs {
        None => None,
        Some(k) => logprobs_count(true, Some(k), "logprobs")?,
    };
    let echo = req.echo == Some(true);
    // `max_tokens: 0` with `echo` (as vLLM and OpenAI's legacy API take
    // it): the prompt alone, scored with `logprobs`; one token is drawn and
    // dropped.
    let echo_only = echo && req.sampling.max_tokens == Some(0);
    let mut sampling = req
        .sampling
        .clone()
        .or_defaults(&state.config.sampling)
        .or_n_predict(state.config.n_predict);
    if echo_only {
        sampling.max_tokens = Some(1);
    }
    let mut request = build_request(&sampling, logprobs, state.ctx_size())?;
    // vLLM's `prompt_logprobs` (per choice, its own shape).
    let vllm_k = request.prompt_logprobs;
    if vllm_k.is_some() && req.streaming.enabled() {
        return Err(ApiError::bad_param(
            "prompt_logprobs",
            "prompt_logprobs is not available when streaming",
        ));
    }
    // Echo: the prompt's text before the generated text, and with
    // `logprobs` its tokens scored (the first one `null`), as OpenAI's
    // legacy API and vLLM give them (what evaluation harnesses read).
    if echo {
        request.prompt_logprobs = request.prompt_logprobs.max(logprobs);
    }
    crate::openai::params::check_token_ids(&request, state.tok.vocab_size())?;
    let prompts = prompt_list(&state, req.prompt.clone()).await?;
    let total = prompts.len() * n;
    if total > choices::MAX_SEQUENCES {
        return Err(ApiError::bad_param(
            "prompt",
            format!(
                "{} prompts × n = {n} asks for {total} sequences; at most {} per request",
                prompts.len(),
                choices::MAX_SEQUENCES
            ),
        ));
    }
    request.constraint = req
        .constraint
        .grammar()?
        .map(|grammar| rill_engine::ConstraintRequest {
            grammar,
            after: None,
        });
    let return_ids = req.return_token_ids == Some(true);
    request.report_progress = req.streaming.enabled() && req.return_progress == Some(true);
    let requests = prompts
        .iter()
        .map(|p| {
            let mut r = request.clone();
            r.prompt = p.clone();
            r
        })
        .collect();
    let mut submitted = choices::submit_all(&state, requests, n)
        .await
        .map_err(|mut e| {
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
        logprobs,
        echo: echo.then(|| prompts[index / n].clone()),
        generate: !echo_only,
        offset: 0,
        // With several choices the usage chunk comes once, after all.
        include_usage: include_usage && total == 1,
    };
    if req.streaming.enabled() {
        if total == 1 {
            let choice = submitted.pop().expect("one choice");
            return Ok(sse::response(choice.handle, builder(0), state.clone()));
        }
        let builders = (0..total).map(builder).collect();
        let tail_chunk = builder(0);
        let tail: choices::Tail = Box::new(move |dones: &[Done]| {
            if !include_usage {
                return Vec::new();
            }
            let seen: Vec<Done> = (dones.iter().cloned())
                .map(|d| dropped_generation(d, !echo_only))
                .collect();
            vec![tail_chunk.chunk(String::new(), None, None, Some(usage_of(&seen, n)))]
        });
        return Ok(choices::response(submitted, builders, tail, state.clone()));
    }
    let mut out = Vec::with_capacity(total);
    let mut dones = Vec::with_capacity(total);
    for (index, choice) in submitted.into_iter().enumerate() {
        let view = PromptView {
            echo: echo.then_some(prompts[index / n].as_slice()),
            vllm_k,
            generate: !echo_only,
        };
        let (mut c, d) = collect(&state, choice, index, logprobs, view).await?;
        c.prompt_token_ids = return_ids.then(|| prompts[index / n].clone());
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
        usage: Some(usage_of(&dones, n)),
        timings: Some(Timings::from_done(&dones[0])),
        prompt_logprobs: None,
    };
    Ok(Json(body).into_response())
}

/// What a choice shows of its prompt: its text before the generated text
/// (`echo`, scored with `logprobs`), vLLM's `prompt_logprobs` with this
/// many alternatives.
#[derive(Clone, Copy)]
struct PromptView<'a> {
    echo: Option<&'a [u32]>,
    vllm_k: Option<usize>,
    /// False for an echo of the prompt alone (`max_tokens: 0`): the token
    /// drawn is dropped.
    generate: bool,
}

/// One choice, read to its end: its text, logprobs and token ids (after
/// the prompt `echo`ed, when it is).
async fn collect(
    state: &AppState,
    mut choice: choices::Choice,
    index: usize,
    logprobs: Option<usize>,
    view: PromptView<'_>,
) -> Result<(CompletionChoice, Done), ApiError> {
    let mut text = match view.echo {
        Some(prompt) if logprobs.is_none() => echo_text(&state.tok, prompt),
        _ => String::new(),
    };
    let mut lp = CompletionLogprobs::default();
    let mut prompt_logprobs = None;
    let mut ids = Vec::new();
    let mut offset = text.chars().count();
    let done = loop {
        match choice.recv().await {
            Some(Event::Progress(_)) => {}
            Some(Event::Prompt { tokens }) => {
                if let (Some(_), Some(k)) = (view.echo, logprobs) {
                    (lp, text) = CompletionLogprobs::prompt(&state.tok, &tokens, k);
                    offset = text.chars().count();
                }
                prompt_logprobs = (view.vllm_k)
                    .map(|k| crate::openai::logprobs::prompt_logprobs(&state.tok, &tokens, k));
            }
            Some(Event::Text { .. }) if !view.generate => {}
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
    let done = dropped_generation(done, view.generate);
    let choice = CompletionChoice {
        index,
        text,
        logprobs: logprobs.is_some().then_some(lp),
        finish_reason: Some(finish_reason(&done, false)),
        prompt_token_ids: None,
        token_ids: Some(ids),
        prompt_logprobs,
    };
    Ok((choice, done))
}

/// `done` as the client sees it when the generated token was dropped (an
/// echo of the prompt alone): no completion tokens, ended by the length.
fn dropped_generation(mut done: Done, generate: bool) -> Done {
    if !generate {
        done.completion_tokens = 0;
        done.finish = rill_engine::FinishReason::Length;
    }
    done
}

/// The prompts of a request as token ids, one list per prompt (a batch —
/// a list of strings or of token-id lists — gives several).
pub(crate) async fn prompt_list(
    state: &Arc<AppState>,
    prompt: Prompt,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let prompts = prompt.into_list();
    if prompts.is_empty() {
        return Err(ApiError::bad_param("prompt", "the prompt list is empty"));
    }
    let mut out = Vec::with_capacity(prompts.len());
    for p in prompts {
        out.push(prompt_tokens(state, p).await?);
    }
    Ok(out)
}

/// One prompt as token ids: text is tokenized (special tokens parsed), ids
/// are checked against the vocabulary, the pieces of a mixed prompt are
/// each taken so and joined in order; an empty prompt is refused.
async fn prompt_tokens(state: &Arc<AppState>, prompt: Prompt) -> Result<Vec<u32>, ApiError> {
    let pieces = match prompt {
        Prompt::Text(t) => vec![Piece::Text(t)],
        Prompt::Tokens(ids) => ids.into_iter().map(Piece::Id).collect(),
        Prompt::Pieces(pieces) => pieces,
        Prompt::Texts(_) | Prompt::TokenBatch(_) | Prompt::Batch(_) => {
            return Err(ApiError::bad_param(
                "prompt",
                "a prompt list inside a prompt list",
            ))
        }
    };
    // Ids are checked before any text is tokenized: a bad id answers at once.
    let ids: Vec<i64> = (pieces.iter())
        .filter_map(|p| match p {
            Piece::Id(i) => Some(*i),
            Piece::Text(_) => None,
        })
        .collect();
    let checked = token_ids(&state.tok, &ids)?;
    let ids = if checked.len() == pieces.len() {
        // Ids alone: nothing to tokenize.
        checked
    } else {
        let st = state.clone();
        tokio::task::spawn_blocking(move || {
            let mut checked = checked.into_iter();
            let mut out = Vec::new();
            for piece in pieces {
                match piece {
                    Piece::Id(_) => out.extend(checked.next()),
                    Piece::Text(t) => out.extend(st.encode_prompt(&t)),
                }
            }
            out
        })
        .await
        .map_err(|e| ApiError::internal(format!("tokenization failed: {e}")))?
    };
    if ids.is_empty() {
        return Err(ApiError::bad_param("prompt", "the prompt is empty"));
    }
    Ok(ids)
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
    /// `logprobs`: alternatives per token.
    logprobs: Option<usize>,
    /// The prompt, when it is echoed before the generated text.
    echo: Option<Vec<u32>>,
    /// False for an echo of the prompt alone: the token drawn is dropped.
    generate: bool,
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
        let c = self.chunk_value(text, logprobs, finish, usage);
        serde_json::to_string(&c).unwrap_or_default()
    }

    fn chunk_value(
        &self,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
        usage: Option<Usage>,
    ) -> Completion {
        Completion {
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
                    prompt_logprobs: None,
                }]
            },
            usage,
            timings: None,
            prompt_logprobs: None,
        }
    }
}

impl ChunkBuilder for CompletionStream {
    /// An echoed prompt without logprobs comes first (with them, it comes
    /// scored, from the engine).
    fn start(&mut self) -> Vec<String> {
        match &self.echo {
            Some(prompt) if self.logprobs.is_none() => {
                let text = echo_text(&self.tok, prompt);
                self.offset = text.chars().count();
                vec![self.chunk(text, None, None, None)]
            }
            _ => Vec::new(),
        }
    }

    fn prompt(&mut self, tokens: Vec<TokenInfo>) -> Vec<String> {
        if self.echo.is_none() {
            return Vec::new();
        }
        let k = self.logprobs.unwrap_or(0);
        let (lp, text) = CompletionLogprobs::prompt(&self.tok, &tokens, k);
        self.offset = text.chars().count();
        vec![self.chunk(text, Some(lp), None, None)]
    }

    /// llama-server's shape: a chunk without text, the progress beside its
    /// choices.
    fn progress(&mut self, progress: PromptProgress) -> Vec<String> {
        let chunk = self.chunk_value(String::new(), None, None, None);
        let mut v = serde_json::to_value(&chunk).unwrap_or_default();
        v["prompt_progress"] = crate::sse::progress_json(&progress);
        vec![v.to_string()]
    }

    fn text(&mut self, text: String, tokens: Vec<TokenInfo>) -> Vec<String> {
        if !self.generate {
            return Vec::new();
        }
        let lp = self.logprobs.map(|_| {
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
        let done = dropped_generation(done, self.generate);
        let mut out =
            vec![self.chunk(String::new(), None, Some(finish_reason(&done, false)), None)];
        if self.include_usage {
            out.push(self.chunk(String::new(), None, None, Some(Usage::from_done(&done))));
        }
        out
    }
}
