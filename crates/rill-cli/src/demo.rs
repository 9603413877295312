//! The demo model inside the binary: what `rill run`, `rill chat` and
//! `rill serve` run when no `-m` is given, from any folder, with no file
//! lookup. It is the small `qwen35moe` trained on this machine by
//! `scripts/demo/` (Python's documentation and generated chats, with a
//! trained MTP head); see `scripts/demo/README.md`.

use rill_load::ModelSource;

/// Bytes aligned like a mapping's pages, so the kernels' wide loads of the
/// tensors (read in place) do not split cache lines.
#[repr(C, align(64))]
struct Aligned<B: ?Sized>(B);

static DEMO: &Aligned<[u8]> = &Aligned(*include_bytes!("../../../assets/demo/rill-demo.gguf"));

/// The name the demo model goes by (the server's model id).
pub const NAME: &str = "rill-demo";

pub fn source() -> ModelSource {
    ModelSource::Static {
        label: NAME,
        bytes: &DEMO.0,
    }
}

/// What a user should know when the demo runs.
pub fn notice() -> &'static str {
    "no -m given: running rill's embedded demo model (a tiny qwen35moe trained for this repo on \
     Python's documentation and generated chats; it writes text, not answers you can trust). \
     Pass -m MODEL.gguf to run a real model."
}
