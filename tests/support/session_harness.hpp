#pragma once
// Drives an agent_session on a manual clock: no real time, no threads. Every event is kept as
// the JSON object RPC mode would write, so tests assert exact sequences.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/runtime/manual_clock.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace coagent::test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

inline settings default_settings() {
    return settings{};
}

struct harness {
    asio::io_context io;
    std::shared_ptr<faux_provider> faux;
    std::unique_ptr<agent_session> session;
    std::vector<json::object> events;
    std::vector<std::string> requests_at;  // virtual time (ms) of each request, via faux count
    subscription sub;
    std::optional<prompt_result> result;
    std::exception_ptr failure;

    explicit harness(const std::string& script, settings cfg = default_settings(),
                     std::function<void(session_options&)> tweak = {}) {
        manual_clock::reset();
        faux_options fo;
        fo.script = faux_script::parse(script, "<test>");
        fo.clock = clock_kind::manual;
        fo.stream_idle_timeout_ms = cfg.provider.stream_idle_timeout_ms;
        faux = std::make_shared<faux_provider>(std::move(fo));
        session_options so;
        so.executor = io.get_executor();
        so.model_provider = faux;
        so.config = cfg;
        so.clock = clock_kind::manual;
        so.now_ms = [] { return std::int64_t{1'700'000'000'000}; };
        if (tweak) tweak(so);
        session = std::make_unique<agent_session>(std::move(so));
        sub = session->subscribe([this](const event& e) { events.push_back(to_json(e)); });
    }

    /// Starts a prompt; runs everything that is ready now.
    void prompt(std::string text, streaming_behavior b = streaming_behavior::none) {
        asio::co_spawn(io, session->prompt(std::move(text), b),
                       [this](std::exception_ptr e, prompt_result r) {
                           if (e) failure = e;
                           result = std::move(r);
                       });
        run_ready();
    }

    /// Starts a second prompt whose result goes to `out`.
    void prompt_into(std::string text, streaming_behavior b, std::optional<prompt_result>& out) {
        asio::co_spawn(io, session->prompt(std::move(text), b),
                       [&out, this](std::exception_ptr e, prompt_result r) {
                           if (e) failure = e;
                           out = std::move(r);
                       });
        run_ready();
    }

    /// Starts a prompt and runs ready handlers one at a time until an event of `type` was
    /// emitted (to act between two handlers, e.g. before a posted continue runs).
    void prompt_until(std::string text, std::string_view type) {
        asio::co_spawn(io, session->prompt(std::move(text)),
                       [this](std::exception_ptr e, prompt_result r) {
                           if (e) failure = e;
                           result = std::move(r);
                       });
        for (int i = 0; i < 1000 && of(type).empty(); ++i) {
            io.restart();
            io.run_one();
        }
        if (failure) std::rethrow_exception(failure);
    }

    void run_ready() {
        for (int i = 0; i < 1000; ++i) {
            io.restart();
            if (io.poll() == 0) break;
        }
        if (failure) std::rethrow_exception(failure);
    }

    /// Moves virtual time forward by `d` in 1 ms steps, running what became ready after each
    /// step, so a timer armed by a handler starts from the virtual time it was armed at.
    void advance(std::chrono::milliseconds d) {
        for (auto i = d.count(); i > 0; --i) {
            manual_clock::advance(std::chrono::milliseconds(1));
            run_ready();
        }
    }

    bool done() const { return result.has_value(); }

    std::vector<std::string> types() const {
        std::vector<std::string> t;
        for (const auto& e : events) t.emplace_back(e.at("type").as_string());
        return t;
    }
    /// The events of one type, in order.
    std::vector<json::object> of(std::string_view type) const {
        std::vector<json::object> out;
        for (const auto& e : events)
            if (e.at("type").as_string() == type) out.push_back(e);
        return out;
    }
    std::vector<faux_request> requests() const { return faux->requests(); }
};

inline json::object obj(std::string_view s) {
    return json::parse(s).as_object();
}

/// The event types of `events` with message roles folded in ("message_end:assistant:error").
inline std::vector<std::string> brief(const std::vector<json::object>& events) {
    std::vector<std::string> out;
    for (const auto& e : events) {
        std::string t(e.at("type").as_string());
        if (t == "message_update") continue;
        if (t == "message_start" || t == "message_end") {
            const auto& m = e.at("message").as_object();
            t += ":" + std::string(m.at("role").as_string());
            if (auto* sr = m.if_contains("stopReason"); sr && t.starts_with("message_end"))
                t += ":" + std::string(sr->as_string());
        }
        if (t == "agent_end") t += e.at("willRetry").as_bool() ? "{retry}" : "{final}";
        if (t == "auto_retry_start") t += "{" + std::to_string(e.at("attempt").as_int64()) + "}";
        if (t == "auto_retry_end")
            t += std::string("{") + (e.at("success").as_bool() ? "ok," : "fail,") +
                 std::to_string(e.at("attempt").as_int64()) + "}";
        out.push_back(std::move(t));
    }
    return out;
}

}  // namespace coagent::test
