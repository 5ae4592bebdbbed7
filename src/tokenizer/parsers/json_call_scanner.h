// Incremental scanner for one JSON object of the shape {"name": N, "arguments"|"parameters": V}
// as emitted inside tool-call markup. It consumes bytes until the object closes and exposes the
// function name as soon as its string is complete, and the raw bytes of V as they arrive, so
// argument text can be streamed before the object is finished.
// Invariant: arguments bytes are exactly the bytes of V in the input (object/array/number
// values); a string-valued V is decoded once complete (some models quote the arguments).
#pragma once

#include <string>
#include <string_view>

namespace pg::parsers {

class JsonCallScanner {
 public:
  // Consumes bytes of `text`; returns how many were consumed (< size only once done()).
  size_t Feed(std::string_view text);
  bool started() const { return depth_ > 0 || done_; }
  bool done() const { return done_; }
  // The first non-space byte was not '{': the input is not a JSON object.
  bool failed() const { return failed_; }
  bool has_name() const { return has_name_; }
  const std::string& name() const { return name_; }
  // Argument bytes that arrived since the previous call.
  std::string TakeArguments();
  // Every byte consumed so far (for falling back to plain content).
  const std::string& raw() const { return raw_; }

 private:
  void EndValue();

  std::string raw_;
  std::string name_;
  std::string args_pending_;
  std::string key_;         // current key at depth 1 (raw, unescaped enough for ASCII keys)
  std::string value_raw_;   // raw text of a string value at depth 1 (name / quoted arguments)
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool expecting_key_ = true;
  bool in_key_ = false;
  bool in_value_ = false;      // after ':' at depth 1, until ',' or '}' at depth 1
  bool value_is_args_ = false;
  bool value_is_name_ = false;
  bool args_quoted_ = false;   // arguments given as a JSON string
  bool value_begun_ = false;
  bool has_name_ = false;
  bool done_ = false;
  bool failed_ = false;
};

}  // namespace pg::parsers
