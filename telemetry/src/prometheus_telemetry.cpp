#include <coagent/telemetry/prometheus_telemetry.hpp>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <initializer_list>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace coagent {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// A family's metrics by label values, found without building a prometheus::Labels (a map of
// strings) and without the family's own hashing of it: one key string per thread, reused.
template <typename Metric>
class cached {
  public:
    cached(Family<Metric>& f, std::vector<std::string> names)
        : family_(f), names_(std::move(names)) {}

    Metric& get(std::initializer_list<std::string_view> values) {
        thread_local std::string key;
        key.clear();
        for (const auto v : values) {
            key.append(v);
            key.push_back('\x1f');
        }
        std::lock_guard lock(mutex_);
        if (const auto it = metrics_.find(key); it != metrics_.end()) return *it->second;
        prometheus::Labels labels;
        std::size_t i = 0;
        for (const auto v : values) labels.emplace(names_[i++], std::string(v));
        Metric& m = family_.Add(labels);
        metrics_.emplace(key, &m);
        return m;
    }

  private:
    Family<Metric>& family_;
    std::vector<std::string> names_;
    std::mutex mutex_;
    std::unordered_map<std::string, Metric*> metrics_;
};

}  // namespace

struct prometheus_telemetry::families {
    std::shared_ptr<prometheus::Registry> reg;
    Family<Counter>& prompts;
    Family<Counter>& chats;
    Family<Counter>& attempts;
    Family<Counter>& retries;
    Family<Counter>& credential_switches;
    Family<Counter>& fallbacks;
    Family<Counter>& budget_refusals;
    Family<Histogram>& chat_duration;
    Family<Histogram>& backoff;
    Family<Histogram>& attempts_per_chat;
    Family<Gauge>& in_backoff;
    Family<Gauge>& parked;
    Family<Counter>& tokens;
    Family<Counter>& cost;
    Histogram& chat_duration_h;
    Histogram& backoff_h;
    Histogram& attempts_per_chat_h;
    Gauge& in_backoff_g;
    Gauge& parked_g;
    cached<Counter> prompts_c{prompts, {"outcome"}};
    cached<Counter> chats_c{chats, {"provider", "model", "outcome"}};
    cached<Counter> attempts_c{attempts, {"provider", "model", "result"}};
    cached<Counter> retries_c{retries, {"provider", "model", "limit"}};
    cached<Counter> credential_switches_c{credential_switches, {"provider"}};
    cached<Counter> fallbacks_c{fallbacks, {"from", "to"}};
    cached<Counter> budget_refusals_c{budget_refusals, {"provider"}};
    cached<Counter> tokens_c{tokens, {"provider", "model", "type", "use"}};
    cached<Counter> cost_c{cost, {"provider", "model", "use"}};

    explicit families(std::shared_ptr<prometheus::Registry> r)
        : reg(std::move(r)),
          prompts(BuildCounter()
                      .Name("coagent_prompts_total")
                      .Help("Prompts by outcome (succeeded, failed, aborted, refused)")
                      .Register(*reg)),
          chats(BuildCounter()
                    .Name("coagent_chats_total")
                    .Help("Model calls (GenAI chat operations, retries included) by outcome")
                    .Register(*reg)),
          attempts(BuildCounter()
                       .Name("coagent_attempts_total")
                       .Help("Provider requests by result (ok, aborted, the limit, other)")
                       .Register(*reg)),
          retries(BuildCounter()
                      .Name("coagent_retries_total")
                      .Help("Retries decided, by limit")
                      .Register(*reg)),
          credential_switches(BuildCounter()
                                  .Name("coagent_credential_switches_total")
                                  .Help("Usage limits that switched to another credential")
                                  .Register(*reg)),
          fallbacks(BuildCounter()
                        .Name("coagent_fallbacks_total")
                        .Help("Model fallbacks (retry.fallbackChains)")
                        .Register(*reg)),
          budget_refusals(BuildCounter()
                              .Name("coagent_retry_budget_refusals_total")
                              .Help("Retries a retry budget refused")
                              .Register(*reg)),
          chat_duration(BuildHistogram()
                            .Name("coagent_chat_duration_seconds")
                            .Help("Model call duration, retries and waits included")
                            .Register(*reg)),
          backoff(BuildHistogram()
                      .Name("coagent_backoff_seconds")
                      .Help("Time spent in one backoff wait")
                      .Register(*reg)),
          attempts_per_chat(BuildHistogram()
                                .Name("coagent_attempts_per_chat")
                                .Help("Provider requests per model call")
                                .Register(*reg)),
          in_backoff(BuildGauge()
                         .Name("coagent_sessions_in_backoff")
                         .Help("Sessions waiting to retry now")
                         .Register(*reg)),
          parked(BuildGauge()
                     .Name("coagent_sessions_parked")
                     .Help("Sessions kept idle in memory")
                     .Register(*reg)),
          tokens(BuildCounter()
                     .Name("coagent_tokens_total")
                     .Help("Tokens by type and use (wasted: spent on attempts that failed)")
                     .Register(*reg)),
          cost(BuildCounter()
                   .Name("coagent_cost_total")
                   .Help("Cost by use (wasted: spent on attempts that failed)")
                   .Register(*reg)),
          // the OpenTelemetry GenAI buckets of gen_ai.client.operation.duration
          chat_duration_h(chat_duration.Add(
              {}, Histogram::BucketBoundaries{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
                                              5.12, 10.24, 20.48, 40.96, 81.92})),
          backoff_h(backoff.Add(
              {}, Histogram::BucketBoundaries{0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 60, 120, 300})),
          attempts_per_chat_h(
              attempts_per_chat.Add({}, Histogram::BucketBoundaries{1, 2, 3, 4, 5, 6, 8, 10})),
          in_backoff_g(in_backoff.Add({})),
          parked_g(parked.Add({})) {}
};

prometheus_telemetry::prometheus_telemetry(std::shared_ptr<prometheus::Registry> registry)
    : f_(std::make_unique<families>(registry ? std::move(registry)
                                             : std::make_shared<prometheus::Registry>())) {}

prometheus_telemetry::~prometheus_telemetry() = default;

const std::shared_ptr<prometheus::Registry>& prometheus_telemetry::registry() const noexcept {
    return f_->reg;
}

std::string prometheus_telemetry::text() const {
    return prometheus::TextSerializer().Serialize(f_->reg->Collect());
}

void prometheus_telemetry::set_sessions_parked(double n) {
    f_->parked_g.Set(n);
}

void prometheus_telemetry::budget_refusal(std::string_view provider) {
    f_->budget_refusals_c.get({provider}).Increment();
}

void prometheus_telemetry::prompt_end(std::int64_t, prompt_result::status outcome) {
    f_->prompts_c.get({to_string(outcome)}).Increment();
}

void prometheus_telemetry::chat_end(std::int64_t t_ns, const telemetry_chat& c) {
    f_->chats_c.get({c.model.provider, c.model.model, c.ok ? "ok" : "error"}).Increment();
    f_->chat_duration_h.Observe(static_cast<double>(t_ns - c.start_ns) / 1e9);
    f_->attempts_per_chat_h.Observe(c.attempts);
}

void prometheus_telemetry::attempt_end(std::int64_t, const telemetry_attempt& a) {
    const std::string_view p = a.model.provider;
    const std::string_view m = a.model.model;
    f_->attempts_c.get({p, m, a.result}).Increment();
    const std::string_view use = a.wasted ? "wasted" : "useful";
    const auto add_tokens = [&](std::string_view type, std::int64_t n) {
        if (n > 0) f_->tokens_c.get({p, m, type, use}).Increment(static_cast<double>(n));
    };
    add_tokens("input", a.usage.input);
    add_tokens("output", a.usage.output);
    add_tokens("cacheRead", a.usage.cache_read);
    add_tokens("cacheWrite", a.usage.cache_write);
    if (a.usage.cost.total > 0) f_->cost_c.get({p, m, use}).Increment(a.usage.cost.total);
}

void prometheus_telemetry::retry(std::int64_t, const telemetry_retry& r) {
    f_->retries_c.get({r.model.provider, r.model.model, to_string(r.limit)}).Increment();
}

void prometheus_telemetry::backoff_start(std::int64_t) {
    f_->in_backoff_g.Increment();
}

void prometheus_telemetry::backoff_end(std::int64_t, std::int64_t elapsed_ms) {
    f_->in_backoff_g.Decrement();
    f_->backoff_h.Observe(static_cast<double>(elapsed_ms) / 1e3);
}

void prometheus_telemetry::credential_switch(std::int64_t, std::string_view provider,
                                             bool switched) {
    if (switched) f_->credential_switches_c.get({provider}).Increment();
}

void prometheus_telemetry::fallback(std::int64_t, std::string_view from, std::string_view to) {
    f_->fallbacks_c.get({from, to}).Increment();
}

}  // namespace coagent
