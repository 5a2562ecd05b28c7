#pragma once
// span_telemetry: the telemetry observer as span records, one JSON line per finished prompt,
// chat and attempt, through an spdlog logger (docs/observability.md "Span records"):
//   {"ts","name","trace_id","span_id","parent_span_id","start_unix_nano","end_unix_nano",
//    "status":"ok"|"error","attributes":{…}}
// It holds the open spans of one session: give each session its own instance (they may share
// the logger). make_trace_file_logger() opens a file for `--trace-file` / telemetry.traceFile.

#include <coagent/session/telemetry.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace coagent {

class span_telemetry final : public telemetry {
  public:
    /// `random64`: the id source (default: a PRNG seeded from std::random_device).
    explicit span_telemetry(std::shared_ptr<spdlog::logger> out,
                            std::function<std::uint64_t()> random64 = {});
    ~span_telemetry() override;

    void prompt_start(std::int64_t t_ns) override;
    void prompt_end(std::int64_t t_ns, prompt_result::status outcome) override;
    void chat_start(std::int64_t t_ns, const telemetry_model& m) override;
    void chat_end(std::int64_t t_ns, const telemetry_chat& c) override;
    void attempt_start(std::int64_t t_ns, const telemetry_model& m, int resend_count) override;
    void attempt_end(std::int64_t t_ns, const telemetry_attempt& a) override;
    void retry(std::int64_t t_ns, const telemetry_retry& r) override;

  private:
    struct state;
    std::shared_ptr<spdlog::logger> out_;
    std::unique_ptr<state> st_;
};

/// A logger that writes each record as one line to `path` (appending; pattern "%v"), flushed
/// after every line.
std::shared_ptr<spdlog::logger> make_trace_file_logger(const std::string& path);

}  // namespace coagent
