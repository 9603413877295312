//! A chat rendered into the prompt a front end submits: its text, its
//! tokens, and where the conversation so far ends.

use crate::{ChatRequest, ChatTemplate, TemplateError};

/// A rendered chat prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatPrompt {
    pub text: String,
    pub tokens: Vec<u32>,
    /// Tokens of the conversation before this turn's generation prompt,
    /// when they are a prefix of `tokens`: the next turn renders them the
    /// same way (but not the generation prompt), so that is where a prompt
    /// cache should keep a snapshot.
    pub history_end: Option<usize>,
}

impl ChatPrompt {
    /// Render `request` with a generation prompt and tokenize it with
    /// `encode` (the tokenizer's prompt encoding, BOS rules included).
    pub fn render(
        template: &ChatTemplate,
        request: &ChatRequest,
        encode: impl Fn(&str) -> Vec<u32>,
    ) -> Result<ChatPrompt, TemplateError> {
        let mut req = request.clone();
        req.add_generation_prompt = true;
        let text = template.render(&req)?;
        let tokens = encode(&text);
        req.add_generation_prompt = false;
        let history_end = template
            .render(&req)
            .ok()
            .filter(|h| text.starts_with(h.as_str()) && h.len() < text.len())
            .map(|h| encode(&h))
            .filter(|h| h.len() < tokens.len() && tokens.starts_with(h))
            .map(|h| h.len());
        Ok(ChatPrompt {
            text,
            tokens,
            history_end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    #[test]
    fn the_history_ends_before_the_generation_prompt() {
        let t = ChatTemplate::new(
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\
             {% if add_generation_prompt %}<assistant>{% endif %}",
            None,
            None,
        )
        .unwrap();
        // One "token" per character.
        let encode = |s: &str| s.chars().map(|c| c as u32).collect::<Vec<u32>>();
        let req = ChatRequest::new(vec![Message::user("hi")]);
        let p = ChatPrompt::render(&t, &req, encode).unwrap();
        assert_eq!(p.text, "<user>hi<assistant>");
        assert_eq!(p.tokens.len(), p.text.len());
        assert_eq!(p.history_end, Some("<user>hi".len()));
    }
}
