//! Chat-template rendering for rill.
//!
//! A model's `tokenizer.chat_template` is a Jinja2 template written for Python jinja2 as
//! transformers' `apply_chat_template` runs it. [`ChatTemplate`] renders it with minijinja,
//! configured and extended so the output matches transformers byte for byte:
//!
//! * environment: `trim_blocks`, `lstrip_blocks`, no autoescape, loop controls, trailing newline
//!   of the template dropped;
//! * globals: `raise_exception(msg)` (a typed [`TemplateError::Raised`]), `strftime_now(fmt)`,
//!   `namespace(...)`, `dict(...)`;
//! * `tojson` as transformers defines it (`json.dumps(x, ensure_ascii=False, indent=None,
//!   separators=None, sort_keys=False)`), Python float formatting included;
//! * printing and `|string` use Python's `str()` (`True`, `None`, `['a']`, `{'k': 1}`);
//! * Python `str` methods (`split`, `strip`, `startswith`, ...) and `trim` with Python's whitespace
//!   rules; jinja2's `sequence`/`iterable`/`number` tests; `items`/`length` on undefined;
//! * the context transformers builds: `messages` (with `None` fields dropped and reasoning
//!   aliased), `tools` (`none` when absent), `documents` (`none`), `add_generation_prompt`,
//!   `bos_token`/`eos_token` when set, `enable_thinking` when set, and any other kwargs.
//!
//! Known differences from jinja2, none of which the Qwen templates exercise: `~` concatenation
//! formats booleans/`none` the minijinja way (`true`, `none`) rather than Python's; tuples print as
//! lists; `x.items`-style attribute access on a dict returns the key, not the dict method; Python
//! `%`-formatting is not available.
//!
//! ```
//! use rill_chat::{ChatRequest, ChatTemplate, Message};
//! let t = ChatTemplate::new(
//!     "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
//!     None,
//!     Some("</s>".into()),
//! )
//! .unwrap();
//! let out = t.render(&ChatRequest::new(vec![Message::user("hi")])).unwrap();
//! assert_eq!(out, "<|user|>hi");
//! ```

mod env;
mod message;
mod prompt;
mod pyfmt;
mod pystr;
pub mod reply;

use minijinja::Environment;
use serde_json::{Map, Value as Json};

pub use message::{ChatRequest, Content, ContentPart, Message};
pub use prompt::ChatPrompt;

const TEMPLATE_NAME: &str = "chat_template";

/// Keys the renderer itself passes; a request's `extra` kwargs may not reuse them.
const RESERVED_KWARGS: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// Errors from compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The template source does not compile.
    #[error("chat template syntax error{}: {message}", fmt_line(*.line))]
    Syntax {
        message: String,
        line: Option<usize>,
    },
    /// The template called `raise_exception(message)` (e.g. a bad role order).
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    /// Rendering failed (undefined value, type error, bad filter argument, ...).
    #[error("chat template render error{}: {message}", fmt_line(*.line))]
    Render {
        message: String,
        line: Option<usize>,
    },
    /// The request cannot be turned into a template context.
    #[error("invalid chat request: {0}")]
    InvalidRequest(String),
}

fn fmt_line(line: Option<usize>) -> String {
    line.map(|l| format!(" at line {l}")).unwrap_or_default()
}

/// A compiled chat template plus the special-token strings it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` (a GGUF `tokenizer.chat_template` / HF `chat_template`). `bos_token`
    /// and `eos_token` are exposed to the template when set (transformers only passes special
    /// tokens the tokenizer defines).
    pub fn new(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<ChatTemplate, TemplateError> {
        let mut env = env::build_environment();
        env.add_template_owned(TEMPLATE_NAME, env::rewrite_generation_tags(source))
            .map_err(|e| TemplateError::Syntax {
                message: error_message(&e),
                line: e.line(),
            })?;
        Ok(ChatTemplate {
            env,
            bos_token,
            eos_token,
        })
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos_token.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Renders the conversation to the prompt text.
    pub fn render(&self, request: &ChatRequest) -> Result<String, TemplateError> {
        let ctx = self.context(request)?;
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render {
                message: error_message(&e),
                line: e.line(),
            })?;
        tmpl.render(minijinja::Value::from_serialize(&ctx))
            .map_err(|e| render_error(&e))
    }

    /// The template context, as transformers' `apply_chat_template` builds it.
    fn context(&self, request: &ChatRequest) -> Result<Map<String, Json>, TemplateError> {
        if let Some(key) = request
            .extra
            .keys()
            .find(|k| RESERVED_KWARGS.contains(&k.as_str()))
        {
            return Err(TemplateError::InvalidRequest(format!(
                "chat-template kwarg {key:?} is reserved"
            )));
        }
        let mut messages = Vec::with_capacity(request.messages.len());
        for m in &request.messages {
            let m = m
                .to_template_json()
                .map_err(|e| TemplateError::InvalidRequest(e.to_string()))?;
            messages.push(Json::Object(m));
        }
        let mut ctx = Map::new();
        ctx.insert("messages".into(), Json::Array(messages));
        ctx.insert(
            "tools".into(),
            request.tools.clone().map(Json::Array).unwrap_or(Json::Null),
        );
        ctx.insert("documents".into(), Json::Null);
        ctx.insert(
            "add_generation_prompt".into(),
            Json::Bool(request.add_generation_prompt),
        );
        if let Some(bos) = &self.bos_token {
            ctx.insert("bos_token".into(), Json::from(bos.as_str()));
        }
        if let Some(eos) = &self.eos_token {
            ctx.insert("eos_token".into(), Json::from(eos.as_str()));
        }
        for (k, v) in &request.extra {
            ctx.insert(k.clone(), v.clone());
        }
        if let Some(t) = request.enable_thinking {
            ctx.insert("enable_thinking".into(), Json::Bool(t));
        }
        Ok(ctx)
    }
}

fn error_message(e: &minijinja::Error) -> String {
    match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    }
}

fn render_error(e: &minijinja::Error) -> TemplateError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(raised) = err.downcast_ref::<env::Raised>() {
            return TemplateError::Raised(raised.0.clone());
        }
        source = err.source();
    }
    TemplateError::Render {
        message: error_message(e),
        line: e.line(),
    }
}
