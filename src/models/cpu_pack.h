// Host copies of a model's weight matrices in the layout the CPU Matmul streams fastest
// (ops::PackMatmulWeightForCpu: Q4_0 / Q4_1 with 4 rows interleaved, on AVX2 or newer CPUs),
// made once before the first host forward. The models keep their file-mapped views for device
// placement and pack a copy of the views the host forward reads, so a model that is placed on a
// device never pays for (or reads) a packed copy. Matmul on a packed copy gives the source's
// bits, so packing changes speed, not results.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace pg::models {

class CpuPackedWeights {
 public:
  // Registers `*w` (a view the caller owns, valid until Pack returns) to be packed.
  void Add(TensorView* w) { todo_.push_back(w); }
  // Registers `*w` (a dequantizable matrix read whole by a kernel that computes in f32, as
  // MlaAttention's w_kv_b) to become a dense f32 copy unless it is one already: converted once
  // here instead of on every call.
  void AddDenseF32(TensorView* w) { to_f32_.push_back(w); }
  // Replaces every registered view that has a packed form by a view of its packed copy (owned
  // here), packing in parallel, and every AddDenseF32 view that is not dense f32 by its f32
  // copy. Returns the bytes packed or converted.
  int64_t Pack();
  bool packed() const { return packed_; }

 private:
  std::vector<TensorView*> todo_, to_f32_;
  std::vector<Tensor> owned_;
  bool packed_ = false;
};

// A host model's forward weights: a copy of its layers and output head with every matrix the
// model's `add_layer(Layer&, CpuPackedWeights&)` registers packed (the one PrepareHost logic
// of the Llama, Qwen3-MoE and DeepSeek-V3 models). The model's own layers stay as loaded, for
// device placement. Prepare is idempotent: the first call copies and packs, later ones return.
template <class Layer>
class HostPackedModel {
 public:
  template <class AddLayer>
  void Prepare(const std::vector<Layer>& layers, const TensorView& output, AddLayer add_layer) {
    if (packer_.packed()) return;
    layers_ = layers;
    output_ = output;
    for (Layer& L : layers_) add_layer(L, packer_);
    packer_.Add(&output_);
    packer_.Pack();
  }
  bool ready() const { return packer_.packed(); }
  // Valid after Prepare.
  const Layer& layer(int i) const { return layers_[size_t(i)]; }
  const TensorView& output() const { return output_; }

 private:
  std::vector<Layer> layers_;
  TensorView output_;
  CpuPackedWeights packer_;
};

}  // namespace pg::models
