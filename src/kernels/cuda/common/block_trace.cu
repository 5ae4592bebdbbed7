// Host side of the block timeline trace (block_trace.h).
#include "kernels/cuda/common/block_trace.h"

#include <cuda_runtime.h>

#include <fstream>

#include "kernels/cuda/common/cuda_check.h"

namespace pg::cuda {
namespace {

std::vector<BlockTraceSetter>& Setters() {
  static std::vector<BlockTraceSetter> s;
  return s;
}
BlockTraceBuffer* g_buffer = nullptr;
unsigned g_capacity = 0;

}  // namespace

void RegisterBlockTraceUnit(BlockTraceSetter set) { Setters().push_back(set); }

bool BlockTraceCompiled() {
#if defined(PEREGRINE_BLOCK_TRACE)
  return true;
#else
  return false;
#endif
}

void BlockTraceStart(unsigned capacity) {
  if (g_buffer == nullptr || capacity > g_capacity) {
    if (g_buffer != nullptr) PG_CUDA_CHECK(cudaFree(g_buffer));
    PG_CUDA_CHECK(cudaMalloc(&g_buffer, sizeof(BlockTraceBuffer) + sizeof(BlockTraceRecord) * capacity));
    g_capacity = capacity;
    for (BlockTraceSetter set : Setters()) set(g_buffer);
  }
  const unsigned head[2] = {0, g_capacity};
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  PG_CUDA_CHECK(cudaMemcpy(g_buffer, head, sizeof head, cudaMemcpyHostToDevice));
}

std::vector<BlockTraceRecord> BlockTraceCollect() {
  if (g_buffer == nullptr) return {};
  PG_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned head[2];
  PG_CUDA_CHECK(cudaMemcpy(head, g_buffer, sizeof head, cudaMemcpyDeviceToHost));
  std::vector<BlockTraceRecord> r(std::min(head[0], g_capacity));
  if (!r.empty())
    PG_CUDA_CHECK(cudaMemcpy(r.data(), g_buffer->records, sizeof(BlockTraceRecord) * r.size(),
                             cudaMemcpyDeviceToHost));
  return r;
}

void BlockTraceWriteCsv(const std::vector<BlockTraceRecord>& records, const std::string& path) {
  std::ofstream f(path);
  f << "tag,grid_id,block,blocks,threads,sm,start,wait0,wait1,end";
  for (int i = 0; i < kBlockTraceMarks; ++i) f << ",m" << i;
  f << ",clk_start,clk_end\n";
  for (const BlockTraceRecord& r : records) {
    f << r.tag << ',' << r.grid_id << ',' << r.block << ',' << r.blocks << ',' << r.threads << ','
      << r.sm << ',' << r.start << ',' << r.wait0 << ',' << r.wait1 << ',' << r.end;
    for (uint64_t m : r.mark) f << ',' << m;
    f << ',' << r.clk_start << ',' << r.clk_end << '\n';
  }
}

}  // namespace pg::cuda
