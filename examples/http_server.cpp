// An HTTP server embedding coagent (Boost.Beast): every `POST /prompt` drives one session turn
// on a shared io_context, so many sessions run concurrently — while half of them wait out a
// retry backoff, the others keep being served. The logic is examples/prompt_server.hpp.
//
//   $ http_server --port 8080 --base-delay-ms 1000 &
//   listening 127.0.0.1:8080
//   $ curl -s -d 'hi' 127.0.0.1:8080/prompt        # the first request meets a 503, retried after 1
//   s
//   {"reply":"You said: hi","retries":1,"outcome":"succeeded","request":0}
//   $ curl -s 127.0.0.1:8080/stats
//   $ curl -s 127.0.0.1:8080/metrics               # Prometheus: coagent_retries_total{…} 1, …
//
// Loopback only. SIGINT / SIGTERM stop it gracefully (requests in progress are answered first).
// examples/load_client.cpp is the load test (ctest example_http_server_load).

#include "prompt_server.hpp"

#include <CLI/CLI.hpp>

#include <boost/asio/signal_set.hpp>

#include <cstdio>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    CLI::App app{"coagent example: one session turn per POST /prompt"};
    unsigned short port = 0;
    int threads = 1;
    coagent_example::server_options opts;
    bool no_failures = false;
    app.add_option("--port", port, "port on 127.0.0.1 (0: the OS picks one)");
    app.add_option("--base-delay-ms", opts.base_delay_ms, "retry.baseDelayMs of every session")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--threads", threads, "threads running the io_context")
        ->check(CLI::Range(1, 64));
    app.add_flag("--no-failures", no_failures,
                 "no 503 on the first attempt of every other request");
    CLI11_PARSE(app, argc, argv);
    opts.fail_every_other = !no_failures;
    opts.metrics = std::make_shared<coagent::prometheus_telemetry>();

    namespace asio = boost::asio;
    asio::io_context io(threads);
    coagent_example::prompt_server server(io, {asio::ip::address_v4::loopback(), port}, opts);
    server.start();
    std::printf("listening 127.0.0.1:%u\n", static_cast<unsigned>(server.local_endpoint().port()));
    std::fflush(stdout);

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
        if (!ec) server.stop();
    });

    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back([&io] { io.run(); });
    io.run();
    for (auto& t : pool) t.join();

    const auto& s = server.stats();
    std::fprintf(stderr, "http_server: %llu requests, %llu retries, peak %lld in flight\n",
                 static_cast<unsigned long long>(s.requests.load()),
                 static_cast<unsigned long long>(s.retries.load()),
                 static_cast<long long>(s.peak_in_flight.load()));
    return 0;
}
