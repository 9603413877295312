//! Renders every case of `fixtures/template_cases.json` (made by `make_template_cases.py` with
//! transformers + jinja2) and checks the output byte for byte, or that an error case fails with
//! a typed error (`raise_exception` cases with the template's own message).

use std::collections::BTreeMap;
use std::path::PathBuf;

use rill_chat::{ChatRequest, ChatTemplate, TemplateError};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    bos_token: Option<String>,
    eos_token: Option<String>,
    templates: BTreeMap<String, String>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    template: Option<String>,
    template_source: Option<String>,
    request: ChatRequest,
    expected: Option<String>,
    error: Option<PyError>,
}

#[derive(Deserialize)]
struct PyError {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn first_difference(a: &str, b: &str) -> String {
    let pos = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map(|((i, _), _)| i)
        .unwrap_or(a.len().min(b.len()));
    let lo = a.floor_char_boundary(pos.saturating_sub(40));
    let hi_a = a.ceil_char_boundary((pos + 40).min(a.len()));
    let hi_b = b.ceil_char_boundary((pos + 40).min(b.len()));
    format!(
        "first difference at byte {pos}:\n  got:  {:?}\n  want: {:?}",
        &a[lo..hi_a],
        &b[lo.min(b.len())..hi_b]
    )
}

#[test]
fn template_cases_match_transformers() {
    let dir = fixtures_dir();
    let text = std::fs::read_to_string(dir.join("template_cases.json")).unwrap();
    let fixture: Fixture = serde_json::from_str(&text).unwrap();
    let mut compiled = BTreeMap::new();
    for (name, path) in &fixture.templates {
        let src = std::fs::read_to_string(dir.join(path)).unwrap();
        let t = ChatTemplate::new(&src, fixture.bos_token.clone(), fixture.eos_token.clone())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        compiled.insert(name.clone(), t);
    }

    let mut failures = Vec::new();
    let (mut n_ok, mut n_err) = (0, 0);
    for case in &fixture.cases {
        let snippet;
        let template = match (&case.template, &case.template_source) {
            (Some(name), _) => &compiled[name],
            (None, Some(src)) => {
                snippet = match ChatTemplate::new(
                    src,
                    fixture.bos_token.clone(),
                    fixture.eos_token.clone(),
                ) {
                    Ok(t) => t,
                    Err(e) => {
                        failures.push(format!("{}: compile failed: {e}", case.name));
                        continue;
                    }
                };
                &snippet
            }
            (None, None) => panic!("{}: no template", case.name),
        };
        let got = template.render(&case.request);
        match (&case.expected, &case.error, got) {
            (Some(want), _, Ok(got)) => {
                if &got == want {
                    n_ok += 1;
                } else {
                    failures.push(format!(
                        "{}: output differs; {}",
                        case.name,
                        first_difference(&got, want)
                    ));
                }
            }
            (Some(_), _, Err(e)) => failures.push(format!("{}: unexpected error: {e}", case.name)),
            (None, Some(pe), Ok(got)) => failures.push(format!(
                "{}: expected {} ({}) but rendered {got:?}",
                case.name, pe.kind, pe.message
            )),
            (None, Some(pe), Err(e)) => {
                let ok = match &e {
                    // jinja2's TemplateError is what transformers' raise_exception raises.
                    TemplateError::Raised(msg) => pe.kind == "TemplateError" && msg == &pe.message,
                    TemplateError::Render { .. } => pe.kind != "TemplateError",
                    _ => false,
                };
                if ok {
                    n_err += 1;
                } else {
                    failures.push(format!(
                        "{}: error mismatch: got {e:?}, want {} ({})",
                        case.name, pe.kind, pe.message
                    ));
                }
            }
            (None, None, _) => panic!("{}: case has neither expected nor error", case.name),
        }
    }
    eprintln!(
        "{n_ok} outputs identical, {n_err} errors matched, {} failures",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(n_ok + n_err >= 30);
}
