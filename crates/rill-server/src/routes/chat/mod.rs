//! `POST /v1/chat/completions`.

use crate::choices;
use crate::choices::usage_of;
use crate::errors::{parse_json, ApiError};
use crate::openai::logprobs::{chat_token, ChatLogprobs};
use crate::openai::params::{build_request, logprobs_count, random_id};
use crate::openai::responses::{
    now, AssistantMessage, ChatChoice, ChatCompletion, FunctionCall, StreamClock, Timings,
    ToolCallOut,
};
use crate::openai::types::ChatCompletionRequest;
use crate::routes::finish_reason;
use crate::sse;
use crate::state::AppState;
use crate::tool_choice::{call_grammar, CallSyntax, ReplyOutput, ToolChoice};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json as JsonBody;
use rill_chat::reply::ToolCall;
use rill_chat::reply::{Gathered, ReasoningFormat, ThinkSplitter};
use rill_chat::ChatTemplate;
use rill_chat::{ChatPrompt, ChatRequest, Content, Message};
use rill_engine::{
    ConstraintRequest, Done, Event, GrammarSpec, Request, ThinkingBudget, TokenInfo,
};
use serde_json::Value as Json;
use std::sync::Arc;

mod stream;
use stream::ChatStream;

/// A checked request, ready for the engine.
pub(crate) struct Prepared {
    pub(crate) request: Request,
    pub(crate) prompt_text: String,
    /// The tools offered (and whose calls are parsed from the reply).
    pub(crate) tools: Option<Vec<Json>>,
    pub(crate) parallel_tool_calls: bool,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// Where the reply's thinking goes.
    pub(crate) reasoning_format: ReasoningFormat,
    /// llama-server's `timings_per_token`: running timings on every chunk.
    pub(crate) timings_per_token: bool,
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ChatCompletionRequest = parse_json(&body?)?;
    let n = choices::count(req.sampling.n)?;
    let prepared = prepare(&state, req).await?;
    let logprobs = prepared.request.logprobs.is_some();
    let prompt_k = prepared.request.prompt_logprobs;
    if prepared.stream && prompt_k.is_some() {
        return Err(ApiError::bad_param(
            "prompt_logprobs",
            "prompt_logprobs is not available when streaming",
        ));
    }
    let outputs: Vec<ReplyOutput> = (0..n).map(|_| prepared.output()).collect();
    let (stream, include_usage) = (prepared.stream, prepared.include_usage);
    let clock =
        (prepared.timings_per_token).then(|| StreamClock::new(prepared.request.prompt.len()));
    let mut submitted = choices::submit(&state, prepared.request, n).await?;
    let id = format!("chatcmpl-{}", random_id(24));
    let created = now();
    let builder = |index: usize, output: ReplyOutput| ChatStream {
        id: id.clone(),
        index,
        created,
        model: state.config.model_id.clone(),
        tok: state.tok.clone(),
        output,
        logprobs,
        pending_logprobs: Vec::new(),
        n_calls: 0,
        args_sent: None,
        // With several choices the usage chunk comes once, after all.
        include_usage: include_usage && n == 1,
        clock: clock.clone(),
    };
    if stream && n == 1 {
        let output = outputs.into_iter().next().expect("one output");
        let choice = submitted.pop().expect("one choice");
        Ok(sse::response(
            choice.handle,
            builder(0, output),
            state.clone(),
        ))
    } else if stream {
        let builders = outputs
            .into_iter()
            .enumerate()
            .map(|(i, o)| builder(i, o))
            .collect();
        let tail_chunk = builder(0, prepared_output_placeholder());
        let tail: choices::Tail = Box::new(move |dones: &[Done]| {
            if !include_usage {
                return Vec::new();
            }
            let mut b = tail_chunk;
            vec![serde_json::to_string(&b.usage_chunk(dones)).unwrap_or_default()]
        });
        Ok(choices::response(submitted, builders, tail, state.clone()))
    } else {
        let mut out = Vec::with_capacity(n);
        let mut dones = Vec::with_capacity(n);
        let mut prompt_logprobs = None;
        for (i, (choice, output)) in submitted.into_iter().zip(outputs).enumerate() {
            let (c, d, prompt) = collect(&state, choice, output, logprobs, i).await?;
            out.push(c);
            dones.push(d);
            if let (None, Some(k), Some(tokens)) = (&prompt_logprobs, prompt_k, prompt) {
                prompt_logprobs = Some(crate::openai::logprobs::prompt_logprobs(
                    &state.tok, &tokens, k,
                ));
            }
        }
        Ok(JsonBody(ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model: state.config.model_id.clone(),
            choices: out,
            usage: Some(usage_of(&dones, n)),
            timings: Some(Timings::from_done(&dones[0])),
            prompt_logprobs,
        })
        .into_response())
    }
}

/// A parser for a builder that only writes the usage chunk.
fn prepared_output_placeholder() -> ReplyOutput {
    ReplyOutput::new("", None, true)
}

/// Check the request, render the prompt, tokenize it.
pub(crate) async fn prepare(
    state: &Arc<AppState>,
    req: ChatCompletionRequest,
) -> Result<Prepared, ApiError> {
    state.check_model(req.model.as_deref())?;
    let Some(template) = state.template.clone() else {
        return Err(ApiError::invalid(
            "the model has no chat template; use /v1/completions",
        ));
    };
    if req.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    let mut messages = req.messages.clone();
    check_messages(&mut messages)?;
    let reasoning_format = match req.reasoning_format.as_deref() {
        None => state.config.reasoning_format,
        Some(name) => ReasoningFormat::from_name(name).ok_or_else(|| {
            ApiError::bad_param(
                "reasoning_format",
                format!(
                    "unknown reasoning_format {name:?} (auto, deepseek, deepseek-legacy, none)"
                ),
            )
        })?,
    };
    let mut grammar = req.constraint.grammar()?;
    let choice = ToolChoice::parse(req.tool_choice.as_ref())?;
    let tools = match &req.tools {
        Some(tools) if !tools.is_empty() => {
            check_tools(tools)?;
            (choice != ToolChoice::None).then(|| tools.clone())
        }
        _ => None,
    };
    let parallel = req.parallel_tool_calls.unwrap_or(true);
    let forced = if choice.forces() {
        Some(forced_call(
            &template,
            &choice,
            tools.as_deref(),
            parallel,
            grammar.is_some(),
        )?)
    } else {
        None
    };
    let logprobs = logprobs_count(
        req.logprobs.unwrap_or(false),
        req.top_logprobs,
        "top_logprobs",
    )?;
    let sampling = req
        .sampling()
        .or_defaults(&state.config.sampling)
        .or_n_predict(state.config.n_predict);
    let mut request = build_request(&sampling, logprobs, state.ctx_size())?;
    crate::openai::params::check_token_ids(&request, state.tok.vocab_size())?;

    let mut chat = ChatRequest::new(messages);
    chat.parse_tool_call_arguments();
    chat.tools = tools.clone();
    // The server's kwargs first, the request's over them.
    let mut kwargs = state.config.chat_template_kwargs.clone();
    kwargs.extend(req.chat_template_kwargs.clone().unwrap_or_default());
    {
        for (k, v) in kwargs {
            if k == "enable_thinking" {
                match v {
                    Json::Bool(b) => chat.enable_thinking = Some(b),
                    Json::Null => {}
                    _ => {
                        return Err(ApiError::bad_param(
                            "chat_template_kwargs.enable_thinking",
                            "enable_thinking must be a boolean",
                        ))
                    }
                }
            } else {
                chat.extra.insert(k, v);
            }
        }
    }
    if let Some(b) = req.enable_thinking {
        chat.enable_thinking = Some(b);
    }
    // OpenAI's reasoning_effort: "none" turns thinking off; other levels
    // leave the template's default (the models have no graded effort).
    match req.reasoning_effort.as_deref() {
        None | Some("low" | "medium" | "high" | "minimal") => {}
        Some("none") => chat.enable_thinking = Some(false),
        Some(other) => {
            return Err(ApiError::bad_param(
                "reasoning_effort",
                format!("unknown reasoning_effort {other:?} (none, minimal, low, medium, high)"),
            ))
        }
    }
    // Rendering and tokenizing a long conversation is real work: keep it off
    // the I/O threads.
    // A final assistant message is a prefill the model continues (as
    // llama-server does; vLLM's `continue_final_message`), unless the
    // client says `continue_final_message: false`.
    let prefill = chat.messages.last().is_some_and(|m| m.role == "assistant")
        && req.continue_final_message != Some(false);
    let st = state.clone();
    let prompt = tokio::task::spawn_blocking(move || {
        if prefill {
            return render_prefill(&template, &chat, |t| st.tok.encode_prompt(t));
        }
        ChatPrompt::render(&template, &chat, |t| st.tok.encode_prompt(t))
            .map_err(|e| ApiError::invalid(e.to_string()).with_code("template_error"))
    })
    .await
    .map_err(|e| ApiError::internal(format!("prompt preparation failed: {e}")))??;
    let (prompt_text, ids, history_end) = (prompt.text, prompt.tokens, prompt.history_end);
    // The constraint starts after the thinking block when the prompt opens
    // one: the model thinks freely, then answers in the grammar.
    let in_think = ThinkSplitter::new(&prompt_text).in_think;
    let end_think = in_think
        .then(|| state.tok.token_to_id("</think>"))
        .flatten();
    let free_thinking = in_think && end_think.is_none();
    if let Some((syntax, chosen, one)) = forced {
        // A vocabulary without a `</think>` token: the call's grammar itself
        // lets the thinking run to its end.
        let refs: Vec<&Json> = chosen.iter().collect();
        grammar = Some(call_grammar(syntax, &refs, one, free_thinking)?);
    } else if free_thinking {
        // The same for any other constraint: free text up to `</think>`.
        grammar = grammar.map(GrammarSpec::after_thinking_text);
    }
    request.constraint = grammar.map(|grammar| ConstraintRequest {
        grammar,
        after: end_think,
    });
    if let Some(end) = end_think {
        request.thinking_budget = thinking_budget(state, &req, end)?;
    }
    request.prompt = ids;
    request.cache_points = history_end.into_iter().collect();
    request.report_progress = req.streaming.enabled() && req.return_progress == Some(true);
    Ok(Prepared {
        request,
        prompt_text,
        tools,
        parallel_tool_calls: parallel,
        stream: req.streaming.enabled(),
        include_usage: req.streaming.include_usage(),
        reasoning_format,
        timings_per_token: req.timings_per_token == Some(true),
    })
}

/// The thinking budget of a request whose prompt opens a thinking block
/// closed by token `end`: the request's `thinking_budget_tokens` (-1 or
/// none: the server's `--reasoning-budget`), and what closes the block.
fn thinking_budget(
    state: &AppState,
    req: &ChatCompletionRequest,
    end: u32,
) -> Result<Option<ThinkingBudget>, ApiError> {
    let (name, asked) = match req.reasoning_budget_tokens {
        Some(n) => ("reasoning_budget_tokens", Some(n)),
        None => ("thinking_budget_tokens", req.thinking_budget_tokens),
    };
    let tokens = match asked {
        None | Some(-1) => state.config.reasoning_budget,
        Some(n) => Some(usize::try_from(n).map_err(|_| {
            ApiError::bad_param(
                name,
                format!("{name} must be -1 (no limit) or >= 0 (got {n})"),
            )
        })?),
    };
    let message = (req.reasoning_budget_message.as_ref())
        .or(req.thinking_budget_message.as_ref())
        .or(state.config.reasoning_budget_message.as_ref());
    Ok(tokens.map(|tokens| {
        let mut closing = message.map_or_else(Vec::new, |m| state.tok.encode(m, false));
        closing.push(end);
        ThinkingBudget {
            tokens,
            end,
            closing,
        }
    }))
}

impl Prepared {
    /// The reply's parser, with this request's tool policy.
    pub(crate) fn output(&self) -> ReplyOutput {
        ReplyOutput::with_format(
            &self.prompt_text,
            self.tools.as_deref(),
            self.parallel_tool_calls,
            self.reasoning_format,
        )
    }
}

/// A forced call (`tool_choice` `required` or a named function), checked:
/// the template's tool-call syntax, the tools it may call, and whether
/// exactly one call is wanted.
fn forced_call(
    template: &ChatTemplate,
    choice: &ToolChoice,
    tools: Option<&[Json]>,
    parallel: bool,
    other_constraint: bool,
) -> Result<(CallSyntax, Vec<Json>, bool), ApiError> {
    if other_constraint {
        return Err(ApiError::bad_param(
            "tool_choice",
            "a forced tool call cannot be combined with response_format or another structured-output constraint",
        ));
    }
    let Some(tools) = tools else {
        return Err(ApiError::bad_param(
            "tool_choice",
            "tool_choice forces a tool call, but the request has no tools",
        ));
    };
    let syntax = CallSyntax::of(template).ok_or_else(|| {
        ApiError::bad_param(
            "tool_choice",
            "the chat template writes no tool-call syntax rill knows, so a call cannot be forced",
        )
    })?;
    match choice {
        ToolChoice::Named(n) => match tools.iter().find(|t| t["function"]["name"] == n.as_str()) {
            Some(t) => Ok((syntax, vec![t.clone()], true)),
            None => Err(ApiError::bad_param(
                "tool_choice",
                format!("tool_choice names the function {n:?}, which is not among the tools"),
            )),
        },
        _ => Ok((syntax, tools.to_vec(), !parallel)),
    }
}

/// The prompt that continues the final assistant message: the conversation
/// rendered without a generation prompt, cut right after that message's
/// text (its content, or its reasoning when the content is empty: then the
/// model goes on thinking), so the end-of-turn markup the template writes
/// after it is left out.
fn render_prefill(
    template: &ChatTemplate,
    chat: &ChatRequest,
    encode: impl Fn(&str) -> Vec<u32>,
) -> Result<ChatPrompt, ApiError> {
    let last = chat.messages.last().expect("a final assistant message");
    let content = match &last.content {
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(p)) => p.iter().filter_map(|p| p.text_value()).collect(),
        None => String::new(),
    };
    let needle = if content.is_empty() {
        last.reasoning_content.clone().unwrap_or_default()
    } else {
        content
    };
    let param = format!("messages[{}]", chat.messages.len() - 1);
    if needle.is_empty() || last.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad_param(
            &param,
            "a final assistant message is continued (prefill): it needs text and no tool calls",
        ));
    }
    let mut req = chat.clone();
    req.add_generation_prompt = false;
    let text = template
        .render(&req)
        .map_err(|e| ApiError::invalid(e.to_string()).with_code("template_error"))?;
    // Templates may trim the message; then it continues from the trimmed text.
    let found = [needle.as_str(), needle.trim()]
        .into_iter()
        .find_map(|n| text.rfind(n).map(|at| at + n.len()));
    let Some(end) = found else {
        return Err(ApiError::bad_param(
            &param,
            "the chat template does not render the final assistant message's text, so it cannot be continued",
        ));
    };
    let text = text[..end].to_string();
    let tokens = encode(&text);
    Ok(ChatPrompt {
        text,
        tokens,
        history_end: None,
    })
}

/// Roles the template knows; text-only content.
fn check_messages(messages: &mut [Message]) -> Result<(), ApiError> {
    for (i, m) in messages.iter_mut().enumerate() {
        match m.role.as_str() {
            "system" | "user" | "assistant" | "tool" => {}
            "developer" => m.role = "system".into(),
            other => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].role"),
                    format!("unknown role {other:?} (expected system, user, assistant or tool)"),
                ))
            }
        }
        if let Some(Content::Parts(parts)) = &m.content {
            for (j, p) in parts.iter().enumerate() {
                if p.kind() != Some("text") || p.text_value().is_none() {
                    return Err(ApiError::bad_param(
                        &format!("messages[{i}].content[{j}]"),
                        "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Each tool must be `{"type": "function", "function": {"name": ...}}`.
fn check_tools(tools: &[Json]) -> Result<(), ApiError> {
    for (i, t) in tools.iter().enumerate() {
        let ok = t.get("type").and_then(Json::as_str) == Some("function")
            && t.get("function")
                .and_then(|f| f.get("name"))
                .and_then(Json::as_str)
                .is_some_and(|n| !n.is_empty());
        if !ok {
            return Err(ApiError::bad_param(
                &format!("tools[{i}]"),
                "a tool must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}",
            ));
        }
    }
    Ok(())
}

fn tool_call_out(call: ToolCall) -> ToolCallOut {
    ToolCallOut {
        id: format!("call_{}", random_id(24)),
        kind: "function",
        function: FunctionCall {
            name: call.name,
            arguments: call.arguments,
        },
    }
}

/// Wait for one choice's whole reply (non-streaming), and its prompt's
/// tokens scored when the request asked for them.
async fn collect(
    state: &AppState,
    mut choice: choices::Choice,
    mut output: ReplyOutput,
    logprobs_on: bool,
    index: usize,
) -> Result<(ChatChoice, Done, Option<Vec<TokenInfo>>), ApiError> {
    let mut prompt = None;
    let mut g = Gathered::default();
    let mut logprobs = Vec::new();
    let done = loop {
        match choice.recv().await {
            Some(Event::Text { text, tokens }) => {
                g.add(output.feed(&text));
                if logprobs_on {
                    logprobs.extend(tokens.iter().filter_map(|t| chat_token(&state.tok, t)));
                }
            }
            Some(Event::Done(d)) => {
                state.observe_done(&d);
                break d;
            }
            Some(Event::Prompt { tokens }) => prompt = Some(tokens),
            Some(Event::Progress(_)) => {}
            Some(Event::Error(f)) => return Err(ApiError::failed(f)),
            None => return Err(ApiError::internal("the engine stopped")),
        }
    };
    g.add(output.finish());
    let finish = finish_reason(&done, !g.calls.is_empty());
    let calls: Vec<ToolCallOut> = g.calls.into_iter().map(tool_call_out).collect();
    let content = if g.content.is_empty() && !calls.is_empty() {
        None
    } else {
        Some(g.content)
    };
    let choice = ChatChoice {
        index,
        message: AssistantMessage {
            role: "assistant",
            content,
            reasoning_content: (!g.reasoning.is_empty()).then_some(g.reasoning),
            tool_calls: calls,
        },
        logprobs: logprobs_on.then_some(ChatLogprobs { content: logprobs }),
        finish_reason: finish,
    };
    Ok((choice, done, prompt))
}
