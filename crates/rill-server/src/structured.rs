//! Structured output on the wire: the request fields clients use to ask for
//! a grammar, turned into one [`GrammarSpec`].
//!
//! - OpenAI: `response_format` `{"type": "text" | "json_object" | "json_schema",
//!   "json_schema": {"name", "schema", "strict"}}`;
//! - vLLM: `structured_outputs: {json | regex | choice | grammar}` and the
//!   older `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`;
//! - llama-server: `json_schema` and `grammar`.
//!
//! A grammar (`grammar`, `guided_grammar`, `structured_outputs.grammar`) is
//! llama.cpp's GBNF when it defines rules with `::=` (translated by
//! `rill_grammar::gbnf`), else llguidance's Lark dialect (llama.cpp's
//! `%llguidance` grammars). At most one constraint may be given.

use crate::errors::ApiError;
use rill_engine::GrammarSpec;
use serde::Deserialize;
use serde_json::Value as Json;

/// The constraint fields of a request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConstraintFields {
    pub response_format: Option<Json>,
    pub structured_outputs: Option<Json>,
    pub guided_json: Option<Json>,
    pub guided_regex: Option<String>,
    pub guided_choice: Option<Vec<String>>,
    pub guided_grammar: Option<String>,
    pub json_schema: Option<Json>,
    pub grammar: Option<String>,
}

/// A JSON schema given as an object or as a JSON string holding one.
fn schema(param: &str, v: &Json) -> Result<GrammarSpec, ApiError> {
    let v = match v {
        Json::String(s) => serde_json::from_str(s)
            .map_err(|e| ApiError::bad_param(param, format!("{param} is not valid JSON: {e}")))?,
        other => other.clone(),
    };
    if !v.is_object() && !v.is_boolean() {
        return Err(ApiError::bad_param(
            param,
            format!("{param} must be a JSON schema object"),
        ));
    }
    Ok(GrammarSpec::JsonSchema(v))
}

fn response_format(rf: &Json) -> Result<Option<GrammarSpec>, ApiError> {
    let p = "response_format";
    let kind = rf
        .get("type")
        .and_then(Json::as_str)
        .ok_or_else(|| ApiError::bad_param(p, "response_format needs a \"type\""))?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarSpec::JsonObject)),
        "json_schema" => {
            let js = rf.get("json_schema").ok_or_else(|| {
                ApiError::bad_param(
                    p,
                    "response_format json_schema needs a \"json_schema\" object",
                )
            })?;
            // OpenAI nests the schema under "schema"; some clients send it bare.
            let s = js.get("schema").unwrap_or(js);
            schema("response_format.json_schema.schema", s).map(Some)
        }
        other => Err(ApiError::bad_param(
            p,
            format!("unknown response_format type {other:?} (text, json_object or json_schema)"),
        )),
    }
}

fn structured_outputs(so: &Json) -> Result<Option<GrammarSpec>, ApiError> {
    let p = "structured_outputs";
    let o = so
        .as_object()
        .ok_or_else(|| ApiError::bad_param(p, "structured_outputs must be an object"))?;
    let mut found = Vec::new();
    for (k, v) in o {
        let spec = match k.as_str() {
            "json" => schema("structured_outputs.json", v)?,
            "regex" => GrammarSpec::Regex(string(p, v)?),
            "grammar" => GrammarSpec::grammar_text(string(p, v)?),
            "choice" => GrammarSpec::Choice(serde_json::from_value(v.clone()).map_err(|_| {
                ApiError::bad_param(p, "structured_outputs.choice must be a list of strings")
            })?),
            "json_object" if v == &Json::Bool(true) => GrammarSpec::JsonObject,
            _ => continue,
        };
        found.push(spec);
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(ApiError::bad_param(
            p,
            "give one of json, regex, choice or grammar",
        )),
    }
}

fn string(p: &str, v: &Json) -> Result<String, ApiError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| ApiError::bad_param(p, format!("{p} fields must be strings")))
}

impl ConstraintFields {
    /// The one grammar the request asks for, if any.
    pub fn grammar(&self) -> Result<Option<GrammarSpec>, ApiError> {
        let mut specs: Vec<(&str, GrammarSpec)> = Vec::new();
        if let Some(rf) = &self.response_format {
            if let Some(s) = response_format(rf)? {
                specs.push(("response_format", s));
            }
        }
        if let Some(so) = &self.structured_outputs {
            if let Some(s) = structured_outputs(so)? {
                specs.push(("structured_outputs", s));
            }
        }
        if let Some(j) = &self.guided_json {
            specs.push(("guided_json", schema("guided_json", j)?));
        }
        if let Some(r) = &self.guided_regex {
            specs.push(("guided_regex", GrammarSpec::Regex(r.clone())));
        }
        if let Some(c) = &self.guided_choice {
            specs.push(("guided_choice", GrammarSpec::Choice(c.clone())));
        }
        if let Some(g) = &self.guided_grammar {
            specs.push(("guided_grammar", GrammarSpec::grammar_text(g.clone())));
        }
        if let Some(j) = &self.json_schema {
            specs.push(("json_schema", schema("json_schema", j)?));
        }
        if let Some(g) = &self.grammar {
            specs.push(("grammar", GrammarSpec::grammar_text(g.clone())));
        }
        match specs.len() {
            0 => Ok(None),
            1 => Ok(specs.pop().map(|s| s.1)),
            _ => Err(ApiError::invalid(format!(
                "give one structured-output constraint, not {}",
                specs.iter().map(|s| s.0).collect::<Vec<_>>().join(" and ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Json) -> ConstraintFields {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_dialect_maps_to_one_grammar() {
        let s = json!({"type": "object"});
        let cases = [
            (json!({"response_format": {"type": "text"}}), None),
            (
                json!({"response_format": {"type": "json_object"}}),
                Some(GrammarSpec::JsonObject),
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}}}),
                Some(GrammarSpec::JsonSchema(s.clone())),
            ),
            (
                json!({"guided_json": s.to_string()}),
                Some(GrammarSpec::JsonSchema(s.clone())),
            ),
            (
                json!({"json_schema": s}),
                Some(GrammarSpec::JsonSchema(s.clone())),
            ),
            (
                json!({"guided_regex": "a+"}),
                Some(GrammarSpec::Regex("a+".into())),
            ),
            (
                json!({"guided_choice": ["a", "b"]}),
                Some(GrammarSpec::Choice(vec!["a".into(), "b".into()])),
            ),
            (
                json!({"grammar": "start: \"x\""}),
                Some(GrammarSpec::Lark("start: \"x\"".into())),
            ),
            // llama-server's GBNF
            (
                json!({"grammar": "root ::= \"x\" | [0-9]"}),
                Some(GrammarSpec::Gbnf("root ::= \"x\" | [0-9]".into())),
            ),
            (
                json!({"structured_outputs": {"grammar": "root ::= \"y\""}}),
                Some(GrammarSpec::Gbnf("root ::= \"y\"".into())),
            ),
            (
                json!({"structured_outputs": {"regex": "b"}}),
                Some(GrammarSpec::Regex("b".into())),
            ),
        ];
        for (v, want) in cases {
            assert_eq!(fields(v.clone()).grammar().unwrap(), want, "{v}");
        }
    }

    #[test]
    fn bad_or_several_constraints_are_400s() {
        for v in [
            json!({"response_format": {"type": "xml"}}),
            json!({"response_format": {}}),
            json!({"response_format": {"type": "json_schema"}}),
            json!({"guided_json": "{not json"}),
            json!({"guided_json": 3}),
            json!({"guided_regex": "a", "grammar": "start: \"a\""}),
            json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}),
            json!({"structured_outputs": 5}),
        ] {
            assert!(fields(v.clone()).grammar().is_err(), "{v}");
        }
    }
}
