//! The layer stack of a hyper-connection model (qwen4exp, DESIGN.md §2.5),
//! top to bottom. As in `forward.rs`, a step runs every sequence's tokens
//! at once and every weight is read once per step; what differs is the
//! residual — `streams` copies of the embedding, `[T × streams·n_embd]` —
//! and what each block reads from it and writes back to it:
//!
//! ```text
//! x = [embed(t); …; embed(t)]
//! per layer:  x += PLE(x, tokens)                (its one PLE layer)
//!             m = mix_attn(x);  x_s += inject_s · mixer(m.input)
//!             m = mix_ffn(x);   x_s += inject_s · moe(m.input)
//! logits = lm_head(mix_out(x))                   (no final norm)
//! ```

use crate::error::ForwardError;
use crate::forward::{emit, BatchItem};
use crate::layers::attention::{self, AttnSeq};
use crate::layers::gdn::{self, GdnSeq};
use crate::layers::hyper::{self, HyperMix};
use crate::layers::ple::PleSeq;
use crate::model::{Mixer, Model};
use crate::scratch::{Buf, Exec};
use crate::state::LayerState;
use crate::StepOutputs;
use std::ops::Range;

impl Model {
    /// [`Model::forward_batch_into`] for a hyper-connection model, once the
    /// items are checked: `spans` are their rows, `n` rows in all.
    pub(crate) fn forward_hyper(
        &self,
        ex: Exec<'_>,
        final_mix: &HyperMix,
        items: &mut [BatchItem],
        spans: &[Range<usize>],
        n: usize,
        out: &mut StepOutputs,
    ) -> Result<(), ForwardError> {
        let c = &self.config;
        let q = c
            .qwen4exp
            .as_ref()
            .expect("a hyper-connection model is qwen4exp");
        let (h, s) = (c.n_embd, q.streams);
        let wide = s * h;

        let mut x = Buf::for_output(ex.ws, n * wide);
        let embd = self.token_embd.view();
        for (t, &id) in items.iter().flat_map(|i| i.tokens).enumerate() {
            let row = &mut x[t * wide..(t + 1) * wide];
            embd.dequantize_row(ex.isa, id as usize, &mut row[..h]);
            for st in 1..s {
                row.copy_within(..h, st * h);
            }
        }

        for (il, layer) in self.layers.iter().enumerate() {
            let mixes = layer
                .hyper
                .as_deref()
                .expect("every layer of a hyper-connection model mixes");
            if let Some(ple) = &layer.ple {
                let seqs = items.iter_mut().zip(spans).map(|(item, span)| PleSeq {
                    rows: span.clone(),
                    tokens: item.tokens,
                    state: item
                        .state
                        .hyper
                        .as_mut()
                        .and_then(|hs| hs.ple.as_mut())
                        .expect("the state of a PLE model has PLE history"),
                });
                ple.forward(ex, &mut x, n, seqs);
            }

            let m = mixes[0].mix(ex, &x, n);
            let mixed = match &layer.mixer {
                Mixer::Attention(w) => {
                    let seqs = items.iter_mut().zip(spans).map(|(item, span)| {
                        let st = &mut *item.state;
                        let (pos, capacity) = (st.pos, st.capacity);
                        let index = st.hyper.as_mut().and_then(|hs| hs.index[il].as_mut());
                        match &mut st.layers[il] {
                            LayerState::Attention { kv } => AttnSeq {
                                rows: span.clone(),
                                pos,
                                capacity,
                                kv,
                                index,
                            },
                            _ => unreachable!("state layout is built from the same layer kinds"),
                        }
                    });
                    attention::forward(w, c, &self.rope, ex, &m.input, n, seqs)
                }
                Mixer::Recurrent(w) => {
                    let seqs = items.iter_mut().zip(spans).map(|(item, span)| {
                        match &mut item.state.layers[il] {
                            LayerState::Recurrent { conv, ssm } => GdnSeq {
                                rows: span.clone(),
                                conv,
                                ssm,
                                ring: None,
                            },
                            _ => unreachable!("state layout is built from the same layer kinds"),
                        }
                    });
                    gdn::forward(w, c, ex, &m.input, n, seqs)
                }
            };
            hyper::inject(ex, &mut x, &mixed, &m.inject, s, h);
            drop(mixed);
            drop(m);

            let m = mixes[1].mix(ex, &x, n);
            let f = layer.ffn.forward(c, ex, &m.input, n);
            hyper::inject(ex, &mut x, &f, &m.inject, s, h);
        }
        for item in items.iter_mut() {
            item.state.pos += item.tokens.len();
        }

        // The final mix takes the final norm's place before the LM head.
        let m = final_mix.mix(ex, &x, n);
        drop(x);
        let head = self.output_matrix().view();
        let outputs = |i: usize| items[i].outputs;
        emit(ex, c, &m.input, spans, outputs, None, head, out);
        Ok(())
    }
}
