//! API behaviour: typed errors, OpenAI-format (de)serialization, helpers, and no panics on odd
//! input.

use std::path::PathBuf;

use rill_chat::{ChatRequest, ChatTemplate, Content, ContentPart, Message, TemplateError};
use serde_json::json;

fn fixture_template(name: &str) -> ChatTemplate {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/templates")
        .join(format!("{name}.jinja"));
    let src = std::fs::read_to_string(path).unwrap();
    ChatTemplate::new(&src, None, Some("<|im_end|>".into())).unwrap()
}

fn render_src(src: &str, req: &ChatRequest) -> Result<String, TemplateError> {
    ChatTemplate::new(src, Some("<s>".into()), Some("</s>".into()))?.render(req)
}

#[test]
fn syntax_errors_are_typed_with_a_line() {
    let err = ChatTemplate::new("line one\n{{ ok }}\n{% if %}\n", None, None).unwrap_err();
    match err {
        TemplateError::Syntax { line, ref message } => {
            assert_eq!(line, Some(3), "{message}");
            assert!(err.to_string().contains("line 3"), "{err}");
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
    assert!(matches!(
        ChatTemplate::new("{% for x in y %}", None, None),
        Err(TemplateError::Syntax { .. })
    ));
}

#[test]
fn raise_exception_is_typed() {
    let req = ChatRequest::new(vec![Message::user("hi")]);
    let err = render_src(
        "{% macro f() %}{{ raise_exception('bad ' ~ messages[0].role) }}{% endmacro %}{{ f() }}",
        &req,
    )
    .unwrap_err();
    assert!(
        matches!(&err, TemplateError::Raised(m) if m == "bad user"),
        "{err:?}"
    );
}

#[test]
fn render_errors_are_typed() {
    let req = ChatRequest::new(vec![Message::user("hi")]);
    for src in [
        "{{ messages[3].role }}",
        "{{ 'a' + 1 }}",
        "{{ nothing.attr }}",
        "{{ messages|tojson(indent='x', bogus=1) }}",
        "{{ undefined_var|tojson }}",
        "{{ strftime_now('%Q') }}",
        "{{ 'a'.split('') }}",
        "{{ 'abc'|items }}",
        "{% for x in 5 %}{% endfor %}",
    ] {
        let err = render_src(src, &req).unwrap_err();
        assert!(
            matches!(err, TemplateError::Render { .. }),
            "{src}: {err:?}"
        );
    }
}

#[test]
fn context_has_transformers_variables() {
    let mut req = ChatRequest::new(vec![Message::user("hi")]);
    let src = "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ enable_thinking is defined }}|{{ foo }}";
    assert_eq!(
        render_src(src, &req).unwrap(),
        "<s>|</s>|None|None|False|False|"
    );
    req.enable_thinking = Some(false);
    req.add_generation_prompt = true;
    req.tools = Some(vec![json!({"name": "f"})]);
    req.extra.insert("foo".into(), json!([1, "x"]));
    req.extra.insert("eos_token".into(), json!("<eot>"));
    assert_eq!(
        render_src(src, &req).unwrap(),
        "<s>|<eot>|[{'name': 'f'}]|None|True|True|[1, 'x']"
    );
    let t = ChatTemplate::new("[{{ bos_token }}]{{ bos_token is defined }}", None, None).unwrap();
    assert_eq!(t.render(&req).unwrap(), "[]False");
}

#[test]
fn reserved_kwargs_are_rejected() {
    let mut req = ChatRequest::new(vec![Message::user("hi")]);
    req.extra.insert("messages".into(), json!([]));
    assert!(matches!(
        render_src("x", &req),
        Err(TemplateError::InvalidRequest(_))
    ));
}

#[test]
fn strftime_now_and_generation_tags() {
    let req = ChatRequest::new(vec![Message::user("hi")]);
    let year = render_src("{{ strftime_now('%Y') }}", &req).unwrap();
    assert_eq!(year.len(), 4);
    assert!(year.chars().all(|c| c.is_ascii_digit()));
    let out = render_src(
        "{% for m in messages %}\n{% generation %}\n{{ m.content }}\n{% endgeneration %}\n{% endfor %}",
        &req,
    )
    .unwrap();
    assert_eq!(out, "hi\n");
}

#[test]
fn openai_messages_round_trip() {
    let raw = json!([
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:..."}}
        ]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Bern\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny.", "reasoning_content": "easy", "refusal": null}
    ]);
    let msgs: Vec<Message> = serde_json::from_value(raw).unwrap();
    assert_eq!(msgs[0], Message::system("sys"));
    match &msgs[1].content {
        Some(Content::Parts(parts)) => {
            assert_eq!(parts[0], ContentPart::text("look"));
            assert_eq!(parts[1].kind(), Some("image_url"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(msgs[2].content, None);
    assert_eq!(msgs[3].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(msgs[4].reasoning_content.as_deref(), Some("easy"));
    let back = serde_json::to_value(&msgs).unwrap();
    let again: Vec<Message> = serde_json::from_value(back).unwrap();
    assert_eq!(again, msgs);

    // Qwen3.5 iterates over the arguments as a mapping: the string form fails like in Python,
    // and works once parsed.
    let t = fixture_template("qwen3_5");
    let mut req = ChatRequest::new(msgs);
    assert!(matches!(t.render(&req), Err(TemplateError::Render { .. })));
    req.parse_tool_call_arguments();
    let out = t.render(&req).unwrap();
    assert!(
        out.contains("<tool_call>\n<function=get_weather>\n<parameter=city>\nBern\n</parameter>"),
        "{out}"
    );
    assert!(out.contains("<|vision_start|><|image_pad|><|vision_end|>"));
}

#[test]
fn request_deserializes_from_json() {
    let req: ChatRequest = serde_json::from_value(json!({
        "messages": [{"role": "user", "content": "hi"}],
        "add_generation_prompt": true,
        "enable_thinking": false
    }))
    .unwrap();
    let out = fixture_template("qwen3_5").render(&req).unwrap();
    assert_eq!(
        out,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
}

#[test]
fn template_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ChatTemplate>();
}

/// Odd shapes must give Ok or a typed error from every fixture template, never a panic.
#[test]
fn odd_inputs_never_panic() {
    let odd_messages = vec![
        json!({"role": "", "content": ""}),
        json!({"role": "assistant", "tool_calls": [null, 1, "x", [], {}, {"function": null},
            {"function": {"name": null, "arguments": [1, 2]}}, {"name": 5, "arguments": {"a": {"b": [{}]}}}]}),
        json!({"role": "user", "content": [{}, {"type": 5}, {"text": null}]}),
        json!({"role": "tool", "content": [{"type": "text", "text": "x"}]}),
        json!({"role": "assistant", "content": "</think></think><think>", "reasoning_content": ""}),
        json!({"role": "user", "content": "\u{0}\u{1f}\u{feff}\u{10ffff}"}),
        json!({"role": "system", "content": "late"}),
        json!({"role": "assistant", "content": "a", "thinking": "t", "reasoning": 7}),
    ];
    let msgs: Vec<Message> = serde_json::from_value(json!(odd_messages)).unwrap();
    let tools = vec![
        json!(null),
        json!("tool"),
        json!({"function": {"name": "f", "parameters": {"properties": [1]}}}),
        json!({"type": "function", "function": {"name": "g", "description": 3,
            "parameters": {"type": "object", "properties": {"p": {"type": ["a", "b"], "x": {"y": 1.5}}}}}}),
    ];
    for name in ["qwen3_5", "qwen3", "qwen3_coder"] {
        let t = fixture_template(name);
        for n in 0..=msgs.len() {
            for start in 0..n {
                for with_tools in [false, true] {
                    let mut req = ChatRequest::new(msgs[start..n].to_vec());
                    req.add_generation_prompt = n % 2 == 0;
                    req.enable_thinking = [None, Some(true), Some(false)][n % 3];
                    if with_tools {
                        req.tools = Some(tools.clone());
                    }
                    let _ = t.render(&req);
                }
            }
        }
    }
}
