//! The order of the sampler chain, as llama.cpp lets a user set it
//! (`--samplers`, `--sampler-seq`, a request's `samplers`): the stages by
//! name or by one letter each. A stage left out of the list is not applied.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// One stage of the chain between the logit bias and the draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Repetition, presence and frequency penalties.
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    Typical,
    TopP,
    MinP,
    Xtc,
    /// Temperature (and dynamic temperature); at 0 it keeps the best token.
    Temperature,
}

/// llama.cpp's default order (`common_params_sampling::samplers`).
pub const DEFAULT_ORDER: [Stage; 9] = [
    Stage::Penalties,
    Stage::Dry,
    Stage::TopNSigma,
    Stage::TopK,
    Stage::Typical,
    Stage::TopP,
    Stage::MinP,
    Stage::Xtc,
    Stage::Temperature,
];

const ALL: [Stage; 9] = DEFAULT_ORDER;

/// The longest order taken (a stage may repeat, as llama.cpp lets it).
pub const MAX_STAGES: usize = 32;

impl Stage {
    /// llama.cpp's canonical name (what `generation_settings.samplers` lists).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Penalties => "penalties",
            Stage::Dry => "dry",
            Stage::TopNSigma => "top_n_sigma",
            Stage::TopK => "top_k",
            Stage::Typical => "typ_p",
            Stage::TopP => "top_p",
            Stage::MinP => "min_p",
            Stage::Xtc => "xtc",
            Stage::Temperature => "temperature",
        }
    }

    /// llama.cpp's one-letter name (`--sampler-seq`).
    pub fn letter(self) -> char {
        match self {
            Stage::Penalties => 'e',
            Stage::Dry => 'd',
            Stage::TopNSigma => 's',
            Stage::TopK => 'k',
            Stage::Typical => 'y',
            Stage::TopP => 'p',
            Stage::MinP => 'm',
            Stage::Xtc => 'x',
            Stage::Temperature => 't',
        }
    }

    /// A stage by any name llama.cpp takes: the canonical one, with `-`
    /// for `_` (`top-k`) or without it (`topk`), or `nucleus`, `temp`,
    /// `typ`.
    pub fn from_name(name: &str) -> Option<Stage> {
        let alias = match name {
            "nucleus" => Some(Stage::TopP),
            "temp" => Some(Stage::Temperature),
            "typ" => Some(Stage::Typical),
            _ => None,
        };
        alias.or_else(|| {
            ALL.into_iter().find(|s| {
                let canon = s.name();
                name == canon
                    || name == canon.replace('_', "-")
                    || (canon.contains('_') && name == canon.replace('_', ""))
            })
        })
    }

    fn from_letter(c: char) -> Option<Stage> {
        ALL.into_iter().find(|s| s.letter() == c)
    }
}

/// A requested order as it came: a list of names (`["top_k",
/// "temperature"]`) or a string of letters (`"kt"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "samplers: a list of sampler names or a string of sampler letters"
)]
pub enum SamplerSeq {
    Names(Vec<String>),
    Letters(String),
}

impl SamplerSeq {
    /// The stages, in order. A name or letter rill does not know is an
    /// error naming it (llama.cpp skips it with a warning in its log; a
    /// client would never see that its order was not the one applied).
    pub fn stages(&self) -> Result<Vec<Stage>, ConfigError> {
        let len = match self {
            SamplerSeq::Names(names) => names.len(),
            SamplerSeq::Letters(s) => s.chars().count(),
        };
        // Each stage runs per token (a penalties stage passes over the
        // vocabulary): a list of thousands would be a way to stall a server.
        if len > MAX_STAGES {
            return Err(ConfigError {
                param: "samplers",
                message: format!("samplers lists at most {MAX_STAGES} stages (got {len})"),
            });
        }
        let unknown = |what: String| ConfigError {
            param: "samplers",
            message: format!(
                "unknown sampler {what} in samplers; known: {} (or one letter each: {})",
                ALL.map(Stage::name).join(", "),
                ALL.map(Stage::letter).iter().collect::<String>()
            ),
        };
        match self {
            SamplerSeq::Names(names) => names
                .iter()
                .map(|n| Stage::from_name(n).ok_or_else(|| unknown(format!("{n:?}"))))
                .collect(),
            SamplerSeq::Letters(s) => s
                .chars()
                .map(|c| Stage::from_letter(c).ok_or_else(|| unknown(format!("'{c}'"))))
                .collect(),
        }
    }
}

/// The canonical names of `order` (llama.cpp's default when `None`).
pub fn order_names(order: Option<&[Stage]>) -> Vec<&'static str> {
    order
        .unwrap_or(&DEFAULT_ORDER)
        .iter()
        .map(|s| s.name())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_letters_and_aliases_are_llama_cpps() {
        let names: SamplerSeq = serde_json::from_str(
            r#"["penalties", "dry", "top-n-sigma", "topk", "typ", "nucleus", "min_p", "xtc", "temp"]"#,
        )
        .unwrap();
        assert_eq!(names.stages().unwrap(), DEFAULT_ORDER);
        let letters: SamplerSeq = serde_json::from_str(r#""edskypmxt""#).unwrap();
        assert_eq!(letters.stages().unwrap(), DEFAULT_ORDER);
        assert_eq!(
            SamplerSeq::Letters("tk".into()).stages().unwrap(),
            [Stage::Temperature, Stage::TopK]
        );
        for bad in [
            SamplerSeq::Names(vec!["top_k".into(), "beam".into()]),
            SamplerSeq::Letters("kq".into()),
            // Underscores dropped only where the canonical name has them.
            SamplerSeq::Names(vec!["t-emperature".into()]),
        ] {
            let e = bad.stages().unwrap_err();
            assert_eq!(e.param, "samplers");
            assert!(e.message.contains("unknown sampler"), "{e}");
        }
        let long = SamplerSeq::Letters("k".repeat(MAX_STAGES + 1)).stages();
        assert!(long.unwrap_err().message.contains("at most"));
        assert_eq!(
            SamplerSeq::Letters("k".repeat(MAX_STAGES))
                .stages()
                .unwrap()
                .len(),
            MAX_STAGES
        );
        let e = serde_json::from_str::<SamplerSeq>("7").unwrap_err();
        assert!(e.to_string().contains("a list of sampler names"), "{e}");
        assert_eq!(order_names(None)[3], "top_k");
        assert_eq!(order_names(Some(&[Stage::Typical])), ["typ_p"]);
    }
}
