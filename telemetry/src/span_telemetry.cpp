#include <coagent/telemetry/span_telemetry.hpp>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/basic_file_sink.h>

#include <chrono>
#include <ctime>
#include <random>

namespace coagent {

namespace json = boost::json;

struct span_telemetry::state {
    std::function<std::uint64_t()> random64;
    std::string trace_id;  // of the open prompt (or of a chat outside any prompt)
    std::string prompt_span;
    std::int64_t prompt_start = 0;
    std::string chat_span;
    std::string chat_trace;
    std::string chat_parent;
    std::string attempt_span;
    // the chat's retries, as its attributes
    int retries = 0;
    std::int64_t delay_ms = 0;
    std::string last_rule;
    std::string last_limit;

    std::string id64() { return fmt::format("{:016x}", random64()); }
    std::string id128() {
        const std::uint64_t hi = random64();
        return fmt::format("{:016x}{:016x}", hi, random64());
    }
};

namespace {

std::string iso_time(std::int64_t ns) {
    const std::time_t secs = static_cast<std::time_t>(ns / 1'000'000'000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900,
                       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                       (ns / 1'000'000) % 1000);
}

void write(spdlog::logger& out, std::string_view name, const std::string& trace,
           const std::string& span, const std::string& parent, std::int64_t start, std::int64_t end,
           bool ok, json::object attributes) {
    json::object r;
    r["ts"] = iso_time(end);
    r["name"] = name;
    r["trace_id"] = trace;
    r["span_id"] = span;
    r["parent_span_id"] = parent;
    r["start_unix_nano"] = start;
    r["end_unix_nano"] = end;
    r["status"] = ok ? "ok" : "error";
    r["attributes"] = std::move(attributes);
    out.info("{}", json::serialize(r));
}

}  // namespace

span_telemetry::span_telemetry(std::shared_ptr<spdlog::logger> out,
                               std::function<std::uint64_t()> random64)
    : out_(std::move(out)), st_(std::make_unique<state>()) {
    if (!random64) {
        auto gen = std::make_shared<std::mt19937_64>(std::random_device{}());
        random64 = [gen] { return (*gen)(); };
    }
    st_->random64 = std::move(random64);
}

span_telemetry::~span_telemetry() = default;

void span_telemetry::prompt_start(std::int64_t t_ns) {
    st_->trace_id = st_->id128();
    st_->prompt_span = st_->id64();
    st_->prompt_start = t_ns;
}

void span_telemetry::prompt_end(std::int64_t t_ns, prompt_result::status outcome) {
    if (st_->prompt_span.empty()) return;
    json::object a;
    a["coagent.prompt.outcome"] = to_string(outcome);
    write(*out_, "prompt", st_->trace_id, st_->prompt_span, "", st_->prompt_start, t_ns,
          outcome == prompt_result::status::succeeded, std::move(a));
    st_->prompt_span.clear();
}

void span_telemetry::chat_start(std::int64_t, const telemetry_model&) {
    if (st_->prompt_span.empty()) {  // a chat outside a prompt (a manual compaction's summary)
        st_->chat_trace = st_->id128();
        st_->chat_parent.clear();
    } else {
        st_->chat_trace = st_->trace_id;
        st_->chat_parent = st_->prompt_span;
    }
    st_->chat_span = st_->id64();
    st_->retries = 0;
    st_->delay_ms = 0;
    st_->last_rule.clear();
    st_->last_limit.clear();
}

void span_telemetry::chat_end(std::int64_t t_ns, const telemetry_chat& c) {
    json::object a;
    a["gen_ai.operation.name"] = "chat";
    a["gen_ai.provider.name"] = std::string(c.model.provider);
    a["gen_ai.request.model"] = std::string(c.model.model);
    if (!c.ok) a["error.type"] = std::string(c.error_type);
    a["coagent.retry.attempt"] = st_->retries;
    if (st_->retries > 0) {
        a["coagent.retry.delay_ms"] = st_->delay_ms;
        a["coagent.retry.rule"] = st_->last_rule;
        a["coagent.retry.limit"] = st_->last_limit;
    }
    write(*out_, "chat " + std::string(c.model.model), st_->chat_trace, st_->chat_span,
          st_->chat_parent, c.start_ns, t_ns, c.ok, std::move(a));
}

void span_telemetry::attempt_start(std::int64_t, const telemetry_model&, int) {
    st_->attempt_span = st_->id64();
}

void span_telemetry::attempt_end(std::int64_t t_ns, const telemetry_attempt& at) {
    json::object a;
    a["gen_ai.provider.name"] = std::string(at.model.provider);
    a["gen_ai.request.model"] = std::string(at.model.model);
    a["http.request.resend_count"] = at.resend_count;
    a["gen_ai.usage.input_tokens"] = at.usage.input;
    a["gen_ai.usage.output_tokens"] = at.usage.output;
    if (at.wasted) {
        a["error.type"] = std::string(at.result);
        a["coagent.tokens.wasted"] =
            at.usage.input + at.usage.output + at.usage.cache_read + at.usage.cache_write;
    }
    write(*out_, "attempt", st_->chat_trace, st_->attempt_span, st_->chat_span, at.start_ns, t_ns,
          !at.wasted, std::move(a));
}

void span_telemetry::retry(std::int64_t, const telemetry_retry& r) {
    st_->retries = r.attempt;
    st_->delay_ms += r.delay_ms;
    st_->last_rule = std::string(r.rule);
    st_->last_limit = std::string(to_string(r.limit));
}

std::shared_ptr<spdlog::logger> make_trace_file_logger(const std::string& path) {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    auto l = std::make_shared<spdlog::logger>("coagent-trace", std::move(sink));
    l->set_pattern("%v");
    l->flush_on(spdlog::level::info);
    return l;
}

}  // namespace coagent
