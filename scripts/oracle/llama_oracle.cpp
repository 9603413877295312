// Minimal llama.cpp harness for oracle comparisons (the team's ../shared/oracle/llama_oracle.cpp, plus
// ORACLE_NO_REPACK: load without llama.cpp's extra buffer types, i.e. no weight repacking and no AMX kernels;
// on this machine the AMX Q8_0/K-quant kernels die with SIGILL (tilezero), and the repacked paths round
// differently from the reference CPU path anyway). Built by scripts/fixtures/make_model_fixtures.py.
// Usage: llama_oracle MODEL.gguf OUT_PREFIX N_GEN N_THREADS TOK0 TOK1 ...
//   - decodes the prompt tokens in ONE batch with logits for every position -> OUT_PREFIX.prompt_logits.f32
//     (row-major [n_prompt, n_vocab] float32)
//   - greedy-generates N_GEN tokens (argmax, one token per llama_decode, recurrent/KV state kept)
//     -> prints "GEN id id id ..." and writes the logits of every generation step to OUT_PREFIX.gen_logits.f32
//       ([N_GEN, n_vocab]; row i = logits that produced generated token i)
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void quiet_log(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL OUT_PREFIX N_GEN N_THREADS TOK...\n", argv[0]);
        return 1;
    }
    const char * model_path = argv[1];
    std::string out_prefix  = argv[2];
    const int n_gen         = atoi(argv[3]);
    const int n_threads     = atoi(argv[4]);
    std::vector<llama_token> prompt;
    for (int i = 5; i < argc; i++) prompt.push_back(atoi(argv[i]));
    const int n_prompt = (int) prompt.size();

    if (!getenv("ORACLE_VERBOSE")) llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    if (getenv("ORACLE_NO_REPACK")) mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx           = n_prompt + n_gen + 16;
    cp.n_batch         = n_prompt > 512 ? n_prompt : 512;
    cp.n_ubatch        = getenv("ORACLE_UBATCH") ? atoi(getenv("ORACLE_UBATCH")) : cp.n_batch;
    cp.n_seq_max       = 1;
    cp.n_threads       = n_threads;
    cp.n_threads_batch = n_threads;
    cp.no_perf         = true;
    if (getenv("ORACLE_FA_OFF")) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (getenv("ORACLE_KV_F32")) { cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }

    llama_batch batch = llama_batch_init(n_prompt > 1 ? n_prompt : 1, 0, 1);
    batch.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; i++) {
        batch.token[i]     = prompt[i];
        batch.pos[i]       = i;
        batch.n_seq_id[i]  = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i]    = 1;
    }
    if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed\n"); return 1; }

    FILE * f = fopen((out_prefix + ".prompt_logits.f32").c_str(), "wb");
    for (int i = 0; i < n_prompt; i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, f);
    fclose(f);

    FILE * g = fopen((out_prefix + ".gen_logits.f32").c_str(), "wb");
    std::vector<llama_token> gen;
    const float * logits = llama_get_logits_ith(ctx, n_prompt - 1);
    int pos = n_prompt;
    for (int s = 0; s < n_gen; s++) {
        fwrite(logits, sizeof(float), n_vocab, g);
        int best = 0;
        for (int v = 1; v < n_vocab; v++) if (logits[v] > logits[best]) best = v;
        gen.push_back(best);
        if (s == n_gen - 1) break;
        batch.n_tokens     = 1;
        batch.token[0]     = best;
        batch.pos[0]       = pos++;
        batch.n_seq_id[0]  = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0]    = 1;
        if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed (gen)\n"); return 1; }
        logits = llama_get_logits_ith(ctx, 0);
    }
    fclose(g);
    printf("N_VOCAB %d\nGEN", n_vocab);
    for (auto t : gen) printf(" %d", t);
    printf("\n");

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
