// Host side of the block timeline trace (see block_trace.cuh). Compiled in every CUDA build;
// records exist only in a build configured with -DPEREGRINE_BLOCK_TRACE=ON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pg::cuda {

// Kernel tags (PG_BLOCK_TRACE's argument): which kernel a record came from.
enum BlockTraceTag : int {
  kTraceGemvVec = 1,
  kTraceGemvScalar = 2,
  kTraceGemvRing = 3,
  kTraceDecodeMma = 4,
  kTraceDecode = 5,
  kTraceDecodeCombine = 6,
  kTraceRouter = 7,
  kTraceFusedRouter = 8,
  kTraceNormLogits = 9,
  kTraceGateUp = 10,
  kTraceDown = 11,
  kTraceDownTile = 12,
  kTraceRmsNorm = 13,
  kTraceEmbedding = 14,
  kTraceSample = 15,
  kTraceFp8Ring = 16,
  kTraceBf16RingMma = 17,
  kTraceKvWrite = 18,
  kTraceElementwise = 19,
  kTraceDecodeStream = 20,
  kTraceMlaDecode = 21,
  kTraceMlaCombine = 22,
  kTraceMlaKvPrep = 23,
  kTraceMlaQAbsorb = 24,
  kTraceMlaCombineApply = 25,
};

constexpr int kBlockTraceMarks = 4;

// One block of one launch. Times are %globaltimer nanoseconds; wait0 / wait1 are 0 when the
// block's first thread did not call PdlWait.
struct BlockTraceRecord {
  uint64_t grid_id, start, wait0, wait1, end;
  uint64_t mark[kBlockTraceMarks];  // PG_TRACE_MARK(i) times (0: not passed)
  uint64_t clk_start, clk_end;      // clock64 of the SM at start / end (SM clock = d clk / d t)
  uint32_t block, blocks;
  uint16_t tag, sm;
  uint32_t threads;
};

struct BlockTraceBuffer {
  unsigned count, capacity;
  unsigned pad[2];
  BlockTraceRecord records[1];  // [capacity]
};

using BlockTraceSetter = void (*)(BlockTraceBuffer*);
// Called at static initialisation by every translation unit that includes block_trace.cuh.
void RegisterBlockTraceUnit(BlockTraceSetter set);

// True when this build records (PEREGRINE_BLOCK_TRACE).
bool BlockTraceCompiled();
// Allocates room for `capacity` records (once) and points every unit at it; zeroes the count.
void BlockTraceStart(unsigned capacity);
// Copies the records made since BlockTraceStart back (synchronises the device).
std::vector<BlockTraceRecord> BlockTraceCollect();
// Writes records as CSV (tag,grid_id,block,blocks,threads,sm,start,wait0,wait1,end,m0..m3,
// clk_start,clk_end).
void BlockTraceWriteCsv(const std::vector<BlockTraceRecord>& records, const std::string& path);

}  // namespace pg::cuda
