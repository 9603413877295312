use super::*;

fn cfg(t: f32) -> SamplerConfig {
    SamplerConfig {
        temperature: t,
        ..Default::default()
    }
}

#[test]
fn greedy_takes_argmax_and_lower_id_on_ties() {
    let mut s = Sampler::new(cfg(0.0)).unwrap();
    assert_eq!(s.sample(&[0.1, 2.0, -1.0, 2.0], &[]), 1);
}

#[test]
fn same_seed_same_draws_different_seed_different_draws() {
    let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
    let draw = |seed| {
        let mut s = Sampler::new(SamplerConfig { seed, ..cfg(1.0) }).unwrap();
        (0..64).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

#[test]
fn sampling_follows_the_distribution() {
    // p = softmax([ln 1, ln 3]) = [0.25, 0.75]
    let logits = [0.0f32, 3f32.ln()];
    let mut s = Sampler::new(SamplerConfig {
        seed: 3,
        ..cfg(1.0)
    })
    .unwrap();
    let n = 20000;
    let ones = (0..n).filter(|_| s.sample(&logits, &[]) == 1).count();
    let frac = ones as f64 / n as f64;
    assert!((frac - 0.75).abs() < 0.02, "{frac}");
}

/// Each cut-off keeps just the tokens it should: over many draws only
/// those come out, and every one of them does.
#[test]
fn cutoffs_keep_only_their_tokens() {
    let cases = [
        // top_k 1 is greedy, whatever the temperature.
        (
            SamplerConfig {
                top_k: 1,
                ..cfg(5.0)
            },
            [0.5f32, 0.4, 3.0, 0.2].as_slice(),
            [2].as_slice(),
        ),
        // probabilities ≈ [0.665, 0.245, 0.090]: top_p 0.8 keeps ids 0 and 1 only
        (
            SamplerConfig {
                top_p: 0.8,
                seed: 1,
                ..cfg(1.0)
            },
            &[2.0, 1.0, 0.0],
            &[0, 1],
        ),
        // min_p 0.2 of the best (e^-5 of it) drops id 2.
        (
            SamplerConfig {
                min_p: 0.2,
                seed: 1,
                ..cfg(1.0)
            },
            &[2.0, 1.0, -3.0],
            &[0, 1],
        ),
    ];
    for (config, logits, kept) in cases {
        let mut s = Sampler::new(config).unwrap();
        let mut seen = vec![0; logits.len()];
        for _ in 0..2000 {
            seen[s.sample(logits, &[]) as usize] += 1;
        }
        for (t, &n) in seen.iter().enumerate() {
            let keeps = kept.contains(&(t as u32));
            assert_eq!(n > 0, keeps, "{logits:?}: token {t} drawn {n} times");
        }
    }
}

#[test]
fn penalties_change_the_greedy_choice() {
    let logits = [1.0f32, 0.9];
    let mut rep = Sampler::new(SamplerConfig {
        repetition_penalty: 1.2,
        ..cfg(0.0)
    })
    .unwrap();
    assert_eq!(rep.sample(&logits, &[0]), 1);
    let mut pres = Sampler::new(SamplerConfig {
        presence_penalty: 0.2,
        ..cfg(0.0)
    })
    .unwrap();
    assert_eq!(pres.sample(&logits, &[0]), 1);
    let mut freq = Sampler::new(SamplerConfig {
        frequency_penalty: 0.04,
        ..cfg(0.0)
    })
    .unwrap();
    assert_eq!(
        freq.sample(&logits, &[0]),
        0,
        "one occurrence: 1.0 - 0.04 > 0.9"
    );
    assert_eq!(
        freq.sample(&logits, &[0, 0, 0]),
        1,
        "three: 1.0 - 0.12 < 0.9"
    );
    // negative logits are multiplied, pushing them further down
    let mut neg = Sampler::new(SamplerConfig {
        repetition_penalty: 2.0,
        ..cfg(0.0)
    })
    .unwrap();
    assert_eq!(neg.sample(&[-1.0, -1.5], &[0]), 1);
}

#[test]
fn bad_configs_are_refused() {
    for bad in [
        SamplerConfig {
            temperature: -1.0,
            ..Default::default()
        },
        SamplerConfig {
            top_p: 0.0,
            ..Default::default()
        },
        SamplerConfig {
            min_p: 1.5,
            ..Default::default()
        },
        SamplerConfig {
            temperature: f32::NAN,
            ..Default::default()
        },
        SamplerConfig {
            repetition_penalty: 0.0,
            ..Default::default()
        },
    ] {
        assert!(Sampler::new(bad).is_err());
    }
}

#[test]
fn log_softmax_normalises() {
    let lp = log_softmax(&[1.0, 2.0, 3.0]);
    let s: f32 = lp.iter().map(|v| v.exp()).sum();
    assert!((s - 1.0).abs() < 1e-6);
}

#[test]
fn logprobs_pick_the_top_k_best_first_with_ties_to_the_lower_id() {
    let row = [1.0f32, 3.0, 3.0, -2.0, 0.5];
    let lp = logprobs(&row, 4, 3);
    let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
    assert_eq!(ids, vec![1, 2, 0]);
    let full = log_softmax(&row);
    assert_eq!(lp.chosen, full[4]);
    assert_eq!(lp.top[0].1, full[1]);
    let total: f64 = full.iter().map(|&v| (v as f64).exp()).sum();
    assert!((total - 1.0).abs() < 1e-6);
    assert!(logprobs(&row, 0, 0).top.is_empty());
    assert_eq!(logprobs(&row, 0, 99).top.len(), 5);
}

/// Speculative verification keeps the sampler's distribution: over many
/// draws, the tokens `verify` returns for a fixed draft are distributed as
/// `sample`'s (the exact probabilities), whichever token was drafted — a
/// likely one, an unlikely one, or one outside the candidates.
#[test]
fn verify_preserves_the_distribution() {
    let logits = [1.0f32, 2.5, 0.3, 2.2, -1.0, 1.9, 0.0, 3.0];
    let config = SamplerConfig {
        temperature: 0.8,
        top_k: 6,
        seed: 11,
        ..SamplerConfig::default()
    };
    let mut exact = Sampler::new(config.clone()).unwrap();
    let mut row = logits.to_vec();
    apply_penalties(&exact.config.clone(), &mut row, &[]);
    let probs = exact.distribution(&row);
    let mut want = [0f64; 8];
    for (c, p) in exact.cand.iter().zip(&probs) {
        want[c.0 as usize] = *p;
    }
    let draws = 200_000;
    for draft in [7u32, 2, 4] {
        let mut s = Sampler::new(SamplerConfig {
            seed: 100 + draft as u64,
            ..config.clone()
        })
        .unwrap();
        let mut seen = [0usize; 8];
        for _ in 0..draws {
            seen[s.verify(&logits, &[], draft) as usize] += 1;
        }
        for (t, (&n, &p)) in seen.iter().zip(&want).enumerate() {
            let f = n as f64 / draws as f64;
            // Five standard deviations of a binomial frequency.
            let sd = (p * (1.0 - p) / draws as f64).sqrt();
            assert!(
                (f - p).abs() <= 5.0 * sd + 1e-12,
                "draft {draft}: token {t} drawn {f:.5}, probability {p:.5}"
            );
        }
    }
    // Greedy verification is the argmax, drafted or not.
    let mut g = Sampler::new(SamplerConfig::default()).unwrap();
    assert_eq!(g.verify(&logits, &[], 7), 7);
    assert_eq!(g.verify(&logits, &[], 1), 7);
}

#[test]
fn logit_bias_shifts_and_bans() {
    let logits = [0.0, 3.0, 1.0, 2.0];
    // Greedy takes 1; a ban on 1 leaves 3; +5 on 2 makes 2 the best.
    let greedy = |bias: Vec<(u32, f32)>| {
        Sampler::new(SamplerConfig {
            logit_bias: bias,
            ..cfg(0.0)
        })
        .unwrap()
        .sample(&logits, &[])
    };
    assert_eq!(greedy(vec![]), 1);
    assert_eq!(greedy(vec![(1, -100.0)]), 3);
    assert_eq!(greedy(vec![(2, 5.0)]), 2);
    // A banned token is never drawn, at any temperature.
    let mut s = Sampler::new(SamplerConfig {
        logit_bias: vec![(1, -100.0), (3, -100.0)],
        seed: 3,
        ..cfg(5.0)
    })
    .unwrap();
    for _ in 0..500 {
        let t = s.sample(&logits, &[]);
        assert!(t == 0 || t == 2, "drew banned token {t}");
    }
    for bad in [101.0, -100.5, f32::NAN] {
        let e = SamplerConfig {
            logit_bias: vec![(0, bad)],
            ..cfg(1.0)
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.param, "logit_bias");
    }
}

/// The top `k` of a long row with many ties (both selection paths: the
/// screened scan up to 64, the partial sort past it) is the first `k` of
/// the whole row sorted best first, ties to the lower id; the chosen
/// token's value is its `log_softmax`.
#[test]
fn logprobs_top_k_is_the_sorted_rows_first_k() {
    let row: Vec<f32> = (0..5003u32)
        .map(|i| ((i.wrapping_mul(2654435761) >> 20) % 97) as f32 * 0.25 - 12.0)
        .collect();
    let full = log_softmax(&row);
    let mut order: Vec<u32> = (0..row.len() as u32).collect();
    order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    for k in [1, 5, 20, 64, 65, 100] {
        let lp = logprobs(&row, 17, k);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, order[..k], "k {k}");
        for &(id, v) in &lp.top {
            assert_eq!(v, full[id as usize]);
        }
        assert_eq!(lp.chosen, full[17]);
        // Its rank: one more than the tokens sorted before its value.
        let first_equal = order
            .iter()
            .position(|&i| row[i as usize] == row[17])
            .unwrap();
        assert_eq!(lp.rank as usize, first_equal + 1);
    }
}

/// The candidates and probabilities of a draw, as the plain algorithm gives
/// them (llama.cpp's chain with every cut on the whole sorted row): top-n-σ,
/// top-k, typical, top-p and min-p on the probabilities at temperature 1
/// over what is left, XTC (always drawn here), then the softmax at the
/// temperature; `min_keep` as llama.cpp's samplers read it.
fn reference_distribution(c: &SamplerConfig, row: &[f32]) -> Vec<(u32, f64)> {
    let mut cand: Vec<(u32, f32)> = row
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if c.top_n_sigma > 0.0 {
        let fin: Vec<f64> = row
            .iter()
            .filter(|l| l.is_finite())
            .map(|&l| l as f64)
            .collect();
        let mean = fin.iter().sum::<f64>() / fin.len() as f64;
        let sd = (fin.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / fin.len() as f64).sqrt();
        let floor = (cand[0].1 as f64 - c.top_n_sigma as f64 * sd) as f32;
        let n = cand.iter().filter(|x| x.1 >= floor).count().max(1);
        cand.truncate(n);
    }
    if c.top_k > 0 && c.top_k < cand.len() {
        cand.truncate(c.top_k);
    }
    if c.typical_p < 1.0 {
        let p = softmax(&cand, 1.0);
        let h: f64 = -p
            .iter()
            .filter(|&&q| q > 0.0)
            .map(|&q| q * q.ln())
            .sum::<f64>();
        let score = |i: usize| {
            if p[i] > 0.0 {
                (-p[i].ln() - h).abs()
            } else {
                f64::INFINITY
            }
        };
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by(|&a, &b| score(a).total_cmp(&score(b)).then(a.cmp(&b)));
        let (mut cum, mut keep) = (0.0, order.len());
        for (i, &at) in order.iter().enumerate() {
            cum += p[at];
            if cum > c.typical_p as f64 && (c.min_keep == 0 || i >= c.min_keep - 1) {
                keep = i + 1;
                break;
            }
        }
        let mut kept: Vec<(u32, f32)> = order[..keep].iter().map(|&i| cand[i]).collect();
        kept.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        cand = kept;
    }
    let probs = softmax(&cand, 1.0);
    let mut keep = probs.len();
    if c.top_p < 1.0 {
        let mut cum = 0.0;
        for (i, p) in probs.iter().enumerate() {
            cum += p;
            if cum >= c.top_p as f64 && i + 1 >= c.min_keep {
                keep = i + 1;
                break;
            }
        }
    }
    if c.min_p > 0.0 {
        // The first token always, then while above the floor or short of
        // `min_keep` (llama.cpp's sorted min-p).
        let floor = probs[0] * c.min_p as f64;
        let mut i = 1;
        while i < keep && (probs[i] >= floor || i < c.min_keep) {
            i += 1;
        }
        keep = i;
    }
    cand.truncate(keep.max(1));
    if c.xtc_probability > 0.0 && c.xtc_threshold <= 0.5 && cand.len() > 1 {
        let p = softmax(&cand, 1.0);
        let last = p
            .iter()
            .take_while(|&&q| q >= c.xtc_threshold as f64)
            .count();
        let pos_last = last.saturating_sub(1);
        if pos_last > 0 && cand.len() - pos_last >= c.min_keep {
            cand.drain(..pos_last);
        }
    }
    let p = softmax(&cand, c.temperature);
    cand.iter().map(|c| c.0).zip(p).collect()
}

/// The draw's distribution (top-k by a scan, top-p / min-p over a logit
/// bound, no sort of the row without a cut) is the plain algorithm's: the
/// same tokens with the same probabilities, over peaked, flat and tied rows
/// and rows with banned (−∞) tokens, for every combination of the cuts.
#[test]
fn distribution_is_the_plain_algorithms() {
    let n = 3001u32;
    let hash = |i: u32, s: u32| (i.wrapping_mul(2654435761) ^ s.wrapping_mul(40503)) >> 8;
    let rows: Vec<Vec<f32>> = vec![
        (0..n)
            .map(|i| (hash(i, 1) % 10_000) as f32 * 0.003 - 15.0)
            .collect(),
        (0..n)
            .map(|i| (hash(i, 2) % 10_000) as f32 * 1e-5)
            .collect(),
        (0..n).map(|i| (hash(i, 3) % 7) as f32).collect(),
        (0..n)
            .map(|i| match hash(i, 4) % 5 {
                0 => f32::NEG_INFINITY,
                r => r as f32 * 2.5 + (hash(i, 5) % 100) as f32 * 0.01,
            })
            .collect(),
        // Rising by less than any margin a screen could afford.
        (0..n).map(|i| i as f32 * 1e-4).collect(),
    ];
    let mut configs = Vec::new();
    for top_k in [0, 1, 40, 100] {
        for top_p in [1.0, 0.9, 0.5] {
            for min_p in [0.0, 0.05, 0.5] {
                for (temperature, min_keep) in [(0.7, 0), (1.5, 0), (1.5, 200)] {
                    for (top_n_sigma, typical_p, xtc_probability) in [
                        (0.0, 1.0, 0.0),
                        (1.5, 1.0, 0.0),
                        (0.0, 0.7, 0.0),
                        (0.0, 1.0, 1.0),
                        (1.0, 0.5, 1.0),
                    ] {
                        configs.push(SamplerConfig {
                            temperature,
                            top_k,
                            top_p,
                            min_p,
                            top_n_sigma,
                            typical_p,
                            xtc_probability,
                            xtc_threshold: 0.05,
                            min_keep,
                            ..SamplerConfig::default()
                        });
                    }
                }
            }
        }
    }
    for (ri, row) in rows.iter().enumerate() {
        for c in &configs {
            let mut s = Sampler::new(c.clone()).unwrap();
            let probs = s.distribution(row);
            let mut got: Vec<(u32, f64)> = s.cand.iter().map(|c| c.0).zip(probs).collect();
            let mut want = reference_distribution(c, row);
            got.sort_by_key(|g| g.0);
            want.sort_by_key(|w| w.0);
            let at = format!("row {ri}, {c:?}");
            assert_eq!(got.len(), want.len(), "{at}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.0, w.0, "{at}");
                assert!((g.1 - w.1).abs() <= 1e-5 * w.1 + 1e-12, "{at}: {g:?} {w:?}");
            }
        }
    }
}

/// DRY runs in the chain after the penalties: greedy takes the runner-up
/// when the best token would repeat a run, and not when DRY is off.
#[test]
fn dry_turns_greedy_away_from_a_repeat() {
    let dry = DryConfig {
        multiplier: 0.8,
        ..DryConfig::default()
    };
    // a b c x a b → "c" would repeat "a b c".
    let history = [0, 1, 2, 9, 0, 1];
    let mut row = vec![0.0f32; 10];
    row[2] = 1.0;
    row[5] = 0.5;
    let mut on = Sampler::new(SamplerConfig { dry, ..cfg(0.0) }).unwrap();
    assert!(!on.takes_the_best_logit());
    assert_eq!(on.sample(&row, &history), 5);
    let mut off = Sampler::new(cfg(0.0)).unwrap();
    assert_eq!(off.sample(&row, &history), 2);
}

/// With Mirostat on, as in llama.cpp, the penalties are not applied (the
/// best token stays the only one a tiny bound keeps), and each draw moves
/// the bound by eta times the surprise's error.
#[test]
fn mirostat_skips_the_penalties_and_tracks_its_target() {
    let mirostat = MirostatConfig {
        version: 2,
        tau: 0.01,
        eta: 0.1,
    };
    let row = [0.0f32, 3.0, 2.5, 0.0];
    let config = SamplerConfig {
        mirostat,
        repetition_penalty: 50.0,
        ..cfg(1.0)
    };
    let mut s = Sampler::new(config.clone()).unwrap();
    assert_eq!(s.sample(&row, &[1, 1, 1]), 1);
    // One candidate: p = 1, surprise 0, mu = 0.02 − 0.1 · (0 − 0.01).
    assert!((s.mu - 0.021).abs() < 1e-6, "{}", s.mu);
    let mut plain = Sampler::new(SamplerConfig {
        mirostat: MirostatConfig::default(),
        ..config
    })
    .unwrap();
    assert_ne!(plain.sample(&row, &[1, 1, 1]), 1);
    // tau 2 (mu 4): 2^−4 keeps ids 1 and 2; a draw of p moves mu by
    // −0.1 · (−log₂ p − 2).
    let mut s = Sampler::new(SamplerConfig {
        mirostat: MirostatConfig {
            version: 2,
            tau: 2.0,
            eta: 0.1,
        },
        seed: 9,
        ..cfg(1.0)
    })
    .unwrap();
    let e = |l: f32| (l as f64).exp();
    let p1 = e(3.0) / (e(3.0) + e(2.5));
    let t = s.sample(&row, &[]);
    let p = if t == 1 { p1 } else { 1.0 - p1 };
    assert!(t == 1 || t == 2);
    let want = 4.0 - 0.1 * (-(p.log2()) as f32 - 2.0);
    assert!((s.mu - want).abs() < 1e-5, "{} vs {want}", s.mu);
}

/// Dynamic temperature as llama.cpp's `temp_ext`: the normalised entropy
/// of the candidates maps into [max(0, t − range), t + range]; from a
/// temperature of 0 it still samples, and an exponent that sends the
/// entropy term to 0 there is greedy.
#[test]
fn dynamic_temperature_follows_the_entropy() {
    let with = |t: f32, range: f32, exponent: f32| SamplerConfig {
        dynatemp_range: range,
        dynatemp_exponent: exponent,
        ..cfg(t)
    };
    let mut s = Sampler::new(with(1.0, 0.5, 1.0)).unwrap();
    // Flat: entropy at its maximum, the top of the range.
    s.cand = (0..4).map(|i| (i, 0.0)).collect();
    assert!((s.temperature_now(1.0) - 1.5).abs() < 1e-6);
    // Peaked: the entropy by hand.
    s.cand = vec![(0, 2.0), (1, 0.0), (2, 0.0)];
    let z = 2f64.exp() + 2.0;
    let p = [2f64.exp() / z, 1.0 / z, 1.0 / z];
    let h: f64 = -p.iter().map(|p| p * p.ln()).sum::<f64>();
    let want = 0.5 + (h / 3f64.ln()) as f32;
    assert!((s.temperature_now(1.0) - want).abs() < 1e-5);
    let mut s = Sampler::new(with(1.0, 0.0, 1.0)).unwrap();
    s.cand = vec![(0, 2.0), (1, 0.0)];
    assert_eq!(s.temperature_now(1.0), 1.0, "off");

    let flat = [0.0f32; 8];
    let draws = |c: SamplerConfig| {
        let mut s = Sampler::new(c).unwrap();
        (0..64)
            .map(|_| s.sample(&flat, &[]))
            .collect::<std::collections::HashSet<_>>()
    };
    let c0 = with(0.0, 0.7, 1.0);
    assert!(!Sampler::new(c0.clone()).unwrap().is_greedy());
    assert!(draws(c0).len() > 1);
    let peaked = [3.0f32, 0.0, 0.0, 0.0];
    let mut s = Sampler::new(with(0.0, 0.7, 1e9)).unwrap();
    assert!((0..32).all(|_| s.sample(&peaked, &[]) == 0));
}

/// llama.cpp's default order through the plain chain is the fast path's
/// draw: the same candidates, the same probabilities.
#[test]
fn the_default_order_in_the_chain_is_the_fast_paths_draw() {
    let n = 2003u32;
    let hash = |i: u32| (i.wrapping_mul(2654435761) >> 8) % 10_000;
    let row: Vec<f32> = (0..n).map(|i| hash(i) as f32 * 0.002 - 10.0).collect();
    let history = [5u32, 9, 5, 1200];
    for (top_k, top_p, min_p, typical_p, top_n_sigma, xtc_probability) in [
        (0, 1.0, 0.0, 1.0, 0.0, 0.0),
        (40, 0.9, 0.05, 1.0, 0.0, 0.0),
        (0, 0.5, 0.0, 0.7, 1.5, 1.0),
        (100, 1.0, 0.2, 1.0, 0.0, 1.0),
    ] {
        let c = SamplerConfig {
            temperature: 0.8,
            top_k,
            top_p,
            min_p,
            typical_p,
            top_n_sigma,
            xtc_probability,
            xtc_threshold: 0.01,
            repetition_penalty: 1.3,
            seed: 4,
            ..SamplerConfig::default()
        };
        let mut fast = Sampler::new(c.clone()).unwrap();
        let mut plain = Sampler::new(c.clone()).unwrap();
        let mut penalised = row.clone();
        apply_penalties(&c, &mut penalised, &history);
        let want = fast.distribution(&penalised);
        let got = plain.chain(row.clone(), &history, &DEFAULT_ORDER);
        let mut want: Vec<(u32, f64)> = fast.cand.iter().map(|c| c.0).zip(want).collect();
        let mut got: Vec<(u32, f64)> = plain.cand.iter().map(|c| c.0).zip(got).collect();
        want.sort_by_key(|w| w.0);
        got.sort_by_key(|g| g.0);
        assert_eq!(got.len(), want.len(), "{c:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.0, w.0, "{c:?}");
            assert!(
                (g.1 - w.1).abs() <= 1e-5 * w.1 + 1e-12,
                "{c:?}: {g:?} {w:?}"
            );
        }
    }
}

/// In an order of the user's, each stage sees what the ones before it
/// left, and a stage left out is not applied.
#[test]
fn a_users_order_changes_what_each_stage_sees() {
    // At temperature 1: p ≈ [0.665, 0.245, 0.090]; top-p 0.8 keeps two.
    let row = [2.0f32, 1.0, 0.0];
    let kept = |order: &[Stage], c: SamplerConfig| {
        let mut s = Sampler::new(SamplerConfig {
            order: Some(order.to_vec()),
            ..c
        })
        .unwrap();
        let p = s.chain(row.to_vec(), &[], order);
        let mut ids: Vec<u32> = s.cand.iter().map(|c| c.0).collect();
        ids.sort();
        (ids, p)
    };
    let hot = SamplerConfig {
        temperature: 3.0,
        top_p: 0.8,
        ..SamplerConfig::default()
    };
    use Stage::*;
    assert_eq!(kept(&[TopP, Temperature], hot.clone()).0, [0, 1]);
    // Temperature first: p ≈ [0.42, 0.31, 0.27], top-p 0.8 needs all three.
    assert_eq!(kept(&[Temperature, TopP], hot.clone()).0, [0, 1, 2]);
    // Without top-p in the list, top-p is not applied.
    assert_eq!(kept(&[Temperature], hot.clone()).0, [0, 1, 2]);
    // Without temperature, the draw is at the logits' own scale.
    let (_, p) = kept(&[TopK], hot.clone());
    let z: f64 = [2f64, 1.0, 0.0].iter().map(|l| l.exp()).sum();
    assert!((p[0] - 2f64.exp() / z).abs() < 1e-9, "{p:?}");
    // XTC before a temperature of 0 takes the best away first.
    let xtc = SamplerConfig {
        temperature: 0.0,
        xtc_probability: 1.0,
        xtc_threshold: 0.2,
        ..SamplerConfig::default()
    };
    let mut s = Sampler::new(SamplerConfig {
        order: Some(vec![Xtc, Temperature]),
        ..xtc.clone()
    })
    .unwrap();
    assert!(!s.is_greedy());
    assert_eq!(s.sample(&row, &[]), 1);
    let mut s = Sampler::new(SamplerConfig {
        order: Some(vec![Temperature, Xtc]),
        ..xtc
    })
    .unwrap();
    assert_eq!(s.sample(&row, &[]), 0);
    // Penalties left out: a repeat is not penalised.
    let rp = SamplerConfig {
        temperature: 0.0,
        repetition_penalty: 10.0,
        ..SamplerConfig::default()
    };
    let pick = |order: Vec<Stage>| {
        let mut s = Sampler::new(SamplerConfig {
            order: Some(order),
            ..rp.clone()
        })
        .unwrap();
        s.sample(&row, &[0])
    };
    assert_eq!(pick(vec![Penalties, Temperature]), 1);
    assert_eq!(pick(vec![Temperature]), 0);
    // The default order given explicitly is the default path.
    let s = Sampler::new(SamplerConfig {
        order: Some(DEFAULT_ORDER.to_vec()),
        ..rp.clone()
    })
    .unwrap();
    assert!(s.is_greedy());
}

/// A recorded draw holds the chain's distribution: the kept tokens best
/// first, summing to 1, the one returned among them; greedy is certain.
#[test]
fn recorded_draws_are_the_chains_distribution() {
    let row = [1.0f32, 3.0, 2.0, 0.5, 2.5];
    let mut s = Sampler::new(SamplerConfig {
        temperature: 1.0,
        top_k: 3,
        seed: 9,
        ..SamplerConfig::default()
    })
    .unwrap();
    assert!(s.last_draw().is_none(), "not recorded unless asked");
    s.sample(&row, &[]);
    assert!(s.last_draw().is_none());
    s.record_draws(5);
    for _ in 0..20 {
        let t = s.sample(&row, &[]);
        let d = s.last_draw().expect("recorded").clone();
        let ids: Vec<u32> = d.top.iter().map(|x| x.0).collect();
        assert_eq!(ids, [1, 4, 2]);
        let z: f64 = [3.0f64, 2.5, 2.0].iter().map(|l| l.exp()).sum();
        assert!((d.top[0].1 - 3f64.exp() / z).abs() < 1e-12, "{d:?}");
        let mine = d
            .top
            .iter()
            .find(|x| x.0 == t)
            .expect("drawn from the kept");
        assert_eq!(mine.1, d.chosen);
        s.forget_draw();
        assert!(s.last_draw().is_none());
    }
    let mut g = Sampler::new(cfg(0.0)).unwrap();
    g.record_draws(2);
    let t = g.sample(&row, &[]);
    assert_eq!(
        g.last_draw(),
        Some(&Drawn {
            chosen: 1.0,
            top: vec![(t, 1.0)]
        })
    );
}
