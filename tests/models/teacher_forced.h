// GPU model tests that compare two placements of one model (a folder, or a config.json with
// dummy weights of one seed) decoding the same tokens: placement through the runner with
// decode graphs of batch 1, teacher-forced logits, and their difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/loader.h"
#include "models/model.h"
#include "runtime/cuda/gpu_decode_bench.h"
#include "runtime/cuda/gpu_runner.h"

namespace pg::testing {

struct Placed {
  std::unique_ptr<runtime::cuda::GpuRunner> runner;
  std::unique_ptr<models::Model> model;
};

// Places the model (dummy: `path` is a config.json, random weights of seed 7) with one KV slot
// of `context` tokens and the decode graph of batch 1 captured.
inline Placed PlaceForDecode(const std::string& path, bool dummy, int context) {
  namespace rt = runtime::cuda;
  Placed p;
  p.runner = std::make_unique<rt::GpuRunner>(rt::GpuRunnerOptions{
      .gpu_memory_utilization = 0.4, .max_batch_tokens = 64, .page_size = 16});
  const models::DevicePlacement placement{.max_batch_tokens = 64};
  if (dummy) {
    p.model = rt::CreateDummyOnDevice(path, p.runner->memory(), placement, /*seed=*/7);
  } else {
    p.model = models::LoadModel({.path = path});
    p.model->PlaceOnDevice(p.runner->memory(), placement);
  }
  p.runner->Attach(*p.model);
  p.runner->ConfigureKv(/*num_slots=*/1, context);
  const int sizes[] = {1};
  p.runner->CaptureDecode(sizes, context);
  return p;
}

// Logits after the prompt (eager prefill, 37-token chunks) and after each of `tokens` fed one
// at a time through the decode graph.
inline std::vector<std::vector<float>> TeacherForced(Placed& p, std::span<const int32_t> prompt,
                                                     std::span<const int32_t> tokens) {
  namespace rt = runtime::cuda;
  const size_t vocab = size_t(p.model->config().vocab_size);
  std::vector<std::vector<float>> out;
  std::vector<float> l(vocab);
  for (size_t at = 0; at < prompt.size(); at += 37) {
    const size_t len = std::min<size_t>(37, prompt.size() - at);
    rt::StepSeq s{0, int(at), prompt.subspan(at, len)};
    p.runner->Step(std::span<const rt::StepSeq>(&s, 1), l);
  }
  out.push_back(l);
  for (size_t t = 0; t < tokens.size(); ++t) {
    rt::StepSeq s{0, int(prompt.size() + t), tokens.subspan(t, 1)};
    p.runner->Decode(std::span<const rt::StepSeq>(&s, 1), l);
    out.push_back(l);
  }
  return out;
}

// Largest max|diff| / std(logits) over the steps, and the steps whose argmax differs.
struct Diff {
  double worst_over_std = 0, worst_abs = 0;
  size_t worst_step = 0;
  int argmax_differs = 0;
};

inline Diff Compare(const std::vector<std::vector<float>>& ref,
                    const std::vector<std::vector<float>>& got) {
  Diff d;
  for (size_t t = 0; t < ref.size(); ++t) {
    double max_abs = 0, mean = 0, var = 0;
    for (float v : ref[t]) mean += v;
    mean /= double(ref[t].size());
    size_t ar = 0, ag = 0;
    for (size_t i = 0; i < ref[t].size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(double(got[t][i]) - double(ref[t][i])));
      var += (ref[t][i] - mean) * (ref[t][i] - mean);
      if (ref[t][i] > ref[t][ar]) ar = i;
      if (got[t][i] > got[t][ag]) ag = i;
    }
    const double sd = std::sqrt(var / double(ref[t].size()));
    d.argmax_differs += ar != ag;
    if (max_abs / sd >= d.worst_over_std) d.worst_over_std = max_abs / sd, d.worst_abs = max_abs, d.worst_step = t;
  }
  return d;
}

}  // namespace pg::testing
