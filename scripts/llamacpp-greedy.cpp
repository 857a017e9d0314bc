// llamacpp-greedy: llama.cpp's greedy continuation of a prompt given as
// token ids, printed as one JSON object, for scripts/llamacpp-greedy.py
// to compare with gosling's on the same GGUF file.
//
//   llamacpp-greedy MODEL.gguf N_PREDICT ID,ID,... [THREADS]
//
// prints {"ids": [...], "gaps": [...]}: the N_PREDICT argmax tokens after
// the prompt (no BOS is added: the ids are the whole prompt; end of
// sequence does not stop it), and at each step the gap between the top
// two logits. The K/V cache is F32 (llama.cpp's default F16 rounds every
// cached key and value, a difference of its own that is not the weights'),
// flash attention off, one token per decode after the prompt.
//
// Built against llama.h and libllama of a llama.cpp build by the script.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf N_PREDICT ID,ID,... [THREADS]\n", argv[0]);
        return 2;
    }
    const char * path = argv[1];
    const int n_predict = atoi(argv[2]);
    std::vector<llama_token> prompt;
    {
        std::stringstream ss(argv[3]);
        std::string item;
        while (std::getline(ss, item, ',')) {
            prompt.push_back((llama_token) atoi(item.c_str()));
        }
    }
    const int threads = argc > 4 ? atoi(argv[4]) : 2;
    if (prompt.empty() || n_predict <= 0) {
        fprintf(stderr, "empty prompt or N_PREDICT <= 0\n");
        return 2;
    }

    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", path);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = prompt.size() + n_predict + 8;
    cp.n_batch = cp.n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn = false;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    std::vector<llama_token> out;
    std::vector<double> gaps;
    llama_batch batch = llama_batch_get_one(prompt.data(), prompt.size());
    llama_token next = 0;
    for (int i = 0; i < n_predict; i++) {
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "llama_decode failed at step %d\n", i);
            return 1;
        }
        const float * logits = llama_get_logits_ith(ctx, -1);
        // argmax, the lowest id on a tie (as gosling's greedy sampler).
        int best = 0, second = -1;
        for (int t = 1; t < n_vocab; t++) {
            if (logits[t] > logits[best]) {
                second = best;
                best = t;
            } else if (second < 0 || logits[t] > logits[second]) {
                second = t;
            }
        }
        out.push_back(best);
        gaps.push_back((double) logits[best] - (double) logits[second]);
        next = best;
        batch = llama_batch_get_one(&next, 1);
    }

    printf("{\"ids\": [");
    for (size_t i = 0; i < out.size(); i++) {
        printf("%s%d", i ? ", " : "", out[i]);
    }
    printf("], \"gaps\": [");
    for (size_t i = 0; i < gaps.size(); i++) {
        printf("%s%.6g", i ? ", " : "", gaps[i]);
    }
    printf("]}\n");

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
