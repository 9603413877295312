//! llama.cpp's quantization mixes: which encoding each tensor of a model gets
//! when a file is written as `Q4_K_M`, `Q5_K_S`, `Q6_K`, … — the choices
//! `llama-quantize` makes, so that a file rill writes is the file a
//! llama.cpp user expects of that name (same sizes, same per-tensor types).
//!
//! Written from llama.cpp's rules (`src/llama-quant.cpp`, 0c1e570) for the
//! file types rill writes:
//! - only tensors of two or more dimensions whose name ends in `weight` are
//!   quantized, and not the norms, the expert routers (`ffn_gate_inp`) or the
//!   GDN conv (`ssm_conv1d`);
//! - the output matrix (and the embedding when the output is tied to it)
//!   gets Q6_K, unless the file type is Q8_0 or its rows are not whole blocks
//!   (then Q8_0);
//! - the "value-like" attention matrices (`attn_v`, the GDN `attn_qkv`,
//!   `attn_kv_b`), counted in file order, and every `ffn_down*` of a layer get
//!   Q6_K in Q4_K_M / Q5_K_M on the layers `use_more_bits` picks (the first
//!   and last eighth and every third in between); Q4_K_S gives the first four
//!   value-like matrices and the first eighth of the `ffn_down`s Q5_K;
//! - IQ4_NL / IQ4_XS: the value-like matrices Q5_K where a KV head serves 4
//!   or more query heads, the first eighth of the `ffn_down`s Q5_K;
//! - models of exactly 8 experts: `attn_v` and `attn_k` Q8_0, `attn_output`
//!   Q5_K in Q4_K_S / Q4_K_M / IQ4_NL / IQ4_XS;
//! - a type whose block does not divide the row length falls back
//!   (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, IQ4_XS → IQ4_NL, then F16).
//!
//! Tensors are visited in llama.cpp's order — by layer number, then by name
//! — since the value-like counter depends on it.

use rill_dtype::DType;

/// A GGUF file type (`general.file_type`, llama.cpp's `LLAMA_FTYPE_MOSTLY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q4KS,
    Q4KM,
    Q5KS,
    Q5KM,
    Q6K,
    IQ4NL,
    IQ4XS,
}

impl FileType {
    /// Every file type, in llama-quantize's listing order.
    pub const ALL: [FileType; 15] = [
        FileType::F32,
        FileType::F16,
        FileType::BF16,
        FileType::Q8_0,
        FileType::Q4_0,
        FileType::Q4_1,
        FileType::Q5_0,
        FileType::Q5_1,
        FileType::Q4KS,
        FileType::Q4KM,
        FileType::Q5KS,
        FileType::Q5KM,
        FileType::Q6K,
        FileType::IQ4NL,
        FileType::IQ4XS,
    ];

    /// The value of `general.file_type`.
    pub fn id(self) -> u32 {
        match self {
            FileType::F32 => 0,
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q4_1 => 3,
            FileType::Q8_0 => 7,
            FileType::Q5_0 => 8,
            FileType::Q5_1 => 9,
            FileType::Q4KS => 14,
            FileType::Q4KM => 15,
            FileType::Q5KS => 16,
            FileType::Q5KM => 17,
            FileType::Q6K => 18,
            FileType::IQ4NL => 25,
            FileType::IQ4XS => 30,
            FileType::BF16 => 32,
        }
    }

    /// llama-quantize's name for it, lower case (`q4_k_m`).
    pub fn name(self) -> &'static str {
        match self {
            FileType::F32 => "f32",
            FileType::F16 => "f16",
            FileType::BF16 => "bf16",
            FileType::Q8_0 => "q8_0",
            FileType::Q4_0 => "q4_0",
            FileType::Q4_1 => "q4_1",
            FileType::Q5_0 => "q5_0",
            FileType::Q5_1 => "q5_1",
            FileType::Q4KS => "q4_k_s",
            FileType::Q4KM => "q4_k_m",
            FileType::Q5KS => "q5_k_s",
            FileType::Q5KM => "q5_k_m",
            FileType::Q6K => "q6_k",
            FileType::IQ4NL => "iq4_nl",
            FileType::IQ4XS => "iq4_xs",
        }
    }

    /// The file type named `name` (any case, as llama-quantize takes it).
    pub fn parse(name: &str) -> Option<FileType> {
        let lower = name.to_ascii_lowercase();
        FileType::ALL.into_iter().find(|t| t.name() == lower)
    }

    /// A type llama.cpp's converter writes itself (`--outtype`), rather
    /// than one llama-quantize makes of the converter's file.
    pub fn is_converter_type(self) -> bool {
        matches!(
            self,
            FileType::F32 | FileType::F16 | FileType::BF16 | FileType::Q8_0
        )
    }

    /// The encoding most tensors get.
    pub fn base(self) -> DType {
        match self {
            FileType::F32 => DType::F32,
            FileType::F16 => DType::F16,
            FileType::BF16 => DType::BF16,
            FileType::Q8_0 => DType::Q8_0,
            FileType::Q4_0 => DType::Q4_0,
            FileType::Q4_1 => DType::Q4_1,
            FileType::Q5_0 => DType::Q5_0,
            FileType::Q5_1 => DType::Q5_1,
            FileType::Q4KS | FileType::Q4KM => DType::Q4K,
            FileType::Q5KS | FileType::Q5KM => DType::Q5K,
            FileType::Q6K => DType::Q6K,
            FileType::IQ4NL => DType::IQ4NL,
            FileType::IQ4XS => DType::IQ4XS,
        }
    }

    fn is_quantized(self) -> bool {
        !matches!(self, FileType::F32 | FileType::F16 | FileType::BF16)
    }
}

/// What the mix needs to know of the model.
#[derive(Clone, Copy, Debug)]
pub struct MixModel {
    /// `{arch}.block_count`: the layers, the MTP block's included.
    pub n_layer: usize,
    /// `{arch}.expert_count` (0 for a dense model).
    pub n_expert: usize,
    /// Query heads per KV head of layer 0 (0 when it has no KV heads).
    pub n_gqa: usize,
}

/// One tensor to place: its GGUF name and shape (ggml order, row length first).
#[derive(Clone, Copy, Debug)]
struct MixTensor<'a> {
    name: &'a str,
    shape: &'a [u64],
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQkvLike,
    AttnK,
    AttnOutput,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        Category::TokenEmbd
    } else if ["attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"]
        .iter()
        .any(|k| name.contains(k))
    {
        Category::AttnQkvLike
    } else if name.contains("attn_k.weight") {
        Category::AttnK
    } else if name.contains("attn_output.weight") {
        Category::AttnOutput
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// ggml's dimension count: trailing dimensions of 1 do not count (nor are
/// they written in the files llama.cpp makes).
pub fn n_dims(shape: &[u64]) -> usize {
    shape.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// Whether llama-quantize quantizes a tensor of this name and shape.
pub fn quantizable(name: &str, shape: &[u64]) -> bool {
    n_dims(shape) >= 2
        && name.ends_with("weight")
        && ![
            "_norm.weight",
            "ffn_gate_inp.weight",
            "ssm_conv1d",
            "shortconv.conv.weight",
            "altup",
            "laurel",
            "per_layer_model_proj",
            "attn_rel_b.weight",
        ]
        .iter()
        .any(|k| name.contains(k))
}

/// The layer number of `blk.N.…`, if the name has one.
fn layer_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("blk.")?;
    rest[..rest.find('.')?].parse().ok()
}

fn use_more_bits(i: usize, n: usize) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8).rem_euclid(3) == 2
}

/// The indices of `names` in llama.cpp's order: tensors outside the layers
/// first, then by layer number, each group by name. llama-quantize writes
/// its files in this order.
pub fn file_order(names: &[&str]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| (layer_of(names[i]).map_or(-1, |l| l as i64), names[i]));
    order
}

/// The encoding of each tensor (its GGUF name and shape, ggml order) in a
/// file of type `ft`: `None` for a tensor that stays as it is (not
/// quantizable), else the type to write.
pub fn plan<'a>(
    ft: FileType,
    model: MixModel,
    tensors: impl IntoIterator<Item = (&'a str, &'a [u64])>,
) -> Vec<Option<DType>> {
    let tensors: Vec<MixTensor> = tensors
        .into_iter()
        .map(|(name, shape)| MixTensor { name, shape })
        .collect();
    let names: Vec<&str> = tensors.iter().map(|t| t.name).collect();
    let tied = !tensors.iter().any(|t| t.name == "output.weight");
    let n_value_like = tensors
        .iter()
        .filter(|t| category(t.name) == Category::AttnQkvLike)
        .count();
    let mut state = Counters {
        value_like: 0,
        ffn_down: 0,
    };
    let mut out = vec![None; tensors.len()];
    for i in file_order(&names) {
        let t = tensors[i];
        if !quantizable(t.name, t.shape) {
            continue;
        }
        let mut ty = ft.base();
        if ft.is_quantized() {
            ty = mixed(ft, model, t, tied, n_value_like, &mut state);
            ty = fallback(ty, t.shape[0]);
        }
        out[i] = Some(ty);
    }
    out
}

struct Counters {
    value_like: usize,
    ffn_down: usize,
}

/// llama.cpp's per-tensor choice for the file types rill writes.
fn mixed(
    ft: FileType,
    model: MixModel,
    t: MixTensor,
    tied: bool,
    n_value_like: usize,
    c: &mut Counters,
) -> DType {
    use FileType::*;
    let base = ft.base();
    let eight_experts = model.n_expert == 8;
    match category(t.name) {
        Category::Output => output_type(base, t.shape[0]),
        Category::TokenEmbd if tied => output_type(base, t.shape[0]),
        Category::TokenEmbd => base,
        Category::AttnQkvLike => {
            let i = c.value_like;
            c.value_like += 1;
            if eight_experts {
                DType::Q8_0
            } else if matches!(ft, Q4KM | Q5KM) && use_more_bits(i, n_value_like) {
                DType::Q6K
            } else if (ft == Q4KS && i < 4) || (matches!(ft, IQ4NL | IQ4XS) && model.n_gqa >= 4) {
                DType::Q5K
            } else {
                base
            }
        }
        Category::AttnK if eight_experts => DType::Q8_0,
        Category::FfnDown => {
            // with experts, the layer comes from the name; without, from
            // the count of ffn_down matrices seen so far
            let i = match (model.n_expert > 1, layer_of(t.name)) {
                (true, Some(l)) => l,
                _ => c.ffn_down,
            };
            c.ffn_down += 1;
            let n = model.n_layer;
            match ft {
                Q4KM | Q5KM if use_more_bits(i, n) => DType::Q6K,
                Q4KS | IQ4NL | IQ4XS if i < n / 8 => DType::Q5K,
                _ => base,
            }
        }
        Category::AttnOutput if eight_experts && matches!(ft, Q4KS | Q4KM | IQ4NL | IQ4XS) => {
            DType::Q5K
        }
        _ => base,
    }
}

/// The output matrix: Q6_K unless the file is Q8_0, or Q8_0 when its rows
/// are not whole blocks of the file's type.
fn output_type(base: DType, row: u64) -> DType {
    if !row.is_multiple_of(base.block_len() as u64) || base == DType::Q8_0 {
        DType::Q8_0
    } else {
        DType::Q6K
    }
}

/// A type whose block does not divide the row length: llama.cpp's fallback.
fn fallback(ty: DType, row: u64) -> DType {
    let fits = |t: DType| row.is_multiple_of(t.block_len() as u64);
    if fits(ty) {
        return ty;
    }
    let next = match ty {
        DType::Q4K => DType::Q5_0,
        DType::Q5K => DType::Q5_1,
        DType::Q6K => DType::Q8_0,
        DType::IQ4XS => DType::IQ4NL,
        _ => DType::F16,
    };
    if fits(next) {
        next
    } else {
        DType::F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_tensors(n_layer: usize) -> Vec<(String, Vec<u64>)> {
        let mut v = vec![
            ("token_embd.weight".to_string(), vec![256, 1000]),
            ("output.weight".to_string(), vec![256, 1000]),
            ("output_norm.weight".to_string(), vec![256]),
        ];
        for l in 0..n_layer {
            let p = |s: &str| format!("blk.{l}.{s}");
            if l % 4 == 3 {
                v.push((p("attn_v.weight"), vec![256, 128]));
                v.push((p("attn_k.weight"), vec![256, 128]));
                v.push((p("attn_output.weight"), vec![256, 256]));
            } else {
                v.push((p("attn_qkv.weight"), vec![256, 512]));
                v.push((p("ssm_conv1d.weight"), vec![4, 512]));
            }
            v.push((p("ffn_down_exps.weight"), vec![512, 256, 16]));
            v.push((p("ffn_down_shexp.weight"), vec![256, 256]));
            v.push((p("ffn_gate_inp.weight"), vec![256, 16]));
            v.push((p("ffn_gate_inp_shexp.weight"), vec![256, 1]));
        }
        v
    }

    fn types(ft: FileType, n_layer: usize, n_expert: usize) -> Vec<(String, Option<DType>)> {
        let owned = model_tensors(n_layer);
        let p = plan(
            ft,
            MixModel {
                n_layer,
                n_expert,
                n_gqa: 8,
            },
            owned.iter().map(|(n, s)| (n.as_str(), s.as_slice())),
        );
        owned.into_iter().map(|(n, _)| n).zip(p).collect()
    }

    fn type_of(v: &[(String, Option<DType>)], name: &str) -> Option<DType> {
        v.iter().find(|(n, _)| n == name).unwrap().1
    }

    #[test]
    fn q4_k_m_gives_more_bits_where_llama_cpp_does() {
        let v = types(FileType::Q4KM, 16, 256);
        assert_eq!(type_of(&v, "output.weight"), Some(DType::Q6K));
        assert_eq!(type_of(&v, "token_embd.weight"), Some(DType::Q4K));
        assert_eq!(type_of(&v, "output_norm.weight"), None);
        assert_eq!(type_of(&v, "blk.0.ssm_conv1d.weight"), None);
        assert_eq!(type_of(&v, "blk.0.ffn_gate_inp.weight"), None);
        assert_eq!(type_of(&v, "blk.0.ffn_gate_inp_shexp.weight"), None);
        // use_more_bits over 16: layers 0, 1 (first eighth), 14, 15 (last),
        // and (i - 2) % 3 == 2: 4, 7, 10, 13
        let more: Vec<usize> = (0..16)
            .filter(|l| type_of(&v, &format!("blk.{l}.ffn_down_exps.weight")) == Some(DType::Q6K))
            .collect();
        assert_eq!(more, [0, 1, 4, 7, 10, 13, 14, 15]);
        for l in 0..16 {
            let shexp = type_of(&v, &format!("blk.{l}.ffn_down_shexp.weight"));
            let exps = type_of(&v, &format!("blk.{l}.ffn_down_exps.weight"));
            assert_eq!(shexp, exps, "layer {l}");
            // one value-like matrix per layer: the counter equals the layer
            let name = if l % 4 == 3 { "attn_v" } else { "attn_qkv" };
            let want = if more.contains(&l) {
                DType::Q6K
            } else {
                DType::Q4K
            };
            assert_eq!(type_of(&v, &format!("blk.{l}.{name}.weight")), Some(want));
        }
    }

    #[test]
    fn q4_k_s_q8_0_and_eight_experts() {
        let v = types(FileType::Q4KS, 16, 256);
        assert_eq!(type_of(&v, "blk.3.attn_v.weight"), Some(DType::Q5K));
        assert_eq!(type_of(&v, "blk.4.attn_qkv.weight"), Some(DType::Q4K));
        assert_eq!(type_of(&v, "blk.1.ffn_down_exps.weight"), Some(DType::Q5K));
        assert_eq!(type_of(&v, "blk.2.ffn_down_exps.weight"), Some(DType::Q4K));
        // n_gqa 8 (the helper's): every value-like matrix Q5_K in IQ4_XS
        let v = types(FileType::IQ4XS, 16, 256);
        assert_eq!(type_of(&v, "blk.3.attn_v.weight"), Some(DType::Q5K));
        assert_eq!(type_of(&v, "blk.9.attn_qkv.weight"), Some(DType::Q5K));
        assert_eq!(type_of(&v, "blk.1.ffn_down_exps.weight"), Some(DType::Q5K));
        assert_eq!(
            type_of(&v, "blk.2.ffn_down_exps.weight"),
            Some(DType::IQ4XS)
        );
        assert_eq!(type_of(&v, "output.weight"), Some(DType::Q6K));
        let v = types(FileType::Q8_0, 4, 256);
        assert!(v
            .iter()
            .all(|(_, t)| t.is_none() || *t == Some(DType::Q8_0)));
        let v = types(FileType::Q4KM, 8, 8);
        assert_eq!(type_of(&v, "blk.3.attn_v.weight"), Some(DType::Q8_0));
        assert_eq!(type_of(&v, "blk.3.attn_k.weight"), Some(DType::Q8_0));
        assert_eq!(type_of(&v, "blk.3.attn_output.weight"), Some(DType::Q5K));
        assert_eq!(type_of(&v, "blk.0.attn_qkv.weight"), Some(DType::Q8_0));
    }

    #[test]
    fn rows_that_are_not_whole_blocks_fall_back() {
        assert_eq!(fallback(DType::Q4K, 64), DType::Q5_0);
        assert_eq!(fallback(DType::Q5K, 64), DType::Q5_1);
        assert_eq!(fallback(DType::Q6K, 96), DType::Q8_0);
        assert_eq!(fallback(DType::Q6K, 40), DType::F16);
        assert_eq!(fallback(DType::Q4_0, 40), DType::F16);
        assert_eq!(fallback(DType::IQ4XS, 64), DType::IQ4NL);
        assert_eq!(output_type(DType::Q4K, 64), DType::Q8_0);
        assert_eq!(FileType::parse("Q4_K_M"), Some(FileType::Q4KM));
        assert_eq!(FileType::parse("q5_k_s").map(FileType::id), Some(16));
    }
}
