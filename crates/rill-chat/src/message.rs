//! Chat messages and render requests, in the OpenAI chat-completions JSON shape.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

/// A message's content: plain text or a list of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// `"content": "text"`
    Text(String),
    /// `"content": [{"type": "text", "text": "..."}, {"type": "image_url", ...}]`
    Parts(Vec<ContentPart>),
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_string())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

/// One content part, kept as the JSON object the client sent (`type` plus type-specific keys),
/// so templates see exactly what Python would (`'image' in item`, `item.type`, `item.text`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ContentPart(pub Map<String, Json>);

impl ContentPart {
    /// `{"type": "text", "text": text}`
    pub fn text(text: impl Into<String>) -> Self {
        let mut m = Map::new();
        m.insert("type".into(), Json::from("text"));
        m.insert("text".into(), Json::from(text.into()));
        ContentPart(m)
    }

    /// The part's `type`, if it has a string one.
    pub fn kind(&self) -> Option<&str> {
        self.0.get("type").and_then(Json::as_str)
    }

    /// The part's `text`, if it has a string one.
    pub fn text_value(&self) -> Option<&str> {
        self.0.get("text").and_then(Json::as_str)
    }
}

/// One chat message (OpenAI chat format). Fields that are `None` are left out of the template
/// context entirely (transformers drops `None`-valued keys), so templates see them as undefined.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// OpenAI-style `{"id", "type": "function", "function": {"name", "arguments"}}` objects
    /// (or any shape the template understands). `arguments` is passed as given: a JSON object or
    /// a JSON-encoded string (see [`ChatRequest::parse_tool_call_arguments`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Any other keys (e.g. `reasoning`, `thinking`), passed to the template unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Json>,
}

impl Message {
    /// A message with the given role and text content.
    pub fn new(role: impl Into<String>, content: impl Into<Content>) -> Self {
        Message {
            role: role.into(),
            content: Some(content.into()),
            ..Default::default()
        }
    }

    pub fn system(content: impl Into<Content>) -> Self {
        Self::new("system", content)
    }

    pub fn user(content: impl Into<Content>) -> Self {
        Self::new("user", content)
    }

    pub fn assistant(content: impl Into<Content>) -> Self {
        Self::new("assistant", content)
    }

    pub fn tool(content: impl Into<Content>) -> Self {
        Self::new("tool", content)
    }

    /// The message as the template sees it: `None` fields dropped, and reasoning aliased the way
    /// transformers does (the first non-null of `reasoning_content`, `thinking`, `reasoning`
    /// becomes both `thinking` and `reasoning_content`).
    pub(crate) fn to_template_json(&self) -> Result<Map<String, Json>, serde_json::Error> {
        let mut map = match serde_json::to_value(self)? {
            Json::Object(map) => map,
            _ => Map::new(),
        };
        map.retain(|_, v| !v.is_null());
        let reasoning = ["reasoning_content", "thinking", "reasoning"]
            .iter()
            .find_map(|k| map.get(*k).cloned());
        if let Some(r) = reasoning {
            // Python: {"thinking": r, **message, "reasoning_content": r}
            let mut aliased = Map::new();
            aliased.insert("thinking".into(), r.clone());
            for (k, v) in map {
                aliased.insert(k, v);
            }
            aliased.insert("reasoning_content".into(), r);
            map = aliased;
        }
        Ok(map)
    }
}

/// Everything a chat-template render needs besides the template itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// Tool definitions (OpenAI `{"type": "function", "function": {...}}` objects). `None` is
    /// passed to the template as `none`, like transformers' `tools=None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Json>>,
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// `enable_thinking` chat-template kwarg; `None` leaves it undefined in the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_thinking: Option<bool>,
    /// Other chat-template kwargs (`add_vision_id`, `reasoning_effort`, ...). They override
    /// `bos_token`/`eos_token`, like transformers' kwargs override special tokens.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Json>,
}

impl ChatRequest {
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest {
            messages,
            ..Default::default()
        }
    }

    /// OpenAI clients send `tool_calls[].function.arguments` as a JSON-encoded string; templates
    /// such as Qwen3.5's iterate over it as a mapping (`arguments|items`), which fails on a string.
    /// This replaces every string `arguments` that parses as a JSON object with the object.
    /// transformers does not do this itself, so it is opt-in.
    pub fn parse_tool_call_arguments(&mut self) {
        for msg in &mut self.messages {
            for call in msg.tool_calls.iter_mut().flatten() {
                let target = match call.get_mut("function") {
                    Some(f) if f.is_object() => f,
                    _ => call,
                };
                if let Some(args) = target.get_mut("arguments") {
                    if let Some(s) = args.as_str() {
                        if let Ok(parsed @ Json::Object(_)) = serde_json::from_str::<Json>(s) {
                            *args = parsed;
                        }
                    }
                }
            }
        }
    }
}
