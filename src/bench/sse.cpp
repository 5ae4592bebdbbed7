#include "bench/sse.h"

namespace pg::bench {

void SseParser::Feed(std::string_view bytes, std::vector<SseEvent>* out) {
  if (!bom_checked_) {
    // The BOM may itself be split: wait until 3 bytes (or a non-BOM prefix) are known.
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    std::string probe = line_ + std::string(bytes.substr(0, 3));
    if (probe.size() < 3 && kBom.substr(0, probe.size()) == probe) {
      line_ = probe;
      return;
    }
    bom_checked_ = true;
    if (probe.compare(0, 3, kBom) == 0) {
      size_t held = line_.size();
      line_.clear();
      bytes.remove_prefix(3 - held);
    }
  }
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      skip_lf_ = (c == '\r');
      ProcessLine(line_, out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::Finish(std::vector<SseEvent>* out) {
  if (!line_.empty()) {
    ProcessLine(line_, out);
    line_.clear();
  }
  Dispatch(out);
}

void SseParser::ProcessLine(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {
    Dispatch(out);
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive pings)
  std::string_view field = line;
  std::string_view value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) current_.data.push_back('\n');
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event.assign(value);
  } else if (field == "id") {
    current_.id.assign(value);
  }
  // "retry" and unknown fields are ignored, as the format requires.
}

void SseParser::Dispatch(std::vector<SseEvent>* out) {
  if (has_data_) out->push_back(std::move(current_));
  current_ = SseEvent{};
  has_data_ = false;
}

}  // namespace pg::bench
