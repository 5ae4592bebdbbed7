// JSON mode's token table (runtime/json_constraint.h) from a tokenizer: every id's raw bytes,
// its special flag, and the end-of-sequence ids (the given ones, e.g. the engine's, joined with
// the tokenizer's). Built once per served model; O(vocabulary).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "runtime/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace pg::engine {

std::shared_ptr<const runtime::TokenTable> MakeTokenTable(const tokenizer::Tokenizer& tokenizer,
                                                          std::span<const int32_t> eos_ids);

}  // namespace pg::engine
