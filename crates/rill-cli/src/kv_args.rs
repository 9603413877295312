//! The KV cache flags every command that runs the model takes, spelled as
//! llama.cpp's (`-ctk/--cache-type-k`, `-ctv/--cache-type-v`).

use rill_kernels::Precision;
use rill_model::kv::{DEFAULT_KV_SINKS, DEFAULT_KV_WINDOW};
use rill_model::{KvConfig, KvType};

#[derive(clap::Args, Clone, Debug)]
pub struct KvArgs {
    /// KV cache type of the attention keys: f32, f16, bf16, q8_0, q5_1 or
    /// q4_0 (also `-ctk`). Default: f16; f32 with `--precision exact`.
    #[arg(long = "cache-type-k", env = "RILL_CACHE_TYPE_K", value_parser = parse_kv_type)]
    pub cache_type_k: Option<KvType>,
    /// KV cache type of the attention values (also `-ctv`); as `--cache-type-k`.
    #[arg(long = "cache-type-v", env = "RILL_CACHE_TYPE_V", value_parser = parse_kv_type)]
    pub cache_type_v: Option<KvType>,
    /// With a 4- or 5-bit cache type (q4_0, q5_1): the first positions
    /// (attention sinks) kept in f16.
    #[arg(long, default_value_t = DEFAULT_KV_SINKS, env = "RILL_KV_SINKS")]
    pub kv_sinks: usize,
    /// With a 4- or 5-bit cache type: each query reads its last N keys and
    /// values in f16 (0 = off).
    #[arg(long, default_value_t = DEFAULT_KV_WINDOW, env = "RILL_KV_WINDOW")]
    pub kv_window: usize,
    /// Store a quantized cache's rows unrotated (by default K, with Q, and
    /// V are Walsh–Hadamard-rotated first, as llama.cpp does).
    #[arg(long, env = "RILL_NO_KV_ROTATION")]
    pub no_kv_rotation: bool,
    /// The RoPE scaling flags ride along: every command with a KV cache runs
    /// the attention they scale.
    #[command(flatten)]
    pub rope: crate::rope_args::RopeArgs,
}

fn parse_kv_type(s: &str) -> Result<KvType, String> {
    s.parse()
}

impl KvArgs {
    /// The KV configuration for a run in `precision`.
    pub fn config(&self, precision: Precision) -> KvConfig {
        KvConfig {
            sinks: self.kv_sinks,
            window: self.kv_window,
            rotate: !self.no_kv_rotation,
            ..KvConfig::choose(precision, self.cache_type_k, self.cache_type_v)
        }
    }

    /// The RoPE flags put into `model`, then [`config`](Self::config),
    /// checked against it; both said on stderr.
    pub fn resolve(
        &self,
        precision: Precision,
        model: &mut rill_model::Model,
    ) -> anyhow::Result<KvConfig> {
        self.rope.apply(model)?;
        let kv = self.config(precision);
        kv.check(&model.config)?;
        eprintln!("rill: KV cache {}", kv.describe());
        Ok(kv)
    }
}
