// Incremental parser for Server-Sent Events (the WHATWG "text/event-stream" format), as
// streamed by OpenAI-compatible servers: "data: {json}\n\n" events ending in "data: [DONE]".
//
// Bytes arrive in arbitrary pieces (TCP segments, HTTP chunks): a line, a CRLF pair or a
// field name may be split across Feed() calls. The parser keeps the unfinished line and the
// event being assembled; an event is dispatched on an empty line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pg::bench {

struct SseEvent {
  std::string event;  // value of the "event:" field; empty means the default "message"
  std::string data;   // "data:" lines joined with '\n' (no trailing newline)
  std::string id;     // value of the last "id:" field in the event, if any
};

class SseParser {
 public:
  // Parses `bytes` and appends every event completed by them to *out.
  void Feed(std::string_view bytes, std::vector<SseEvent>* out);
  // End of stream: a final event not followed by a blank line is still dispatched (servers
  // that close right after the last "data:" line); a partial last line counts as a line.
  void Finish(std::vector<SseEvent>* out);
  // Bytes held that do not yet form a complete line.
  size_t buffered_bytes() const { return line_.size(); }

 private:
  void ProcessLine(std::string_view line, std::vector<SseEvent>* out);
  void Dispatch(std::vector<SseEvent>* out);

  std::string line_;          // the current, unterminated line
  bool skip_lf_ = false;      // last byte seen was '\r': a following '\n' belongs to it
  bool has_data_ = false;     // current_ has at least one data line
  bool bom_checked_ = false;  // a UTF-8 BOM at stream start is ignored
  SseEvent current_;
};

}  // namespace pg::bench
