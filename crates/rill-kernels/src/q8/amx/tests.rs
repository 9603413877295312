use super::*;
use crate::q8::{dot_ref, Q8Acts};

/// Straight to the kernel (when this machine has AMX), so a passing
/// comparison proves this code ran: every shape edge against the
/// scalar reference.
#[test]
fn tiles_give_the_reference_bits() {
    if !usable() {
        eprintln!("no AMX-INT8 here: kernel not tested");
        return;
    }
    let mut next = crate::test_util::xorshift(0x9E37_79B9_7F4A_7C15);
    // One task's buffers, reused (and grown) across every shape below.
    let mut scratch = Scratch::default();
    for (dtype, cols) in [
        (DType::Q4K, 512),
        (DType::Q4K, 1280),
        (DType::Q5K, 256),
        (DType::Q6K, 768),
        (DType::Q8_0, 96),
        (DType::Q8_0, 64),
        (DType::IQ4XS, 768),
        (DType::Q4_0, 96),
        (DType::IQ4NL, 352),
        // Rows so long that a block relays only 32 tokens: 33 and 47
        // tokens span two blocks.
        (DType::Q4K, 33024),
    ] {
        let rows = 19;
        let rb = cols / dtype.block_len() * dtype.block_bytes();
        let mut data: Vec<u8> = (0..rows * rb).map(|_| next() as u8).collect();
        // Finite, moderate f16 scales (exponent bits kept small).
        let bb = dtype.block_bytes();
        let at: &[usize] = match dtype {
            DType::Q8_0 | DType::IQ4XS | DType::Q4_0 | DType::IQ4NL => &[0],
            DType::Q6K => &[208],
            _ => &[0, 2],
        };
        for blk in data.chunks_mut(bb) {
            for &o in at {
                let h = (next() as u16 & 0x83FF) | 0x2800;
                blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
            }
        }
        let w = MatRef::new(dtype, rows, cols, &data);
        let format = ActFormat::for_weights(dtype).unwrap();
        for n in [1, 16, 33, 47] {
            let x: Vec<f32> = (0..n * cols)
                .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                .collect();
            let mut acts = Q8Acts::default();
            acts.quantize(format, &x, n, cols);
            for (r0, r1) in [(0, rows), (3, 4), (5, 19)] {
                let mut out = vec![f32::NAN; n * rows];
                let sh = SharedMut::new(&mut out);
                // SAFETY: AMX is usable; `out` holds n·rows values.
                assert!(unsafe { rows_fn(w, (&acts).into(), r0, r1, sh, &mut scratch) });
                for t in 0..n {
                    for r in 0..rows {
                        let got = out[t * rows + r];
                        if (r0..r1).contains(&r) {
                            let want = dot_ref(dtype, w.row(r), acts.row(t));
                            assert_eq!(got.to_bits(), want.to_bits(), "{dtype} n {n} t {t} r {r}");
                        } else {
                            assert!(got.is_nan(), "{dtype}: row {r} outside {r0}..{r1} written");
                        }
                    }
                }
            }
            // Rows picked out of order, some twice (a MoE expert's tokens
            // out of a step's input): each output is its row's.
            let pick: Vec<usize> = (0..n + 5).map(|i| (i * 7 + 3) % n).collect();
            let m = pick.len();
            let mut out = vec![f32::NAN; m * rows];
            let sh = SharedMut::new(&mut out);
            // SAFETY: as above; `out` holds m·rows values.
            assert!(unsafe { rows_fn(w, Q8Rows::picked(&acts, &pick), 0, rows, sh, &mut scratch) });
            for (t, &p) in pick.iter().enumerate() {
                for r in 0..rows {
                    let want = dot_ref(dtype, w.row(r), acts.row(p));
                    let got = out[t * rows + r];
                    assert_eq!(got.to_bits(), want.to_bits(), "{dtype} picked t {t} r {r}");
                }
            }
        }
    }
}

use super::rows as rows_fn;

/// The weights' decode alone, L1/L2-resident, best of 15 runs: ns per
/// super-block row. `cargo test --release -p rill-kernels decode_speed --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn decode_speed() {
    if !usable() {
        return;
    }
    for (dtype, kind) in [(DType::Q4K, Kind::Q4), (DType::Q6K, Kind::Q6)] {
        let cols = 2048;
        let rb = cols / dtype.block_len() * dtype.block_bytes();
        let data: Vec<u8> = (0..16 * rb)
            .map(|i| ((i * 2_654_435_761usize) >> 13) as u8)
            .collect();
        let w = MatRef::new(dtype, 16, cols, &data);
        let g = Geo {
            kind,
            cols,
            chunks: cols / 64,
            blocks: cols / 256,
            pairs: 4,
        };
        let mut s = Scratch::default();
        grow(&mut s.wa, g.chunks * 32, Line([0; 64]));
        grow(&mut s.wd, g.blocks * 16, 0.0);
        grow(&mut s.wm, g.blocks * 16, 0.0);
        grow(&mut s.wp, g.blocks * 4 * 16, 0);
        let b = Bufs {
            bt: std::ptr::null_mut(),
            xd: std::ptr::null_mut(),
            xs: std::ptr::null_mut(),
            wa: s.wa.as_mut_ptr().cast(),
            wd: s.wd.as_mut_ptr(),
            wm: s.wm.as_mut_ptr(),
            wp: s.wp.as_mut_ptr(),
            c: std::ptr::null_mut(),
            p: std::ptr::null_mut(),
        };
        // Super-blocks per call, as `kernel::DECODE_GROUP`.
        const GRP: usize = 2;
        let reps = 2000;
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = std::time::Instant::now();
            for _ in 0..reps {
                for sb in (0..g.blocks).step_by(GRP) {
                    // SAFETY: the buffers are sized for `g`, 16 rows.
                    unsafe { layout::decode(g, w, 0, 16, sb..sb + GRP, b) };
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let per = best * 1e9 / (reps * 16 * g.blocks) as f64;
        eprintln!("{dtype}: {per:.2} ns per super-block row");
    }
}
