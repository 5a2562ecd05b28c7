#pragma once
// prometheus_telemetry: the telemetry observer as Prometheus metrics (prometheus-cpp core), the
// names of docs/observability.md. One instance serves any number of sessions, on any threads
// (prometheus-cpp's metrics are atomic, its families lock to add a label set); its registry is
// what an HTTP server's `/metrics` serializes (text()).

#include <coagent/session/telemetry.hpp>

#include <memory>
#include <string>

namespace prometheus {
class Registry;
}

namespace coagent {

class prometheus_telemetry final : public telemetry {
  public:
    /// Registers the coagent_* families in `registry` (a new one when null).
    explicit prometheus_telemetry(std::shared_ptr<prometheus::Registry> registry = nullptr);
    ~prometheus_telemetry() override;
    prometheus_telemetry(const prometheus_telemetry&) = delete;
    prometheus_telemetry& operator=(const prometheus_telemetry&) = delete;

    const std::shared_ptr<prometheus::Registry>& registry() const noexcept;
    /// The registry in the Prometheus text exposition format (version 0.0.4).
    std::string text() const;

    /// coagent_sessions_parked: set by the embedder (sessions it keeps idle in memory).
    void set_sessions_parked(double n);
    /// coagent_retry_budget_refusals_total{provider}: for an embedder's retry budget.
    void budget_refusal(std::string_view provider);

    void prompt_end(std::int64_t t_ns, prompt_result::status outcome) override;
    void chat_end(std::int64_t t_ns, const telemetry_chat& c) override;
    void attempt_end(std::int64_t t_ns, const telemetry_attempt& a) override;
    void retry(std::int64_t t_ns, const telemetry_retry& r) override;
    void backoff_start(std::int64_t t_ns) override;
    void backoff_end(std::int64_t t_ns, std::int64_t elapsed_ms) override;
    void credential_switch(std::int64_t t_ns, std::string_view provider, bool switched) override;
    void fallback(std::int64_t t_ns, std::string_view from, std::string_view to) override;

  private:
    struct families;
    std::unique_ptr<families> f_;
};

}  // namespace coagent
