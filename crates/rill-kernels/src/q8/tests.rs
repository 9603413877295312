use super::*;

#[test]
fn quantized_blocks_round_to_within_half_a_step() {
    let x: Vec<f32> = (0..512)
        .map(|i| ((i * 7919) % 1001) as f32 / 77.0 - 6.5)
        .collect();
    for format in [ActFormat::K256, ActFormat::B32] {
        let mut a = Q8Acts::default();
        a.quantize(format, &x, 2, 256);
        for t in 0..2 {
            let r = a.row(t);
            assert_eq!(r.qs.as_ptr() as usize % 64, 0, "rows start on cache lines");
            for (b, xb) in x[t * 256..(t + 1) * 256].chunks(format.block()).enumerate() {
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = amax / 127.0;
                match format {
                    ActFormat::K256 => assert_eq!(r.d[b], d),
                    ActFormat::B32 => assert_eq!(r.d[b], half::f16::from_f32(d).to_f32()),
                }
                for (i, &v) in xb.iter().enumerate() {
                    let q = r.qs[b * format.block() + i];
                    assert!((q as f32 * d - v).abs() <= d * 0.5001, "{v} -> {q}");
                }
            }
            assert_eq!(r.sums.len(), r.qs.len() / 16);
            for (s, q16) in r.sums.iter().zip(r.qs.chunks(16)) {
                assert_eq!(*s as i32, q16.iter().map(|&v| v as i32).sum::<i32>());
            }
        }
    }
}

#[test]
fn zero_and_non_finite_blocks_do_not_panic() {
    let mut x = vec![0f32; 64];
    x[40] = f32::NAN;
    let mut a = Q8Acts::default();
    a.quantize(ActFormat::B32, &x, 1, 64);
    let r = a.row(0);
    assert_eq!(r.d[0], 0.0);
    assert!(
        r.d[1].is_nan(),
        "a NaN input gives NaN outputs, as exact products do"
    );
    assert!(r.qs.iter().all(|&q| q == 0));
}

#[test]
fn precision_parses_its_names() {
    assert_eq!("q8".parse::<Precision>(), Ok(Precision::Q8));
    assert_eq!("exact".parse::<Precision>(), Ok(Precision::Exact));
    assert!("int4".parse::<Precision>().is_err());
}
