// --device cuda for the commands that run the engine: the flags, and loading a bundle onto
// the GPU behind the CUDA step executor (engine/cuda/cuda_executor.h).
#include <algorithm>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"
#ifdef PEREGRINE_HAVE_CUDA
#include "engine/cuda/cuda_executor.h"
#endif

namespace pg::cli {

void DeviceFlags::Add(CLI::App& app) {
  app.add_option("--device", device, "cpu | cuda (one GPU)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--gpu-memory-utilization", gpu_memory_utilization,
                 "--device cuda: fraction of the GPU's memory for weights, activations and KV pages")
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--kv-dtype", kv_dtype, "--device cuda: KV cache element type: bf16 | fp8 (e4m3)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--weight-dtype", weight_dtype,
                 "--device cuda: dense projection weights: bf16 | fp8 (e4m3, per-tensor scale)")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_flag("--no-cuda-graphs", no_graphs, "--device cuda: run decode steps eagerly");
}

DeviceModel LoadOnDevice(const ModelFlags& model, const DeviceFlags& device,
                         const engine::EngineConfig& ec) {
#ifdef PEREGRINE_HAVE_CUDA
  engine::cuda::CudaExecutorOptions o;
  o.gpu_memory_utilization = device.gpu_memory_utilization;
  o.kv_dtype = device.kv_dtype == "fp8" ? DType::kF8E4M3 : DType::kBF16;
  o.weight_dtype = device.weight_dtype == "fp8" ? DType::kF8E4M3 : DType::kBF16;
  o.page_size = ec.page_size;
  o.max_step_tokens = ec.max_step_tokens;
  o.max_running = ec.max_running_requests;
  o.host_cache_bytes = ec.host_cache_bytes;
  o.graphs = !device.no_graphs;
  auto exec = std::make_unique<engine::cuda::CudaStepExecutor>(o);
  engine::BundleOptions bo = model.ToBundleOptions();
  bo.load_model = [&](const models::LoadOptions& lo) -> std::unique_ptr<models::Model> {
    try {
      return exec->LoadModel(lo);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnsupported) throw;
      Throw(ErrorCode::kUnsupported,
            "--device cuda runs the llama / qwen3 dense, qwen3_moe and deepseek_v3 families with "
            "bf16 / fp8 weights; {}",
            e.what());
    }
  };
  DeviceModel dm;
  dm.bundle = engine::LoadBundle(bo);
  dm.name = dm.bundle.name();
  const int context = ec.ContextFor(dm.bundle.model->config());
  exec->Attach(std::move(dm.bundle.model), context);
  dm.kv_bytes = exec->runner().kv_layout().bytes;
  dm.executor = std::move(exec);
  return dm;
#else
  (void)model, (void)device, (void)ec;
  Throw(ErrorCode::kUnsupported, "--device cuda: this peregrine was built without CUDA "
                                 "(configure with the cuda preset)");
#endif
}

}  // namespace pg::cli
