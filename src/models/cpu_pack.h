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
  // Replaces every registered view that has a packed form by a view of its packed copy (owned
  // here), packing in parallel. Returns the bytes packed.
  int64_t Pack();
  bool packed() const { return packed_; }

 private:
  std::vector<TensorView*> todo_;
  std::vector<Tensor> owned_;
  bool packed_ = false;
};

}  // namespace pg::models
