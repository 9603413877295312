//! Constrained decoding: a grammar compiled into a per-token mask.
//!
//! Structured output (`response_format` JSON schemas, regexes, choices, Lark
//! grammars) is llguidance's job: it compiles a [`GrammarSpec`] against the
//! model's vocabulary (a token trie built once per tokenizer, [`Grammars`])
//! and, token after token, says which tokens may come next. The engine masks
//! the logits with it before sampling and commits each sampled token.
//!
//! Limits on the grammar's size and the work per token are llguidance's
//! (`ParserLimits`): a hostile schema is refused at compile time with a
//! message, not run.

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

mod constraint;
pub mod gbnf;
mod helper;

pub use constraint::Constraint;
use rill_tokenizer::{TokenType, Tokenizer};
use std::sync::Arc;

/// What a constraint asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this schema.
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression (whole output).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A grammar in llguidance's Lark dialect.
    Lark(String),
    /// A grammar in llama.cpp's GBNF (translated to Lark: [`gbnf`]).
    Gbnf(String),
    /// Free text up to `</think>`, then this grammar
    /// ([`GrammarSpec::after_thinking_text`]).
    AfterThinking(Box<GrammarSpec>),
}

impl GrammarSpec {
    /// This grammar after the thinking block the text starts in, for a
    /// vocabulary without a `</think>` token (with one, the engine starts
    /// the grammar after that token instead): free text up to `</think>`,
    /// the template's blank line, then the grammar — so the constraint never
    /// binds the thinking.
    pub fn after_thinking_text(self) -> GrammarSpec {
        match self {
            GrammarSpec::AfterThinking(_) => self,
            other => GrammarSpec::AfterThinking(Box::new(other)),
        }
    }

    /// A grammar given as text: GBNF when it defines rules with `::=`
    /// (llama-server's `grammar`), else llguidance's Lark (also what
    /// llama.cpp passes on after `%llguidance`).
    pub fn grammar_text(text: String) -> GrammarSpec {
        if gbnf::looks_like_gbnf(&text) {
            GrammarSpec::Gbnf(text)
        } else {
            GrammarSpec::Lark(text)
        }
    }
}

/// Why a grammar was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct GrammarError(pub String);

/// The vocabulary as llguidance sees it, and its parser factory: built once
/// per tokenizer (the trie over a 248k vocabulary takes a moment), shared
/// by every constraint.
pub struct Grammars {
    factory: ParserFactory,
    /// The thread that computes each constraint's next mask while the
    /// forward pass runs ([`MaskTiming::Ahead`]); none with
    /// [`MaskTiming::OnDemand`].
    helper: helper::Helper,
}

/// When a constraint's masks are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskTiming {
    /// Each state's mask on a helper thread as soon as the state is
    /// reached, while the next forward pass runs: free where a core is
    /// spare, and then no sampler ever waits for one.
    Ahead,
    /// Only when a sampler needs one (a greedy pick the grammar refuses,
    /// a sampled draw): where every core runs the forward pass, a helper
    /// thread would take its time from the pass, and most greedy picks
    /// are checked by one token's walk without a mask
    /// ([`Constraint::allows`]).
    OnDemand,
}

/// The tokenizer seen from llguidance.
struct Env {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.tok.encode(&String::from_utf8_lossy(s), false)
    }
}

impl Grammars {
    pub fn new(tok: Arc<Tokenizer>, timing: MaskTiming) -> Result<Grammars, GrammarError> {
        let n = tok.vocab_size();
        // Special tokens are marked so that grammar text never matches them.
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let special = matches!(tok.token_type(id), Some(TokenType::Control));
                let piece = tok.token_to_piece(id).unwrap_or(&[]);
                if special {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(piece);
                    w
                } else {
                    piece.to_vec()
                }
            })
            .collect();
        // The grammar's end is the end of the model's turn.
        let end_of_turn = tok.token_to_id("<|im_end|>");
        let eos = end_of_turn
            .or(tok.eos_id())
            .or(tok.eog_ids().first().copied())
            .ok_or_else(|| GrammarError("the vocabulary has no end-of-generation token".into()))?;
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = tok.bos_id();
        info.tok_pad = tok.pad_id();
        info.tok_end_of_turn = end_of_turn;
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(Env { trie, tok });
        let factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &llguidance::earley::SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| GrammarError(format!("cannot build the token trie: {e}")))?;
        // Its errors reach the client (and the log) as ours; it does not
        // write to stderr itself.
        let mut factory = factory;
        factory.quiet();
        Ok(Grammars {
            factory,
            helper: match timing {
                MaskTiming::Ahead => helper::Helper::start(),
                MaskTiming::OnDemand => helper::Helper::none(),
            },
        })
    }

    /// Compile `spec` into a fresh constraint.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint, GrammarError> {
        check_nesting(spec)?;
        let grammar = match spec {
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"})))
            }
            GrammarSpec::JsonSchema(s) => {
                if !s.is_object() && !s.is_boolean() {
                    return Err(GrammarError(
                        "a JSON schema must be an object (or true/false)".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(compact(s.clone()))
            }
            GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
            GrammarSpec::Choice(options) => {
                if options.is_empty() {
                    return Err(GrammarError("a choice needs at least one option".into()));
                }
                let alts: Vec<String> = options
                    .iter()
                    .map(|o| serde_json::Value::String(o.clone()).to_string())
                    .collect();
                TopLevelGrammar::from_lark(format!("start: {}", alts.join(" | ")))
            }
            GrammarSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            GrammarSpec::Gbnf(g) => TopLevelGrammar::from_lark(gbnf::to_lark(g)?),
            GrammarSpec::AfterThinking(inner) => {
                // The grammar on its own first: refused as it would be alone
                // (a schema no text satisfies, say), not left to run on in
                // the free thinking text.
                self.compile(inner)?;
                TopLevelGrammar::from_lark(lark_after_thinking(inner)?)
            }
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError(format!("invalid grammar: {}", describe(&e))))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError(format!("invalid grammar: {}", describe(&e))));
        }
        // A grammar nothing can satisfy (`{"$ref": "#"}`, an empty `anyOf`)
        // compiles, then fails at its first mask: find out now, while the
        // request can still be refused, rather than once it is running.
        let first = matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError(format!("the grammar admits no output: {}", describe(&e))))?;
        if first.is_zero() {
            return Err(GrammarError(
                "the grammar admits no output: no token can start it".into(),
            ));
        }
        Ok(Constraint::new(matcher, self.helper.clone(), first))
    }
}

/// One Lark grammar: free text up to `</think>`, the template's blank line,
/// then `inner` nested in it (`%json`, `%lark`, an inline regex or the
/// choices).
fn lark_after_thinking(inner: &GrammarSpec) -> Result<String, GrammarError> {
    let body = match inner {
        GrammarSpec::JsonObject => {
            format!("%json {}", compact(serde_json::json!({"type": "object"})))
        }
        GrammarSpec::JsonSchema(s) => format!("%json {}", compact(s.clone())),
        GrammarSpec::Regex(r) => format!("/{}/", r.replace('/', "\\/")),
        GrammarSpec::Choice(options) => (options.iter())
            .map(|o| serde_json::Value::String(o.clone()).to_string())
            .collect::<Vec<_>>()
            .join(" | "),
        GrammarSpec::Lark(g) => format!("%lark {{\n{g}\n}}"),
        GrammarSpec::Gbnf(g) => format!("%lark {{\n{}\n}}", gbnf::to_lark(g)?),
        GrammarSpec::AfterThinking(inner) => return lark_after_thinking(inner),
    };
    Ok(format!(
        "start: think lead? body\nthink[suffix=\"</think>\"]: /(?s:.*)/\nlead: \"\\n\" | \"\\n\\n\"\nbody: {body}\n"
    ))
}

/// llguidance's error, without the parser-state dump it appends: its
/// first line, said in words where it is a bare stop reason.
pub(crate) fn describe(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    match first {
        "NoExtensionBias" | "NoExtension" => {
            "nothing can follow here (a schema or grammar no text satisfies)".into()
        }
        "" => "unknown grammar error".into(),
        other => other.chars().take(400).collect(),
    }
}

/// JSON written the way `json.dumps` writes it (`", "`, `": "`, no other
/// whitespace) unless the schema says otherwise in `x-guidance`: free
/// whitespace lets a model pad forever instead of closing the object.
fn compact(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": "
            })
        });
    }
    schema
}

/// Most nesting a grammar may have. The compilers recurse on it: deeper
/// input would exhaust the stack, so it is refused with a message first.
pub const MAX_NESTING: usize = 64;

fn check_nesting(spec: &GrammarSpec) -> Result<(), GrammarError> {
    fn json_depth(v: &serde_json::Value) -> usize {
        // Iterative: the value itself may be deep.
        let mut deepest = 0;
        let mut stack = vec![(v, 1usize)];
        while let Some((v, d)) = stack.pop() {
            deepest = deepest.max(d);
            match v {
                serde_json::Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
                serde_json::Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
                _ => {}
            }
        }
        deepest
    }
    fn bracket_depth(s: &str) -> usize {
        let (mut d, mut deepest) = (0usize, 0usize);
        for c in s.chars() {
            match c {
                '(' | '[' | '{' => {
                    d += 1;
                    deepest = deepest.max(d);
                }
                ')' | ']' | '}' => d = d.saturating_sub(1),
                _ => {}
            }
        }
        deepest
    }
    let depth = match spec {
        // A schema level is an object holding a keyword holding the next.
        GrammarSpec::JsonSchema(v) => json_depth(v) / 2,
        GrammarSpec::Regex(s) | GrammarSpec::Lark(s) | GrammarSpec::Gbnf(s) => bracket_depth(s),
        GrammarSpec::JsonObject | GrammarSpec::Choice(_) => 0,
        GrammarSpec::AfterThinking(inner) => return check_nesting(inner),
    };
    if depth > MAX_NESTING {
        return Err(GrammarError(format!(
            "the grammar nests {depth} levels deep; at most {MAX_NESTING} are allowed"
        )));
    }
    Ok(())
}
