//! `rill perplexity` against llama-perplexity on the demo model and a
//! committed text (figures from `scripts/fixtures/make_perplexity_fixture.py`),
//! and its base files read by both tools.

use serde_json::Value;

mod common;
use common::{ok, rill, root};

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).expect("--json prints one object")
}

fn expected() -> Value {
    let p = root().join("fixtures/perplexity/expected.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn path(rel: &str) -> String {
    root().join(rel).to_str().unwrap().to_string()
}

#[test]
fn perplexity_equals_llama_perplexity_on_the_same_file_and_text() {
    let e = &expected()["ppl"];
    let (model, text) = (
        path("assets/demo/rill-demo.gguf"),
        path("fixtures/text/ppl.txt"),
    );
    let (c, chunks) = (e["ctx"].to_string(), e["chunks"].to_string());
    let got = json(&[
        "perplexity",
        "-m",
        &model,
        "-f",
        &text,
        "-c",
        &c,
        "--chunks",
        &chunks,
        "-t",
        "2",
        "--json",
    ]);
    let (ppl, want) = (got["ppl"].as_f64().unwrap(), e["ppl"].as_f64().unwrap());
    let rel = (ppl - want).abs() / want;
    eprintln!("rill {ppl:.4} vs llama-perplexity {want:.4}: relative {rel:.1e}");
    assert_eq!(got["chunks"], e["chunks"]);
    assert_eq!(got["tokens_scored"], 8 * 63);
    // The two engines' f32 and 8-bit-activation rounding: 3.7e-4 measured
    // here (1.2e-4 over the whole text's 37 windows).
    assert!(rel < 1e-3, "rill {ppl} vs llama {want}");
    let (err, want_err) = (
        got["ppl_error"].as_f64().unwrap(),
        e["ppl_error"].as_f64().unwrap(),
    );
    assert!(
        (err - want_err).abs() / want_err < 5e-3,
        "{err} vs {want_err}"
    );
}

#[test]
fn kl_divergence_against_llama_cpps_base_file() {
    let e = &expected()["kld_base"];
    let model = path("assets/demo/rill-demo.gguf");
    let base = path(e["file"].as_str().unwrap());
    let got = json(&[
        "perplexity",
        "-m",
        &model,
        "-t",
        "2",
        "--kl-divergence-base",
        &base,
        "--kl-divergence",
        "--json",
    ]);
    let (pb, want) = (
        got["ppl_base"].as_f64().unwrap(),
        e["ppl_base"].as_f64().unwrap(),
    );
    assert!((pb - want).abs() <= 1e-5 * want, "PPL(base) {pb} vs {want}");
    assert_eq!(got["tokens_scored"], 2 * 7);
    let kld = got["kld_mean"].as_f64().unwrap();
    assert!((0.0..1e-3).contains(&kld.abs()), "KLD {kld}");
    assert!(got["same_top"].as_f64().unwrap() >= 13.0 / 14.0);
}

#[test]
fn a_base_file_it_writes_reads_back_with_no_divergence_and_kv_types_show() {
    let model = path("assets/demo/rill-demo.gguf");
    let text = path("fixtures/text/ppl.txt");
    let base = std::env::temp_dir().join(format!("rill-ppl-{}.kld", std::process::id()));
    let base = base.to_str().unwrap();
    let common = ["-m", &model, "-t", "2", "--precision", "exact"];
    let mut write = vec!["perplexity", "-f", &text, "-c", "64", "--chunks", "3"];
    write.extend(common);
    write.extend(["--kl-divergence-base", base, "--json"]);
    let w = json(&write);
    let mut read = vec![
        "perplexity",
        "--kl-divergence-base",
        base,
        "--kl-divergence",
        "--json",
    ];
    read.extend(common);
    let same = json(&read);
    assert!(same["kld_mean"].as_f64().unwrap().abs() < 1e-6, "{same}");
    assert_eq!(same["same_top"], 1.0);
    let ratio = (w["ppl"].as_f64().unwrap() / same["ppl"].as_f64().unwrap() - 1.0).abs();
    assert!(ratio < 1e-9, "the same run: {w} vs {same}");
    // A 4-bit cache without its f16 window diverges a little, more than q8_0.
    let kld = |kv: &[&str]| {
        let mut a = read.clone();
        a.extend(kv);
        json(&a)["kld_mean"].as_f64().unwrap()
    };
    let q8 = kld(&["-ctk", "q8_0", "-ctv", "q8_0"]);
    let q4 = kld(&[
        "-ctk",
        "q4_0",
        "-ctv",
        "q4_0",
        "--kv-window",
        "0",
        "--kv-sinks",
        "0",
    ]);
    eprintln!("KLD vs f32 KV: q8_0 {q8:.2e}, q4_0 {q4:.2e}");
    assert!(0.0 < q8 && q8 < q4 && q4 < 0.1, "q8_0 {q8} q4_0 {q4}");
    std::fs::remove_file(base).ok();
}

#[test]
fn bad_input_is_a_clear_error() {
    let model = path("assets/demo/rill-demo.gguf");
    let short = std::env::temp_dir().join(format!("rill-ppl-short-{}.txt", std::process::id()));
    std::fs::write(&short, "Too short a text.").unwrap();
    let bad_base = std::env::temp_dir().join(format!("rill-ppl-bad-{}.kld", std::process::id()));
    let mut bytes = std::fs::read(root().join("fixtures/perplexity/demo_c16.kld")).unwrap();
    bytes.truncate(5000);
    std::fs::write(&bad_base, &bytes).unwrap();
    let cases: [(Vec<&str>, &str); 3] = [
        (
            vec!["perplexity", "-m", &model, "-f", short.to_str().unwrap()],
            "a context of 512 needs at least 1024",
        ),
        (
            vec![
                "perplexity",
                "-m",
                &model,
                "--kl-divergence-base",
                bad_base.to_str().unwrap(),
                "--kl-divergence",
            ],
            "cut short",
        ),
        (
            vec![
                "perplexity",
                "-m",
                &model,
                "--kl-divergence-base",
                short.to_str().unwrap(),
                "--kl-divergence",
            ],
            "_logits_",
        ),
    ];
    for (args, want) in cases {
        let out = rill(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains(want) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_file(short).ok();
    std::fs::remove_file(bad_base).ok();
}
