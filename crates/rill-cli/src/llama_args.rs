//! llama.cpp's command-line spellings, so that a llama-server command line
//! runs as it is: its multi-letter short flags (`-np 4`, `-ctk q8_0`), and
//! the `rill serve` flags that say what rill already does (`--jinja`,
//! `--metrics`, `-fa`) or that do not apply to a CPU engine (`-ngl`), each
//! of the latter named on stderr when it is given.

/// llama.cpp's multi-letter short flags and the long ones clap parses (it
/// has one-letter short flags only).
const SHORT_FLAGS: [(&str, &str); 9] = [
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-np", "--parallel"),
    ("-ngl", "--n-gpu-layers"),
    ("-fa", "--flash-attn"),
    ("-ub", "--ubatch-size"),
    ("-tb", "--threads-batch"),
    ("-cb", "--cont-batching"),
    ("-nr", "--no-repack"),
];

/// `args` with llama.cpp's multi-letter short flags (`-np 4`, `-ctv=q8_0`)
/// spelled long.
pub fn expand_short_flags(args: impl Iterator<Item = String>) -> Vec<String> {
    args.map(|a| {
        for (short, long) in SHORT_FLAGS {
            if a == short {
                return long.to_string();
            }
            if let Some(v) = a.strip_prefix(short).and_then(|r| r.strip_prefix('=')) {
                return format!("{long}={v}");
            }
        }
        a
    })
    .collect()
}

/// llama-server flags `rill serve` takes for drop-in command lines.
#[derive(clap::Args, Clone, Debug, Default)]
#[command(next_help_heading = "llama-server flags (accepted for its command lines)")]
pub struct LlamaServerArgs {
    /// Accepted: rill always renders the model's Jinja chat template.
    #[arg(long, env = "RILL_JINJA")]
    jinja: bool,
    /// Accepted: /metrics is always served.
    #[arg(long, env = "RILL_METRICS")]
    metrics: bool,
    /// Accepted: batching is always continuous (also `-cb`).
    #[arg(long, env = "RILL_CONT_BATCHING")]
    cont_batching: bool,
    /// Accepted: rill's attention already reads the cache in one pass, as
    /// flash attention does (also `-fa`).
    #[arg(long, env = "RILL_FLASH_ATTN", num_args = 0..=1, default_missing_value = "on",
          value_parser = ["on", "off", "auto"])]
    flash_attn: Option<String>,
    /// Ignored: rill runs on the CPU (also `-ngl`, `--gpu-layers`).
    #[arg(long, visible_alias = "gpu-layers", env = "RILL_N_GPU_LAYERS")]
    n_gpu_layers: Option<String>,
    /// Ignored: `-t` threads serve prompts and generation alike (also `-tb`).
    #[arg(long, env = "RILL_THREADS_BATCH", allow_negative_numbers = true)]
    threads_batch: Option<i64>,
    /// Ignored: llama.cpp's logical batch; an engine step is
    /// `--step-tokens` rows (`--ubatch-size`).
    #[arg(short = 'b', long, env = "RILL_BATCH_SIZE")]
    batch_size: Option<usize>,
    /// Ignored: the weights stay memory-mapped, read in place.
    #[arg(long, env = "RILL_NO_MMAP")]
    no_mmap: bool,
    /// Ignored: the weights' pages are not locked.
    #[arg(long, env = "RILL_MLOCK")]
    mlock: bool,
}

impl LlamaServerArgs {
    /// A line per flag given that rill does not act on.
    pub fn ignored(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut note = |flag: &str, why: &str| out.push(format!("{flag} is ignored: {why}"));
        match self.n_gpu_layers.as_deref() {
            None | Some("0") => {}
            Some(_) => note("--n-gpu-layers", "rill runs on the CPU"),
        }
        if self.threads_batch.is_some() {
            note("--threads-batch", "--threads serves prompts and generation");
        }
        if self.batch_size.is_some() {
            note("--batch-size", "an engine step is --step-tokens rows");
        }
        if self.no_mmap {
            note(
                "--no-mmap",
                "the weights are read in place from the mapped file",
            );
        }
        if self.mlock {
            note("--mlock", "the weights' pages are not locked");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_short_flags_become_long_ones() {
        let args = ["rill", "run", "-ctk", "q4_0", "-ctv=q8_0", "-c", "-ctkx"];
        let got = expand_short_flags(args.iter().map(|s| s.to_string()));
        assert_eq!(
            got,
            [
                "rill",
                "run",
                "--cache-type-k",
                "q4_0",
                "--cache-type-v=q8_0",
                "-c",
                "-ctkx"
            ]
        );
    }

    #[test]
    fn llama_servers_short_flags_are_spelled_long() {
        let args = [
            "rill",
            "serve",
            "-np",
            "4",
            "-ctk=q8_0",
            "-ngl",
            "99",
            "-fa",
            "-nr",
            "-n",
            "5",
        ];
        assert_eq!(
            expand_short_flags(args.iter().map(|s| s.to_string())),
            [
                "rill",
                "serve",
                "--parallel",
                "4",
                "--cache-type-k=q8_0",
                "--n-gpu-layers",
                "99",
                "--flash-attn",
                "--no-repack",
                "-n",
                "5"
            ]
        );
    }
}
