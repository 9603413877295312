//! Chat-template plumbing shared by `rill run --chat` and `rill chat`.

use anyhow::{Context, Result};
use rill_chat::{ChatPrompt, ChatRequest, ChatTemplate, Message};
use rill_load::ModelInfo;
use rill_tokenizer::Tokenizer;

/// The model's chat template, or why there is none.
pub fn template<'a>(t: &'a Option<ChatTemplate>, info: &ModelInfo) -> Result<&'a ChatTemplate> {
    t.as_ref().with_context(|| match &info.template_problem {
        Some(p) => format!("{}: {p}", info.label),
        None => format!(
            "{} has no chat template (tokenizer.chat_template)",
            info.label
        ),
    })
}

/// Render `messages` with a generation prompt and tokenize them as the
/// server does. `thinking: None` leaves the template's default (Qwen3.5
/// thinks unless told not to).
pub fn render(
    tmpl: &ChatTemplate,
    tok: &Tokenizer,
    messages: &[Message],
    thinking: Option<bool>,
) -> Result<ChatPrompt> {
    let mut req = ChatRequest::new(messages.to_vec());
    req.enable_thinking = thinking;
    ChatPrompt::render(tmpl, &req, |t| tok.encode_prompt(t))
        .context("the chat template failed to render")
}
