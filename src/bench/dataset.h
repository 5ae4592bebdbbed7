// Multi-turn agentic conversations in the evalscope SWE-smith format:
//   {"conversations": [ [ {"messages": [{"role": "user", "content": "..."}, ...],
//                          "prompt_tokens": N}, ...turns ], ...conversations ] }
// Each turn holds only the DELTA messages of that turn (new user / tool output); the
// assistant replies are not stored: at replay time the server's actual reply is appended.
// "prompt_tokens" is the accumulated prompt size at that turn as measured when the file was
// built (informative only: the server's usage is what the metrics use).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pg::bench {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;  // plain text
};

struct Turn {
  std::vector<ChatMessage> messages;  // delta of this turn, never empty
  int64_t prompt_tokens = -1;         // accumulated prompt tokens recorded in the file; -1 if absent
};

struct Conversation {
  std::vector<Turn> turns;  // never empty
};

struct Dataset {
  std::vector<Conversation> conversations;
  int num_skipped_empty = 0;  // conversations with no turns in the source (evalscope skips them)
};

// Parses the evalscope format. `source` names the input in error messages. Throws
// pg::Error(kMalformed) naming the conversation/turn/message index on any structural error.
// Message content may be a string or a list of {"type": "text", "text": ...} parts (joined
// with '\n', as evalscope does).
Dataset ParseEvalscopeJson(std::string_view json_text, std::string_view source);
// Reads and parses a file; a missing file is pg::Error(kNotFound).
Dataset LoadEvalscopeFile(const std::string& path);
// Serialises to the same format (so a synthetic dataset can be saved and replayed by evalscope).
std::string DatasetToEvalscopeJson(const Dataset& dataset);

}  // namespace pg::bench
