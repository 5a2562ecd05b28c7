// coagent-fakellm: a scripted fake LLM server on 127.0.0.1 speaking the OpenAI chat-completions,
// OpenAI Responses and Anthropic Messages streaming APIs, for tests and demos of the retry policy
// (docs/fakellm.md).

#include <coagent/providers/fakellm.hpp>

#include <CLI/CLI.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
    CLI::App app{
        "coagent-fakellm — a scripted fake LLM server (OpenAI chat-completions, OpenAI Responses "
        "and Anthropic Messages, streamed) on 127.0.0.1",
        "coagent-fakellm"};
    app.set_version_flag("--version", std::string("coagent-fakellm ") + COAGENT_VERSION);
    app.footer(
        "Prints `listening 127.0.0.1:<port>` as its first stdout line, then serves until SIGINT or "
        "SIGTERM.\nScript steps (one per request, in order): "
        "{\"status\":N,\"headers\"?:{},\"body\"?:JSON|TEXT}, "
        "{\"text\":T,\"chunks\"?:N,\"usage\"?:{}}, {\"text\":T,\"cutAfterChunks\":N}, "
        "{\"text\":T,\"stallAfterChunks\":N,\"stallMs\":M}, "
        "{\"sseError\":{\"type\":T,\"message\":M}}, "
        "{\"toolCall\":{\"name\":N,\"arguments\":{}}}; any step may carry \"times\", "
        "\"delayMs\" and \"forConversations\":[from,to], streamed steps \"chunkDelayMs\". "
        "See docs/fakellm.md.\nExit codes: 0 stopped by a signal; 2 bad flags or script; 1 cannot "
        "listen.");

    int port = 0;
    std::string script_arg, log_file, tls_cert, tls_key;
    std::string host = "127.0.0.1";
    app.add_option("--port", port, "TCP port; 0 lets the OS choose (default)")
        ->check(CLI::Range(0, 65535));
    app.add_option("--script", script_arg, "The script: a JSON array inline, or a file holding one")
        ->required();
    app.add_option("--log", log_file, "Append one JSON line per request received to FILE");
    app.add_option("--host", host, "Address to listen on (default 127.0.0.1)");
    app.add_option("--tls-cert", tls_cert,
                   "Serve https with this PEM certificate chain (needs --tls-key)");
    app.add_option("--tls-key", tls_key, "The PEM private key of --tls-cert");
    bool per_conversation = false;
    app.add_flag("--per-conversation", per_conversation,
                 "Every conversation (keyed by its first user message) plays the script from its "
                 "own start (default: one script for all requests, in arrival order)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "coagent-fakellm: " << e.what() << "\n\n" << app.help() << std::flush;
        return 2;
    }

    coagent::fakellm::server_options o;
    try {
        o.steps = coagent::fakellm::script::from_argument(script_arg);
    } catch (const coagent::fakellm::script_error& e) {
        std::cerr << "coagent-fakellm: " << e.what() << "\n";
        return 2;
    }
    o.port = static_cast<std::uint16_t>(port);
    o.bind_address = host;
    o.per_conversation = per_conversation;
    if (!log_file.empty()) o.log_file = log_file;
    if (!tls_cert.empty()) o.tls_cert_file = tls_cert;
    if (!tls_key.empty()) o.tls_key_file = tls_key;
    if (o.tls_cert_file.has_value() != o.tls_key_file.has_value()) {
        std::cerr << "coagent-fakellm: --tls-cert and --tls-key go together\n";
        return 2;
    }

    boost::asio::io_context io(1);
    std::optional<coagent::fakellm::server> srv;
    try {
        srv.emplace(io.get_executor(), std::move(o));
    } catch (const std::exception& e) {
        std::cerr << "coagent-fakellm: " << e.what() << "\n";
        return 1;
    }
    srv->start();
    std::printf("listening %s:%u\n", host.c_str(), static_cast<unsigned>(srv->port()));
    std::fflush(stdout);

    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
        if (!ec) srv->stop();
    });
    std::signal(SIGPIPE, SIG_IGN);
    io.run();
    return 0;
}
