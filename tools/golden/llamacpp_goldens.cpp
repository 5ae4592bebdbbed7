// Golden logits and greedy continuations from llama.cpp (an independent implementation of the
// GGUF formats), in the layout tests/models/golden_util.h reads: <out>/golden.json with
// {prompt_ids, greedy_ids, top1_margins, logits_file} per case, logits_<i>.f32 the full-vocab
// float32 logits after prompt i.
//
// Built against the peer build of tools/bench/build_llamacpp.sh (static libraries), not part
// of Peregrine's build:
//   L=/work/peers/llama.cpp; g++ -O2 -std=c++17 tools/golden/llamacpp_goldens.cpp \
//     -I$L/src/include -I$L/src/ggml/include -o /tmp/llamacpp_goldens \
//     $L/build/src/libllama.a $L/build/ggml/src/libggml.a $L/build/ggml/src/libggml-cpu.a \
//     $L/build/ggml/src/libggml-base.a -fopenmp -lpthread -ldl
//   /tmp/llamacpp_goldens MODEL.gguf OUT_DIR [new_tokens]
//
// llama.cpp runs on the CPU with one thread and an f32 KV cache (its default f16 cache would
// round every key and value); prompts are fixed token ids (no tokenizer involved), decoded
// greedily one token at a time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

struct Top2 {
  int id = 0;
  float margin = 0;
};

Top2 Argmax(const float* l, int n) {
  int a = 0, b = -1;
  for (int i = 1; i < n; ++i) {
    if (l[i] > l[a]) {
      b = a;
      a = i;
    } else if (b < 0 || l[i] > l[b]) {
      b = i;
    }
  }
  return {a, l[a] - l[b]};
}

std::string Ints(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string Floats(const std::vector<float>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.6g", v[i]);
    s += (i ? ", " : "") + std::string(buf);
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf OUT_DIR [new_tokens]\n", argv[0]);
    return 2;
  }
  const std::string out = argv[2];
  const int new_tokens = argc > 3 ? std::atoi(argv[3]) : 32;
  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  // Prompts of 1, 7, 33 and 100 tokens (as make_moe_goldens.py), ids spread over the vocab.
  std::vector<std::vector<int>> prompts;
  for (int len : {1, 7, 33, 100}) {
    std::vector<int> p;
    for (int i = 0; i < len; ++i) p.push_back(3 + (i * 37 + len * 11) % (vocab - 3));
    prompts.push_back(p);
  }
  std::string cases;
  for (size_t ci = 0; ci < prompts.size(); ++ci) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    std::vector<llama_token> toks(prompts[ci].begin(), prompts[ci].end());
    if (llama_decode(ctx, llama_batch_get_one(toks.data(), int(toks.size()))) != 0) return 1;
    const float* l = llama_get_logits_ith(ctx, -1);
    const std::string lf = "logits_" + std::to_string(ci) + ".f32";
    std::ofstream(out + "/" + lf, std::ios::binary)
        .write(reinterpret_cast<const char*>(l), std::streamsize(vocab) * 4);
    std::vector<int> greedy;
    std::vector<float> margins;
    for (int s = 0; s < new_tokens; ++s) {
      const Top2 t = Argmax(l, vocab);
      greedy.push_back(t.id);
      margins.push_back(t.margin);
      llama_token next = t.id;
      if (s + 1 == new_tokens) break;
      if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;
      l = llama_get_logits_ith(ctx, -1);
    }
    llama_free(ctx);
    cases += std::string(ci ? ",\n" : "") + "  {\"prompt_ids\": " + Ints(prompts[ci]) +
             ", \"greedy_ids\": " + Ints(greedy) + ", \"top1_margins\": " + Floats(margins) +
             ", \"logits_file\": \"" + lf + "\"}";
  }
  std::ofstream(out + "/golden.json")
      << "{\"generator\": \"tools/golden/llamacpp_goldens.cpp (llama.cpp, CPU, 1 thread, f32 KV)\",\n"
      << " \"cases\": [\n" << cases << "\n]}\n";
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
