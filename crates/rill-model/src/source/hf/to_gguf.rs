//! A Hugging Face folder as the GGUF llama.cpp's `convert_hf_to_gguf.py`
//! writes from it (qwen35moe / qwen35 / qwen3next / qwen4exp): the architecture's
//! metadata and every tensor, named, shaped and laid out as the converter
//! does, its values decoded to f32 (`rill convert` encodes them).
//!
//! On top of the load-time transforms the source already applies to small
//! vectors (`1 + w` norms, `−exp(A_log)`), the converter
//! (`scripts/fixtures/gguf_inverse.py` lists it, and inverts it):
//! - Qwen3.5: reorders the GDN value heads from HF's grouped order (value
//!   head `g` belongs to key head `g / r`) to the tiled order (position
//!   `p` holds key head `p % nk`): the v rows of `attn_qkv` and of the conv,
//!   the rows of `attn_gate`, `ssm_beta`, `ssm_alpha`, `ssm_a`, `ssm_dt`,
//!   and the columns of `ssm_out`;
//! - Qwen3-Next: splits the per-key-head `in_proj_qkvz` (`[q, k, r·v, r·z]`)
//!   into `attn_qkv = [all q, all k, all v]` and `attn_gate = [all z]`;
//! - splits fused experts `gate_up_proj` into `ffn_gate_exps` and
//!   `ffn_up_exps`, and stacks per-expert tensors;
//! - qwen4exp: splits the indexer's fused `index_qk_proj` into `q_proj` and
//!   `k_proj`, and lays the PLE table's shards end to end as one
//!   `per_layer_token_embd` (the source binds them as a stack of equal
//!   shards: the same values in the same order).
//!
//! NVFP4 tensors of a checkpoint it keeps NVFP4 ([`HfSource::gguf_nvfp4`]):
//! GGUF NVFP4 blocks of the same codes and group scales, laid out by the
//! same transforms, and the global scales as a `.scale` tensor.

use super::{HfSource, Slot};
use crate::config::{Arch, HeadOrder, LayerKind};
use crate::error::ModelError;
use crate::source::{Scales, TensorRef, WeightSource};
use rill_dtype::DType;
use rill_gguf::MetaValue;
use rill_kernels::{Isa, MatRef};
use serde_json::Value;

/// One tensor of the GGUF.
#[derive(Clone, Debug)]
pub struct GgufTensor {
    pub name: String,
    /// ggml order.
    pub shape: Vec<u64>,
    /// The converter keeps it F32 whatever the file type (1-D tensors,
    /// norms, the conv, the routers).
    pub keep_f32: bool,
    part: Part,
}

/// Which part of its source tensor an output is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    Whole,
    /// Of fused `gate_up`: the gate rows (first half of each expert) or up.
    Gate,
    Up,
    /// Of Qwen3-Next's `ssm_in`: `[q, k, v]` or `z`.
    Qkv,
    Z,
    /// Of qwen4exp's indexer `qk_proj`: the query rows or the key rows.
    IndexQ,
    IndexK,
}

/// The values of the source canonical tensor this output comes from.
fn source_name(t: &GgufTensor) -> String {
    let blk = t.name.rsplit_once('.').map_or("", |x| x.0);
    let blk = blk.rsplit_once('.').map_or("", |x| x.0);
    match t.part {
        Part::Whole => t.name.clone(),
        Part::Gate | Part::Up => format!("{blk}.ffn_gate_up_exps.weight"),
        Part::Qkv | Part::Z => format!("{blk}.ssm_in.weight"),
        Part::IndexQ | Part::IndexK => format!("{blk}.qk_proj.weight"),
    }
}

fn keep_f32(name: &str, n_dims: usize) -> bool {
    n_dims <= 1
        || name.ends_with("_norm.weight")
        || name.ends_with("ssm_conv1d.weight")
        || name.ends_with("ffn_gate_inp.weight")
        || name.ends_with("ffn_gate_inp_shexp.weight")
        || !name.ends_with(".weight")
}

fn inconsistent(why: String) -> ModelError {
    ModelError::Inconsistent(why)
}

impl HfSource {
    fn arch_for_gguf(&self) -> Result<Arch, ModelError> {
        match self.config.model.arch {
            a @ (Arch::Qwen35Moe | Arch::Qwen35 | Arch::Qwen3Next | Arch::Qwen4Exp) => Ok(a),
        }
    }

    /// Every tensor of the GGUF, in the order written (by name).
    pub fn gguf_tensors(&self) -> Result<Vec<GgufTensor>, ModelError> {
        let arch = self.arch_for_gguf()?;
        let c = &self.config.model;
        let mut names: Vec<&String> = self.slots.keys().collect();
        names.sort();
        let mut out = Vec::new();
        let mut push = |name: String, shape: Vec<u64>, part| {
            out.push(GgufTensor {
                keep_f32: keep_f32(&name, shape.len()),
                name,
                shape,
                part,
            })
        };
        for name in names {
            let shape = match &self.slots[name] {
                Slot::Whole(e) => e.shape.clone(),
                Slot::Experts(list) => {
                    let first = list
                        .first()
                        .and_then(Option::as_ref)
                        .ok_or_else(|| ModelError::MissingTensor(format!("{name} (expert 0)")))?;
                    let mut s = first.shape.clone();
                    s.push(list.len() as u64);
                    s
                }
            };
            let blk = name.trim_end_matches(".weight");
            if let Some(blk) = blk.strip_suffix(".ffn_gate_up_exps") {
                let [h, two_i, e] = shape[..] else {
                    return Err(inconsistent(format!("{name} of shape {shape:?}")));
                };
                push(
                    format!("{blk}.ffn_gate_exps.weight"),
                    vec![h, two_i / 2, e],
                    Part::Gate,
                );
                push(
                    format!("{blk}.ffn_up_exps.weight"),
                    vec![h, two_i / 2, e],
                    Part::Up,
                );
            } else if let (Some(blk), Arch::Qwen3Next) = (blk.strip_suffix(".ssm_in"), arch) {
                let h = shape[0];
                let (kd, vd) = (c.ssm_key_dim() as u64, c.ssm_value_dim() as u64);
                push(
                    format!("{blk}.attn_qkv.weight"),
                    vec![h, 2 * kd + vd],
                    Part::Qkv,
                );
                push(format!("{blk}.attn_gate.weight"), vec![h, vd], Part::Z);
            } else if let Some(blk) = blk.strip_suffix(".qk_proj") {
                // `blk` ends in `.indexer`
                let ix = (c.qwen4exp.as_ref())
                    .map(|q| &q.indexer)
                    .ok_or_else(|| inconsistent(format!("{name} outside qwen4exp")))?;
                let (h, n_q) = (shape[0], (ix.n_head * ix.head_dim) as u64);
                push(format!("{blk}.q_proj.weight"), vec![h, n_q], Part::IndexQ);
                let n_k = shape[1].checked_sub(n_q).ok_or_else(|| {
                    inconsistent(format!(
                        "{name} of shape {shape:?}: fewer rows than the queries'"
                    ))
                })?;
                push(format!("{blk}.k_proj.weight"), vec![h, n_k], Part::IndexK);
            } else if name == "per_layer_token_embd.weight" && shape.len() == 3 {
                // the shards, end to end
                push(
                    name.clone(),
                    vec![shape[0], shape[1] * shape[2]],
                    Part::Whole,
                );
            } else {
                push(name.clone(), shape, Part::Whole);
            }
        }
        Ok(out)
    }

    /// The values of `t` (row-major over its ggml shape), laid out as the
    /// converter writes them.
    pub fn gguf_values(&self, t: &GgufTensor) -> Result<Vec<f32>, ModelError> {
        let src = source_name(t);
        if let Some(Slot::Whole(e)) = self.slots.get(&src) {
            if e.shape.len() == 1 {
                let v = self.vector(&src, e.shape[0] as usize)?;
                return self.lay_out(t, v);
            }
        }
        self.laid_out(t, decode)
    }

    /// The source tensors of `t` (one, or one per expert of a stack).
    fn source_parts(&self, src: &str) -> Result<Vec<TensorRef<'_>>, ModelError> {
        match self.slots.get(src) {
            Some(Slot::Whole(e)) => Ok(vec![self.entry_ref(e)]),
            Some(Slot::Experts(_)) => Ok(self.expert_tensors(src)?.unwrap_or_default()),
            None => Err(ModelError::MissingTensor(src.to_string())),
        }
    }

    /// The global scales of `t` (one per source tensor) when llama.cpp's
    /// converter keeps it NVFP4: its sources are NVFP4 (E2M1 codes, E4M3
    /// scales per 16 that are positive and not NaN), its rows whole blocks
    /// of 64, and the converter's transforms move whole groups of 16.
    /// `None`: it is decoded instead.
    pub fn gguf_nvfp4_globals(&self, t: &GgufTensor) -> Result<Option<Vec<f32>>, ModelError> {
        let c = &self.config.model;
        let regrouped = t.name.ends_with("ssm_out.weight")
            && c.value_head_order == HeadOrder::Grouped
            && !c.ssm_head_dim.is_multiple_of(16);
        if t.keep_f32 || t.shape.len() < 2 || !t.shape[0].is_multiple_of(64) || regrouped {
            return Ok(None);
        }
        let mut globals = Vec::new();
        for p in self.source_parts(&source_name(t))? {
            match p.scales {
                Scales::Groups {
                    data,
                    dtype: DType::F8E4M3,
                    group: 16,
                    global,
                } if p.dtype == DType::E2M1 && data.iter().all(|&b| b < 0x7F) => {
                    globals.push(global)
                }
                _ => return Ok(None),
            }
        }
        // A stack from one tensor: the converter's per-expert shape.
        if let ([g], [.., e]) = (&globals[..], &t.shape[..]) {
            if t.shape.len() == 3 {
                globals = vec![*g; *e as usize];
            }
        }
        Ok(Some(globals))
    }

    /// `t` as GGUF NVFP4 blocks (see [`Self::gguf_nvfp4_globals`], which
    /// must have said yes): the checkpoint's codes and scale bytes, laid out
    /// by the same transforms as [`Self::gguf_values`].
    pub fn gguf_nvfp4(&self, t: &GgufTensor) -> Result<Vec<u8>, ModelError> {
        // Codes and scale bytes carried as f32 (small integers: exact)
        // through the transforms, which only move values.
        let codes = self.laid_out(t, |r| {
            Ok(r.data
                .iter()
                .flat_map(|&b| [(b & 0x0F) as f32, (b >> 4) as f32])
                .collect())
        })?;
        let scales = self.laid_out(t, |r| match r.scales {
            Scales::Groups { data, .. } => Ok(data.iter().flat_map(|&b| [b as f32; 16]).collect()),
            _ => Err(inconsistent(format!("'{}': not NVFP4", r.name))),
        })?;
        let mut out = Vec::with_capacity(codes.len() / 64 * 36);
        for (c, s) in codes.chunks_exact(64).zip(scales.chunks_exact(64)) {
            for g in s.chunks_exact(16) {
                if g.iter().any(|&x| x != g[0]) {
                    return Err(inconsistent(format!("'{}': groups of 16 split", t.name)));
                }
                out.push(g[0] as u8);
            }
            for g in c.chunks_exact(16) {
                out.extend((0..8).map(|j| g[j] as u8 | (g[j + 8] as u8) << 4));
            }
        }
        Ok(out)
    }

    /// The values `decode` gives of `t`'s source tensors, laid out as the
    /// converter writes `t`.
    fn laid_out(
        &self,
        t: &GgufTensor,
        decode: impl Fn(&TensorRef) -> Result<Vec<f32>, ModelError>,
    ) -> Result<Vec<f32>, ModelError> {
        let mut v = Vec::new();
        for part in self.source_parts(&source_name(t))? {
            v.extend(decode(&part)?);
        }
        self.lay_out(t, v)
    }

    /// The values `v` of `t`'s source tensor(s), in their order, laid out
    /// as the converter writes `t`.
    fn lay_out(&self, t: &GgufTensor, mut v: Vec<f32>) -> Result<Vec<f32>, ModelError> {
        let arch = self.arch_for_gguf()?;
        let c = &self.config.model;
        let cols = t.shape[0] as usize;
        match t.part {
            Part::Whole => {}
            Part::Gate | Part::Up => {
                // each expert: 2I rows, gate first
                let rows = t.shape[1] as usize;
                let skip = usize::from(t.part == Part::Up) * rows * cols;
                v = v
                    .chunks_exact(2 * rows * cols)
                    .flat_map(|e| e[skip..skip + rows * cols].iter().copied())
                    .collect();
            }
            Part::Qkv | Part::Z => {
                let (nk, dk) = (c.ssm_n_k_heads, c.ssm_head_dim);
                let r = c.ssm_n_v_heads / nk.max(1);
                let (q, vv) = (dk * cols, r * dk * cols);
                let per_head = 2 * q + 2 * vv;
                let heads: Vec<&[f32]> = v.chunks_exact(per_head).collect();
                let part = |lo: usize, n: usize| {
                    heads
                        .iter()
                        .flat_map(move |h| h[lo..lo + n].iter().copied())
                };
                v = match t.part {
                    Part::Qkv => part(0, q)
                        .chain(part(q, q))
                        .chain(part(2 * q, vv))
                        .collect(),
                    _ => part(2 * q + vv, vv).collect(),
                };
            }
            Part::IndexQ => v.truncate(t.shape[1] as usize * cols),
            Part::IndexK => {
                let k_values = t.shape[1] as usize * cols;
                v.drain(..v.len().saturating_sub(k_values));
            }
        }
        if c.value_head_order == HeadOrder::Grouped && arch.value_head_order() == HeadOrder::Tiled {
            tile_value_heads(&t.name, &mut v, cols, c)?;
        }
        Ok(v)
    }

    /// The architecture's metadata as the converter writes it (no
    /// `general.file_type`, tokenizer or chat template: the caller's).
    pub fn gguf_metadata(&self) -> Result<Vec<(String, MetaValue)>, ModelError> {
        let arch = self.arch_for_gguf()?;
        let c = &self.config.model;
        let a = arch.name();
        let raw = self.raw_text_config()?;
        let u = |x: usize| MetaValue::U32(x as u32);
        let mut m: Vec<(String, MetaValue)> = Vec::new();
        let mut kv = |k: &str, v: MetaValue| m.push((format!("{a}.{k}"), v));
        let n_block = c.n_layer + c.n_nextn;
        kv("block_count", u(n_block));
        kv("context_length", u(c.n_ctx_train));
        kv("embedding_length", u(c.n_embd));
        let rows_of = |name: &str| -> Option<usize> {
            match self.slots.get(name)? {
                Slot::Whole(e) => Some(e.shape[0] as usize),
                Slot::Experts(l) => Some(l.first()?.as_ref()?.shape[0] as usize),
            }
        };
        let ffn = (0..c.n_layer).find_map(|l| rows_of(&format!("blk.{l}.ffn_down.weight")));
        if let Some(f) = ffn.or(raw
            .get("intermediate_size")
            .and_then(Value::as_u64)
            .map(|x| x as usize))
        {
            kv("feed_forward_length", u(f));
        }
        kv("attention.head_count", u(c.n_head));
        kv("attention.head_count_kv", u(c.n_head_kv));
        let rope = raw.get("rope_parameters").or(raw.get("rope_scaling"));
        if let Some(s) = rope
            .and_then(|r| r.get("mrope_section"))
            .and_then(Value::as_array)
        {
            let mut sec: Vec<MetaValue> = s
                .iter()
                .map(|x| MetaValue::I32(x.as_i64().unwrap_or(0) as i32))
                .collect();
            sec.resize(4, MetaValue::I32(0));
            kv("rope.dimension_sections", MetaValue::Array(sec));
        }
        kv("rope.freq_base", MetaValue::F32(c.rope_theta));
        kv(
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(c.rms_eps),
        );
        if c.n_expert > 0 {
            kv("expert_count", u(c.n_expert));
            kv("expert_used_count", u(c.n_expert_used));
        }
        kv("attention.key_length", u(c.head_dim));
        kv("attention.value_length", u(c.head_dim));
        let exp_ffn =
            (0..c.n_layer).find_map(|l| rows_of(&format!("blk.{l}.ffn_down_exps.weight")));
        if let Some(f) = exp_ffn {
            kv("expert_feed_forward_length", u(f));
        }
        let sh_ffn =
            (0..c.n_layer).find_map(|l| rows_of(&format!("blk.{l}.ffn_down_shexp.weight")));
        if let Some(f) = sh_ffn {
            kv("expert_shared_feed_forward_length", u(f));
        }
        if c.n_nextn > 0 {
            kv("nextn_predict_layers", u(c.n_nextn));
        }
        kv("ssm.conv_kernel", u(c.conv_kernel));
        kv("ssm.state_size", u(c.ssm_head_dim));
        kv("ssm.group_count", u(c.ssm_n_k_heads));
        kv("ssm.time_step_rank", u(c.ssm_n_v_heads));
        kv("ssm.inner_size", u(c.ssm_value_dim()));
        let recurrent: Vec<MetaValue> = (0..n_block)
            .map(|l| MetaValue::Bool(c.layer_kinds.get(l) == Some(&LayerKind::Recurrent)))
            .collect();
        kv("attention.recurrent_layers", MetaValue::Array(recurrent));
        let interval = raw
            .get("full_attention_interval")
            .and_then(Value::as_u64)
            .unwrap_or(4) as usize;
        kv("full_attention_interval", u(interval));
        kv("rope.dimension_count", u(c.n_rot));
        if let Some(q) = &c.qwen4exp {
            qwen4exp_metadata(q, &raw, &mut kv);
        }
        Ok(m)
    }

    /// `config.json`'s text model object (`text_config` when nested).
    fn raw_text_config(&self) -> Result<Value, ModelError> {
        let path = self.dir.join("config.json");
        let v: Value = serde_json::from_str(&super::read_text(&path)?)
            .map_err(|e| super::file_err(&path, format!("not valid JSON: {e}")))?;
        Ok(v.get("text_config").cloned().unwrap_or(v))
    }
}

/// qwen4exp's keys, in the converter's order: the hyper-connections, the
/// QSA indexer, and (when the model has one) the PLE n-gram memory.
fn qwen4exp_metadata(
    q: &crate::config::Qwen4ExpConfig,
    raw: &Value,
    kv: &mut impl FnMut(&str, MetaValue),
) {
    let u = |x: usize| MetaValue::U32(x as u32);
    let i32s = |v: &mut dyn Iterator<Item = usize>| {
        MetaValue::Array(v.map(|x| MetaValue::I32(x as i32)).collect())
    };
    let u64s = |v: &[u64]| MetaValue::Array(v.iter().map(|&x| MetaValue::U64(x)).collect());
    kv("hyper_connection.count", u(q.streams));
    kv("hyper_connection.low_rank", u(q.hc_rank));
    let ix = &q.indexer;
    kv("attention.indexer.head_count", u(ix.n_head));
    kv("attention.indexer.key_length", u(ix.head_dim));
    kv("attention.indexer.top_k", u(ix.budget));
    kv(
        "attention.compress_ratios",
        i32s(&mut ix.ratios.iter().copied()),
    );
    let Some(p) = &q.ple else { return };
    kv("ple.layers", i32s(&mut std::iter::once(p.layer)));
    kv("ple.ngram_size", u(p.ngram));
    kv("ple.heads_per_ngram", u(p.heads_per_ngram));
    kv("ple.conv_kernel", u(p.conv_kernel));
    kv("ple.eos_token_id", MetaValue::U32(p.eos));
    if let Some(img) = raw.get("image_token_id").and_then(Value::as_u64) {
        kv("ple.image_token_id", MetaValue::U32(img as u32));
    }
    kv("embedding_length_per_layer_input", u(p.row_dim));
    kv("ple.layer_multipliers", u64s(&p.multipliers));
    kv("ple.head_offsets", u64s(&p.offsets));
    kv("ple.head_vocab_sizes", u64s(&p.sizes));
}

/// The whole tensor `t` as f32, its separate scales multiplied in.
fn decode(t: &TensorRef) -> Result<Vec<f32>, ModelError> {
    let cols = t.shape[0] as usize;
    let rows: usize = t.shape[1..].iter().product::<u64>() as usize;
    let m = MatRef {
        dtype: t.dtype,
        rows,
        cols,
        data: t.data,
        scales: t.scales,
    };
    if !rill_kernels::quant::is_supported(t.dtype) {
        return Err(inconsistent(format!(
            "'{}': cannot decode {}",
            t.name,
            t.dtype.name()
        )));
    }
    let mut out = vec![0f32; rows * cols];
    for (r, row) in out.chunks_exact_mut(cols.max(1)).enumerate() {
        m.dequantize_row(Isa::best(), r, row);
    }
    Ok(out)
}

/// Reorder GDN value heads from grouped to tiled order in the tensors that
/// carry them (see the module doc).
fn tile_value_heads(
    name: &str,
    v: &mut [f32],
    cols: usize,
    c: &crate::config::ModelConfig,
) -> Result<(), ModelError> {
    let (nk, nv, dv) = (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim);
    if nk == 0 || nv == nk {
        return Ok(());
    }
    let r = nv / nk;
    // tiled position p holds grouped head (p % nk) * r + p / nk
    let from = |p: usize| (p % nk) * r + p / nk;
    let leaf = name
        .split_once('.')
        .and_then(|(_, x)| x.split_once('.'))
        .map_or(name, |x| x.1);
    let permute_rows = |v: &mut [f32], first_row: usize, rows_per_head: usize| {
        let block = rows_per_head * cols;
        let base = first_row * cols;
        let old = v[base..base + nv * block].to_vec();
        for p in 0..nv {
            let g = from(p);
            v[base + p * block..base + (p + 1) * block]
                .copy_from_slice(&old[g * block..(g + 1) * block]);
        }
    };
    match leaf {
        "attn_qkv.weight" | "ssm_conv1d.weight" => permute_rows(v, 2 * nk * dv, dv),
        "attn_gate.weight" => permute_rows(v, 0, dv),
        "ssm_beta.weight" | "ssm_alpha.weight" => permute_rows(v, 0, 1),
        "ssm_a" | "ssm_dt.bias" => {
            let old = v.to_vec();
            for p in 0..nv {
                v[p] = old[from(p)];
            }
        }
        "ssm_out.weight" => {
            // columns in head blocks of dv
            for row in v.chunks_exact_mut(cols) {
                let old = row.to_vec();
                for p in 0..nv {
                    let g = from(p);
                    row[p * dv..(p + 1) * dv].copy_from_slice(&old[g * dv..(g + 1) * dv]);
                }
            }
        }
        _ => {}
    }
    Ok(())
}
