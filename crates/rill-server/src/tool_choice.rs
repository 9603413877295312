//! `tool_choice`: letting the model call a tool, or making it call one.
//!
//! `"required"` (Anthropic `any`) and a named function (Anthropic `tool`)
//! force a call: the reply is constrained, after the thinking block closes,
//! to the model's own tool-call syntax with arguments that match the tool's
//! parameter schema. The syntax is the one the chat template writes for an
//! assistant's calls, found by rendering a probe call:
//! - Qwen3.5's XML form: `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n…</function>\n</tool_call>`,
//!   where a string parameter's value is the bare text and any other value
//!   is JSON (as the template renders arguments and the reply parser reads
//!   them back);
//! - the Hermes JSON form (Qwen3, Qwen3-Next):
//!   `<tool_call>\n{"name": "NAME", "arguments": {…}}\n</tool_call>`.
//!
//! The grammar is llguidance's Lark dialect with the schemas embedded as
//! `%json` (the JSON-schema compiler), so the call parses by construction.

use crate::errors::ApiError;
use rill_chat::reply::{ChatOutput, Part, ReasoningFormat};
use rill_chat::{ChatRequest, ChatTemplate, Message};
use rill_engine::GrammarSpec;
use serde_json::{json, Value as Json};

/// What a request's `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may call a tool or answer (`"auto"`, the default with tools).
    Auto,
    /// No tools: the tools are not offered and calls are not parsed.
    None,
    /// At least one call (exactly one when parallel calls are off).
    Required,
    /// One call of this function.
    Named(String),
}

impl ToolChoice {
    /// OpenAI's forms: `"auto" | "none" | "required"` or
    /// `{"type": "function", "function": {"name": …}}`.
    pub fn parse(v: Option<&Json>) -> Result<ToolChoice, ApiError> {
        let p = "tool_choice";
        match v {
            None | Some(Json::Null) => Ok(ToolChoice::Auto),
            Some(Json::String(s)) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => Err(ApiError::bad_param(
                    p,
                    format!("unknown tool_choice {other:?} (auto, none, required, or {{\"type\": \"function\", \"function\": {{\"name\": …}}}})"),
                )),
            },
            Some(o @ Json::Object(_)) => {
                let name = (o.get("type").and_then(Json::as_str) == Some("function"))
                    .then(|| o.get("function").and_then(|f| f.get("name")))
                    .flatten()
                    .and_then(Json::as_str)
                    .filter(|n| !n.is_empty());
                match name {
                    Some(n) => Ok(ToolChoice::Named(n.to_string())),
                    None => Err(ApiError::bad_param(
                        p,
                        "a tool_choice object must be {\"type\": \"function\", \"function\": {\"name\": …}}",
                    )),
                }
            }
            Some(_) => Err(ApiError::bad_param(
                p,
                "tool_choice must be a string or an object",
            )),
        }
    }

    /// A call is forced.
    pub fn forces(&self) -> bool {
        matches!(self, ToolChoice::Required | ToolChoice::Named(_))
    }
}

/// How the chat template writes an assistant's tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallSyntax {
    /// `<tool_call>\n<function=NAME>\n<parameter=P>\n…` (Qwen3.5).
    Xml,
    /// `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>` (Hermes).
    Hermes,
}

impl CallSyntax {
    /// Render a probe call with `template` and see which form comes out.
    pub fn of(template: &ChatTemplate) -> Option<CallSyntax> {
        let mut call = Message::assistant("");
        call.tool_calls = Some(vec![json!({"id": "call_probe", "type": "function",
            "function": {"name": "rill_probe_call", "arguments": {"rill_probe_arg": 1}}})]);
        let chat = ChatRequest::new(vec![Message::user("probe"), call]);
        let text = template.render(&chat).ok()?;
        if text.contains("<function=rill_probe_call>")
            && text.contains("<parameter=rill_probe_arg>")
        {
            Some(CallSyntax::Xml)
        } else if text.contains("<tool_call>") && text.contains("\"rill_probe_call\"") {
            Some(CallSyntax::Hermes)
        } else {
            None
        }
    }
}

/// A Lark string literal for `s`.
fn lit(s: &str) -> String {
    Json::String(s.to_string()).to_string()
}

/// The `parameters` schema of a tool (`{"type": "function", "function":
/// {"name", "parameters"}}`); none means no arguments.
fn parameters(tool: &Json) -> Json {
    tool.get("function")
        .and_then(|f| f.get("parameters"))
        .filter(|p| !p.is_null())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}))
}

fn name(tool: &Json) -> &str {
    tool.get("function")
        .and_then(|f| f.get("name"))
        .and_then(Json::as_str)
        .unwrap_or("")
}

/// `schema` for `%json`, written compactly (as the template writes JSON
/// arguments: `json.dumps`' separators): free whitespace would let a model
/// pad forever.
fn embedded(schema: &Json) -> String {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.entry("x-guidance").or_insert_with(
            || json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    format!("%json {s}")
}

/// A string parameter's schema, when its value is free text (the XML form
/// writes it bare): `type: "string"` without an enum or const.
fn is_free_string(schema: &Json) -> bool {
    schema.get("type").and_then(Json::as_str) == Some("string")
        && schema.get("enum").is_none()
        && schema.get("const").is_none()
}

/// Text without the closing tag `</parameter>`.
const FREE_TEXT: &str = r"FREE_TEXT: /(?s:.*)/ & ~/(?s:.*<\/parameter>.*)/";

/// The options of a string enum (`enum` of strings, or a string `const`).
fn string_enum(schema: &Json) -> Option<Vec<String>> {
    let options: Vec<Json> = match (schema.get("enum"), schema.get("const")) {
        (Some(Json::Array(e)), _) => e.clone(),
        (None, Some(c)) => vec![c.clone()],
        _ => return None,
    };
    let strings: Vec<String> = options
        .iter()
        .filter_map(|o| o.as_str().map(str::to_string))
        .collect();
    (!strings.is_empty() && strings.len() == options.len()).then_some(strings)
}

/// Most tokens one free-text parameter value may take: the model must
/// close it eventually.
const MAX_VALUE_TOKENS: usize = 2048;

/// The grammar of the forced call(s): `tools` are the request's tools (of
/// the named one only, for [`ToolChoice::Named`]); `one`: exactly one call,
/// otherwise one or more (separated by a newline, as the template writes
/// parallel calls); `thinking`: the text starts inside a thinking block,
/// free up to its `</think>` (for vocabularies where `</think>` is not one
/// token, so the engine cannot start the grammar after it).
pub fn call_grammar(
    syntax: CallSyntax,
    tools: &[&Json],
    one: bool,
    thinking: bool,
) -> Result<GrammarSpec, ApiError> {
    let mut rules = Vec::new();
    let mut calls = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let fname = name(tool);
        let params = parameters(tool);
        if !params.is_object() {
            return Err(ApiError::bad_param(
                &format!("tools[{i}].function.parameters"),
                "a tool's parameters must be a JSON schema object",
            ));
        }
        let rule = format!("call_{i}");
        match syntax {
            CallSyntax::Hermes => {
                rules.push(format!(
                    "{rule}: {} args_{i} {}\nargs_{i}: {}",
                    lit(&format!(
                        "<tool_call>\n{{\"name\": {}, \"arguments\": ",
                        lit(fname)
                    )),
                    lit("}\n</tool_call>"),
                    embedded(&params)
                ));
            }
            CallSyntax::Xml => {
                let required: Vec<&str> = params
                    .get("required")
                    .and_then(Json::as_array)
                    .map(|r| r.iter().filter_map(Json::as_str).collect())
                    .unwrap_or_default();
                let mut body = Vec::new();
                let props = params.get("properties").and_then(Json::as_object);
                for (j, (key, schema)) in props.into_iter().flatten().enumerate() {
                    if key.is_empty() || key.contains(['>', '\n']) {
                        return Err(ApiError::bad_param(
                            &format!("tools[{i}].function.parameters"),
                            format!("parameter name {key:?} cannot be written in the model's tool-call syntax"),
                        ));
                    }
                    let p = format!("p_{i}_{j}");
                    let open = lit(&format!("<parameter={key}>\n"));
                    if is_free_string(schema) {
                        // Bare text up to the closing tag (lazy: the first
                        // `\n</parameter>\n` ends it), never holding the
                        // closing tag itself (the parser would end there).
                        rules.push(format!(
                            "{p}: {open} v_{i}_{j}\nv_{i}_{j}[suffix={}, max_tokens={MAX_VALUE_TOKENS}]: FREE_TEXT",
                            lit("\n</parameter>\n")
                        ));
                    } else if let Some(options) = string_enum(schema) {
                        // The template writes strings bare.
                        let alts: Vec<String> = options.iter().map(|o| lit(o)).collect();
                        rules.push(format!(
                            "{p}: {open} v_{i}_{j} {}\nv_{i}_{j}: {}",
                            lit("\n</parameter>\n"),
                            alts.join(" | ")
                        ));
                    } else {
                        rules.push(format!(
                            "{p}: {open} v_{i}_{j} {}\nv_{i}_{j}: {}",
                            lit("\n</parameter>\n"),
                            embedded(schema)
                        ));
                    }
                    let optional = if required.contains(&key.as_str()) {
                        ""
                    } else {
                        "?"
                    };
                    body.push(format!("{p}{optional}"));
                }
                rules.push(format!(
                    "{rule}: {} {} {}",
                    lit(&format!("<tool_call>\n<function={fname}>\n")),
                    body.join(" "),
                    lit("</function>\n</tool_call>")
                ));
            }
        }
        calls.push(rule);
    }
    if calls.is_empty() {
        return Err(ApiError::bad_param(
            "tool_choice",
            "tool_choice forces a call but no tools are given",
        ));
    }
    let repeat = if one { "" } else { " (\"\\n\" call)*" };
    // After `</think>` the template writes a blank line before the answer.
    let (think, think_rule) = if thinking {
        ("think ", "think[suffix=\"</think>\"]: /(?s:.*)/\n")
    } else {
        ("", "")
    };
    let lark = format!(
        "start: {think}lead? call{repeat}\n{think_rule}lead: \"\\n\" | \"\\n\\n\"\ncall: {}\n{}\n{FREE_TEXT}\n",
        calls.join(" | "),
        rules.join("\n")
    );
    Ok(GrammarSpec::Lark(lark))
}

/// Parameter values the reply parser took as JSON where the tool's schema
/// says string (the XML form writes strings bare, so `42` reads back as a
/// number): turned back into the string the model wrote.
pub fn coerce_to_schema(tools: &[Json], name: &str, arguments: &str) -> Option<String> {
    let mut args: serde_json::Map<String, Json> = serde_json::from_str(arguments).ok()?;
    let mut changed = false;
    for (k, v) in args.iter_mut() {
        changed |= coerce_argument(tools, name, k, v);
    }
    changed.then(|| Json::Object(args).to_string())
}

/// [`coerce_to_schema`] for one argument `key` of a call of `name`; true
/// when `value` changed.
pub fn coerce_argument(tools: &[Json], name: &str, key: &str, value: &mut Json) -> bool {
    let Some(tool) = tools.iter().find(|t| self::name(t) == name) else {
        return false;
    };
    let wants_string = parameters(tool)
        .get("properties")
        .and_then(|p| p.get(key))
        .and_then(|s| s.get("type"))
        .and_then(Json::as_str)
        == Some("string");
    if wants_string && !value.is_string() {
        *value = Json::String(value.to_string());
        return true;
    }
    false
}

/// A reply split into parts ([`ChatOutput`]), with the request's tool
/// policy on its calls: arguments coerced to the tools' schemas (streamed
/// ones too, one by one), and at most one call when parallel calls are off.
pub struct ReplyOutput {
    inner: ChatOutput,
    tools: Vec<Json>,
    parallel: bool,
    calls: usize,
    /// The call whose start went out and whose end has not: its name, or
    /// `None` when the policy drops it.
    streaming: Option<Option<String>>,
}

impl ReplyOutput {
    pub fn new(prompt: &str, tools: Option<&[Json]>, parallel: bool) -> ReplyOutput {
        ReplyOutput::with_format(prompt, tools, parallel, ReasoningFormat::Apart)
    }

    /// [`new`](Self::new), the thinking sent where `format` says.
    pub fn with_format(
        prompt: &str,
        tools: Option<&[Json]>,
        parallel: bool,
        format: ReasoningFormat,
    ) -> ReplyOutput {
        ReplyOutput {
            inner: ChatOutput::with_format(prompt, tools.is_some(), format),
            tools: tools.map(<[Json]>::to_vec).unwrap_or_default(),
            parallel,
            calls: 0,
            streaming: None,
        }
    }

    pub fn feed(&mut self, text: &str) -> Vec<Part> {
        let parts = self.inner.feed(text);
        self.police(parts)
    }

    pub fn finish(&mut self) -> Vec<Part> {
        let parts = self.inner.finish();
        self.police(parts)
    }

    /// Whether one more call may go out (counting it when it may).
    fn admit(&mut self) -> bool {
        let ok = self.parallel || self.calls == 0;
        self.calls += usize::from(ok);
        ok
    }

    fn police(&mut self, parts: Vec<Part>) -> Vec<Part> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            match p {
                Part::CallStart(name) => {
                    let kept = self.admit();
                    self.streaming = Some(kept.then(|| name.clone()));
                    if kept {
                        out.push(Part::CallStart(name));
                    }
                }
                Part::CallArgument(k, mut v) => {
                    if let Some(Some(name)) = &self.streaming {
                        coerce_argument(&self.tools, name, &k, &mut v);
                        out.push(Part::CallArgument(k, v));
                    }
                }
                Part::Call(mut c) => {
                    let keep = match self.streaming.take() {
                        Some(kept) => kept.is_some(),
                        None => self.admit(),
                    };
                    if !keep {
                        continue;
                    }
                    if let Some(a) = coerce_to_schema(&self.tools, &c.name, &c.arguments) {
                        c.arguments = a;
                    }
                    out.push(Part::Call(c));
                }
                other => out.push(other),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_choice_forms() {
        let parse = |v: Json| ToolChoice::parse(Some(&v));
        assert_eq!(parse(json!("auto")).unwrap(), ToolChoice::Auto);
        assert_eq!(parse(json!("none")).unwrap(), ToolChoice::None);
        assert_eq!(parse(json!("required")).unwrap(), ToolChoice::Required);
        assert_eq!(
            parse(json!({"type": "function", "function": {"name": "f"}})).unwrap(),
            ToolChoice::Named("f".into())
        );
        assert_eq!(ToolChoice::parse(None).unwrap(), ToolChoice::Auto);
        for bad in [
            json!("always"),
            json!(3),
            json!({"type": "function"}),
            json!({"type": "tool", "function": {"name": "f"}}),
            json!({"type": "function", "function": {"name": ""}}),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
        }
    }

    #[test]
    fn string_values_come_back_as_strings() {
        let tools = vec![json!({"type": "function", "function": {"name": "f",
            "parameters": {"type": "object", "properties": {
                "code": {"type": "string"}, "n": {"type": "integer"}}}}})];
        assert_eq!(
            coerce_to_schema(&tools, "f", r#"{"code":42,"n":3}"#).as_deref(),
            Some(r#"{"code":"42","n":3}"#)
        );
        assert_eq!(coerce_to_schema(&tools, "f", r#"{"code":"x","n":3}"#), None);
        assert_eq!(coerce_to_schema(&tools, "g", r#"{"code":1}"#), None);
    }

    /// Generate under the call grammar with seeded random logits that like
    /// the markup's closing pieces (a stand-in model that would write
    /// anything), as the engine does: mask, pick, commit.
    fn generate(
        syntax: CallSyntax,
        tools: &[Json],
        one: bool,
        thinking: bool,
        seed: u64,
    ) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models/qwen35moe.f32.gguf");
        let tok = std::sync::Arc::new(rill_tokenizer::Tokenizer::from_gguf_path(&path).unwrap());
        let grammars =
            rill_grammar::Grammars::new(tok.clone(), rill_grammar::MaskTiming::Ahead).unwrap();
        let refs: Vec<&Json> = tools.iter().collect();
        let spec = call_grammar(syntax, &refs, one, thinking).unwrap();
        let mut c = grammars
            .compile(&spec)
            .unwrap_or_else(|e| panic!("{e}\n{spec:?}"));
        let end = tok.token_to_id("<|im_end|>").unwrap();
        let liked: Vec<u32> = ["\"", "}", "]", "1", "true"]
            .iter()
            .flat_map(|s| tok.encode(s, false))
            .chain([end])
            .collect();
        // ... and once it has begun a closing tag, goes on with it.
        // While thinking, it ends the thinking the same way.
        let closing = tok.encode("\n</parameter>\n</function>\n</tool_call>", false);
        let end_think = tok.encode("</think>", false);
        let follow = |ids: &[u32]| {
            let text = tok.decode(ids).unwrap();
            let seq = if thinking && !text.contains("</think>") {
                &end_think
            } else {
                &closing
            };
            let at = ids.last().and_then(|l| seq.iter().position(|t| t == l));
            seq.get(at.map_or(0, |i| i + 1)).copied()
        };
        let mut rng = rill_sampler::Rng::new(seed);
        let mut ids = Vec::new();
        for _ in 0..600 {
            let mut logits = rng.uniform_vec(tok.vocab_size(), 10.0);
            for &t in &liked {
                logits[t as usize] += 9.0;
            }
            if let Some(t) = follow(&ids) {
                logits[t as usize] += 15.0;
            }
            // One call is enough for this model (the grammar lets it go on).
            if tok.decode(&ids).unwrap().ends_with("</tool_call>") {
                logits[end as usize] += 40.0;
            }
            assert!(
                c.mask(&mut logits).unwrap() > 0,
                "the grammar left no token"
            );
            let id = rill_sampler::argmax(&logits);
            if id == end {
                assert!(c.is_accepting(), "ended early: {:?}", tok.decode(&ids));
                return tok.decode(&ids).unwrap();
            }
            c.commit(id).unwrap();
            ids.push(id);
        }
        panic!("no end in 600 tokens: {:?}", tok.decode(&ids).unwrap())
    }

    fn weather_tools() -> Vec<Json> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "minimum": 1, "maximum": 9},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "detailed": {"type": "boolean"}},
                "required": ["city", "days", "unit"]}}}),
            json!({"type": "function", "function": {"name": "get_time",
                "parameters": {"type": "object", "properties": {
                    "zones": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}},
                "required": ["zones"]}}}),
        ]
    }

    /// The arguments a call must have under `weather_tools`' schemas.
    fn check_call(call: &rill_chat::reply::ToolCall) {
        let args: Json = serde_json::from_str(&call.arguments).unwrap();
        match call.name.as_str() {
            "get_weather" => {
                assert!(args["city"].is_string(), "{args}");
                let days = args["days"].as_i64().expect("days is an integer");
                assert!((1..=9).contains(&days), "{args}");
                assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
                assert!(args.get("detailed").is_none_or(Json::is_boolean), "{args}");
            }
            "get_time" => {
                let zones = args["zones"].as_array().expect("zones is an array");
                assert!((1..=2).contains(&zones.len()) && zones.iter().all(Json::is_string));
            }
            other => panic!("unknown function {other}"),
        }
    }

    #[test]
    fn forced_calls_parse_and_match_the_schemas_in_both_syntaxes() {
        let tools = weather_tools();
        for syntax in [CallSyntax::Xml, CallSyntax::Hermes] {
            for (seed, one) in [(1, true), (2, false), (3, true), (4, false)] {
                let text = generate(syntax, &tools, one, false, seed);
                let mut out = ReplyOutput::new("<think>\n\n</think>\n\n", Some(&tools), true);
                let mut g = rill_chat::reply::Gathered::default();
                g.add(out.feed(&text));
                g.add(out.finish());
                assert!(!g.calls.is_empty(), "{syntax:?}: no call in {text:?}");
                if one {
                    assert_eq!(g.calls.len(), 1, "{text:?}");
                }
                assert!(
                    g.content.trim().is_empty(),
                    "{syntax:?}: text outside calls: {text:?}"
                );
                g.calls.iter().for_each(check_call);
            }
        }
    }

    #[test]
    fn a_named_call_is_that_function() {
        let tools = weather_tools();
        let named = [tools[1].clone()];
        for seed in 5..8 {
            let text = generate(CallSyntax::Xml, &named, true, false, seed);
            assert!(text.contains("<function=get_time>"), "{text:?}");
        }
    }

    #[test]
    fn the_call_can_follow_a_thinking_block() {
        let tools = weather_tools();
        for (syntax, seed) in [(CallSyntax::Xml, 9), (CallSyntax::Hermes, 10)] {
            let text = generate(syntax, &tools, true, true, seed);
            let mut out = ReplyOutput::new("<|im_start|>assistant\n<think>\n", Some(&tools), true);
            let mut g = rill_chat::reply::Gathered::default();
            g.add(out.feed(&text));
            g.add(out.finish());
            assert_eq!(g.calls.len(), 1, "{syntax:?}: {text:?}");
            check_call(&g.calls[0]);
        }
    }
}
