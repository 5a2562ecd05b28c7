#pragma once
// Loopback fixtures for the HTTP tests: coagent-fakellm's server in process on the test's
// io_context (real sockets, port chosen by the OS), an http_provider pointed at it, and a runner
// that drives the io_context until a condition holds, with a real-time safety cap so a hang
// fails instead of stalling CI.

#include <coagent/providers/fakellm.hpp>
#include <coagent/providers/http_provider.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace coagent::test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// Records what a provider reported while streaming.
struct recording_observer final : stream_observer {
    int starts = 0;
    std::vector<std::string> deltas;
    void on_message_start(const message&) override { ++starts; }
    void on_text_delta(const message&, std::string_view d) override { deltas.emplace_back(d); }
};

struct loopback {
    asio::io_context io;
    std::unique_ptr<fakellm::server> server;

    explicit loopback(const std::string& script, fakellm::server_options opts = {}) {
        opts.steps = fakellm::script::parse(script, "<test>");
        server = std::make_unique<fakellm::server>(io.get_executor(), std::move(opts));
        server->start();
    }
    ~loopback() {
        if (server) server->stop();
        io.restart();
        io.poll();  // let the server's coroutines see the stop
    }

    std::string base_url(const std::string& scheme = "http") const {
        return scheme + "://127.0.0.1:" + std::to_string(server->port()) + "/v1";
    }

    /// Runs the io_context until `done()` or the cap (real time) is reached; false on the cap.
    bool run_until(const std::function<bool()>& done, std::chrono::milliseconds cap = 20s) {
        const auto deadline = std::chrono::steady_clock::now() + cap;
        io.restart();
        while (!done()) {
            if (std::chrono::steady_clock::now() >= deadline) return false;
            io.run_one_for(20ms);
            if (io.stopped()) io.restart();
        }
        return true;
    }

    http_provider_options options(http_protocol::api_kind api,
                                  std::string key = "sk-test-0001") const {
        http_provider_options o;
        o.api = api;
        o.base_url = base_url();
        o.model = model_info{"fake", "fake-model", std::string(http_protocol::to_string(api)),
                             32000, 4096};
        o.model.image_input = true;  // "input":["text","image"]
        o.api_key = std::move(key);
        return o;
    }

    /// One provider call, run to completion.
    message stream_once(http_provider& p, const provider_request& req, recording_observer& obs,
                        abort_signal& abort, std::function<void()> after_start = {}) {
        message out;
        out.role = message_role::assistant;
        bool done = false;
        std::exception_ptr failure;
        asio::co_spawn(io, p.stream(req, out, obs, abort), [&](std::exception_ptr e) {
            failure = e;
            done = true;
        });
        if (after_start) after_start();
        if (!run_until([&] { return done; }))
            throw std::runtime_error("provider call did not complete in time");
        if (failure) std::rethrow_exception(failure);
        return out;
    }
};

inline provider_request simple_request(const model_info& m, std::string text = "hi",
                                       std::string system = "be brief") {
    provider_request r;
    r.model = m;
    r.system_prompt = std::move(system);
    r.messages.push_back(std::make_shared<message>(make_user_message(std::move(text))));
    r.session_id = "session-1";
    return r;
}

/// A fresh directory under the system temp dir, removed at scope exit.
struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        std::random_device rd;
        path = std::filesystem::temp_directory_path() /
               ("coagent-http-test-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

}  // namespace coagent::test
