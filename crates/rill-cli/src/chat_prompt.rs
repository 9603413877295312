//! Chat-template plumbing shared by `rill run --chat` and `rill chat`.

use anyhow::{Context, Result};
use rill_chat::{ChatRequest, ChatTemplate, Message};
use rill_gguf::{GgufFile, MetaValue};
use rill_tokenizer::Tokenizer;

/// The file's chat template, with its BOS/EOS strings as transformers passes them.
pub fn load_template(file: &GgufFile, tok: &Tokenizer) -> Result<ChatTemplate> {
    let source = file
        .get("tokenizer.chat_template")
        .and_then(MetaValue::as_str)
        .context("the model file has no chat template (tokenizer.chat_template)")?;
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).map(str::to_string);
    ChatTemplate::new(source, text(tok.bos_id()), text(tok.eos_id()))
        .context("the model's chat template does not compile")
}

/// Render `messages` with a generation prompt. `thinking: None` leaves the
/// template's default (Qwen3.5 thinks unless told not to).
pub fn render(tmpl: &ChatTemplate, messages: &[Message], thinking: Option<bool>) -> Result<String> {
    let mut req = ChatRequest::new(messages.to_vec());
    req.add_generation_prompt = true;
    req.enable_thinking = thinking;
    tmpl.render(&req)
        .context("the chat template failed to render")
}

/// The thinking / answer splitter lives with the server, which uses it too.
pub use rill_server::reasoning::{Piece, ThinkSplitter};
