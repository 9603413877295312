//! Quantized Hugging Face checkpoints (research/wave2.md §B.3–B.4): which
//! `quantization_config` rill reads, and how a weight's separate scale
//! tensors become the [`Scales`] the kernels multiply in.
//!
//! - FP8 (`quant_method: fp8`): `X.weight` F8_E4M3 `[out, in]` and
//!   `X.weight_scale_inv` `[⌈out/br⌉, ⌈in/bc⌉]` (BF16 / F32), **multiplied**
//!   (the name says inverse; the value is the dequantization scale), tiles
//!   `weight_block_size = [br, bc]` that need not divide the shape.
//! - ModelOpt FP8 tensors: F8_E4M3 with one `X.weight_scale` for the tensor.
//! - NVFP4, ModelOpt: `X.weight` U8 `[out, in/2]` (E2M1 codes, low nibble
//!   first), `X.weight_scale` F8_E4M3 `[out, in/16]`, `X.weight_scale_2`
//!   F32 (multiplied); compressed-tensors: `X.weight_packed`,
//!   `X.weight_scale`, `X.weight_global_scale` (a **reciprocal**: the
//!   multiplier is `1 / weight_global_scale`).
//!   `input_scale` / `input_global_scale` quantize activations (W4A4);
//!   rill keeps its own activation precision and does not use them.

use crate::error::ModelError;
use serde_json::Value;

/// How a folder's weights are quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// F32 / F16 / BF16 only.
    None,
    /// FP8 with `[rows, cols]` block scales.
    Fp8 { block: (usize, usize) },
    /// ModelOpt or compressed-tensors: NVFP4 weights, possibly beside FP8
    /// and BF16 ones.
    NvFp4,
}

/// The scheme of `quantization_config` (from `config.json`, `file`) or of
/// ModelOpt's `hf_quant_config.json` (`modelopt`).
pub fn scheme(
    q: Option<&Value>,
    modelopt: Option<&Value>,
    file: &str,
) -> Result<Scheme, ModelError> {
    let err = |why: String| ModelError::Checkpoint {
        file: file.to_string(),
        why,
    };
    let Some(q) = q else {
        return Ok(if modelopt.is_some() {
            Scheme::NvFp4
        } else {
            Scheme::None
        });
    };
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("?");
    match method {
        "fp8" => {
            if let Some(fmt) = q.get("fmt").and_then(Value::as_str) {
                if fmt != "e4m3" {
                    return Err(err(format!("FP8 `fmt: {fmt}`: rill reads e4m3")));
                }
            }
            let block = match q.get("weight_block_size") {
                None | Some(Value::Null) => (128, 128),
                Some(v) => {
                    let dims: Vec<usize> = v
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_u64)
                                .map(|x| x as usize)
                                .collect()
                        })
                        .unwrap_or_default();
                    match dims[..] {
                        [r, c] if r > 0 && c > 0 => (r, c),
                        _ => {
                            return Err(err(format!(
                                "FP8 `weight_block_size: {v}` is not two positive sizes"
                            )))
                        }
                    }
                }
            };
            Ok(Scheme::Fp8 { block })
        }
        "modelopt" | "compressed-tensors" => Ok(Scheme::NvFp4),
        other => Err(err(format!(
            "quantization_config with quant_method `{other}`: rill reads unquantized (F32 / F16 / \
             BF16), FP8 (`fp8`) and NVFP4 (`modelopt`, `compressed-tensors`) folders"
        ))),
    }
}

/// The suffixes of a weight's companion tensors, after `X.`.
pub const COMPANIONS: [&str; 6] = [
    "weight_scale_inv",
    "weight_scale",
    "weight_scale_2",
    "weight_global_scale",
    "input_scale",
    "input_global_scale",
];

/// `X.weight_scale_inv` → (`X`, `weight_scale_inv`).
pub fn companion_of(name: &str) -> Option<(&str, &'static str)> {
    COMPANIONS.iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?.strip_suffix('.')?;
        Some((base, *suffix))
    })
}

/// Whether a companion is an activation scale (not used by rill).
pub fn is_activation_scale(suffix: &str) -> bool {
    suffix.starts_with("input_")
}
