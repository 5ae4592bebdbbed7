// Shared machinery of the streaming tool-call parsers (internal to pg::parsers).
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/parsers/json_call_scanner.h"
#include "tokenizer/parsers/tool_call_parser.h"

namespace pg::parsers::detail {

// A parser is a state machine over buf_ (received, not yet consumed text). Step() consumes a
// prefix of buf_ and returns true when it made progress; Feed() runs it to a fixed point.
class StreamingToolParser : public ToolCallParser {
 public:
  ParsedDelta Feed(std::string_view text) final;
  ParsedDelta Finish() final;

 protected:
  virtual bool Step() = 0;
  // Called once at end of output, after Step() stopped making progress.
  virtual void FinishState() = 0;

  void EmitContent(std::string_view text);
  void BeginCall(std::string id, std::string name);
  void AppendArguments(std::string_view text);
  // Streams scanner progress: opens the call once the name is known, then argument bytes.
  void PumpScanner(JsonCallScanner& scanner, bool& opened);

  std::string buf_;
  bool finishing_ = false;  // true inside Finish(): no more text will come

 private:
  ParsedDelta out_;
  int current_ = -1;  // index of the call whose arguments are being streamed
};

bool StartsWith(std::string_view s, std::string_view prefix);
size_t SkipSpace(std::string_view s, size_t pos = 0);

}  // namespace pg::parsers::detail
