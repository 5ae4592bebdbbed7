// Logging through spdlog. One process-wide logger named "peregrine", to stderr.
// Use: PG_LOG_INFO("loaded {} tensors", n);
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace pg {
// Sets the level from a name: trace, debug, info, warn, error, off. Unknown -> info.
void SetLogLevel(std::string_view level);
spdlog::logger& Logger();
}  // namespace pg

#define PG_LOG_DEBUG(...) ::pg::Logger().debug(__VA_ARGS__)
#define PG_LOG_INFO(...) ::pg::Logger().info(__VA_ARGS__)
#define PG_LOG_WARN(...) ::pg::Logger().warn(__VA_ARGS__)
#define PG_LOG_ERROR(...) ::pg::Logger().error(__VA_ARGS__)
