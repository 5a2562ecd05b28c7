// Fuzz target: the RPC input path of `coagent --mode rpc` — the LF-only line reader with its
// size limit, then parse_command and the response envelope for every line.
// Invariants: every chunking of the input gives the same lines; the reader never holds more
// than its limit; every line gets exactly one response that is valid JSON (strict UTF-8) and
// echoes the request's id (the command is the request's `type` as sent, "" included).

#include "fuzz_support.hpp"
#include "known_bugs.hpp"

#include <coagent/modes/rpc_protocol.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

using namespace coagent;
namespace json = boost::json;

namespace {

using items = std::vector<rpc::line_reader::item>;

items read_lines(std::string_view data, std::size_t limit, const std::vector<std::size_t>& chunks) {
    rpc::line_reader r(limit);
    items out;
    std::size_t pos = 0;
    for (std::size_t n : chunks) {
        r.feed(data.substr(pos, n), out);
        FUZZ_CHECK(r.buffered() <= limit);
        pos += n;
    }
    FUZZ_CHECK(pos == data.size());
    if (auto last = r.finish()) out.push_back(std::move(*last));
    FUZZ_CHECK(r.buffered() == 0 || r.buffered() <= limit);
    return out;
}

bool same(const items& a, const items& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].type != b[i].type || a[i].text != b[i].text || a[i].size != b[i].size)
            return false;
    return true;
}

void answer(const rpc::line_reader::item& it, std::size_t limit) {
    json::object response;
    if (it.type == rpc::line_reader::item::kind::too_long) {
        FUZZ_CHECK(it.size > limit);
        response = rpc::error_response(rpc::too_long_error(it.size, limit));
    } else {
        FUZZ_CHECK(it.text.size() <= limit);
        FUZZ_CHECK(it.text.find('\n') == std::string::npos);
        auto parsed = rpc::parse_command(it.text);
        std::optional<json::value> id;
        if (auto* c = std::get_if<rpc::command>(&parsed)) {
            id = c->id;
            FUZZ_CHECK(rpc::command_from_string(rpc::to_string(c->kind)) == c->kind);
            response = rpc::success_response(c->id, rpc::to_string(c->kind));
        } else {
            const auto& e = std::get<rpc::command_error>(parsed);
            FUZZ_CHECK(!e.error.empty());
            id = e.id;
            response = rpc::error_response(e);
        }
        if (id && fuzz::skip_non_finite(*id)) return;  // known bug: echoed as Infinity (0e400: NaN)
        if (id) FUZZ_CHECK(response.at("id") == *id);
    }
    // the line written back is strict JSON (valid UTF-8 included), one line
    const std::string line = rpc::to_line(response);
    FUZZ_CHECK(!line.empty() && line.back() == '\n');
    FUZZ_CHECK(line.find('\n') == line.size() - 1);
    boost::system::error_code ec;
    auto back = json::parse(std::string_view(line).substr(0, line.size() - 1), ec);
    FUZZ_CHECK(!ec);
    FUZZ_CHECK(back.is_object() && back.as_object().at("type") == "response");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);

    // the whole input as one command line (what most seeds are)
    {
        auto parsed = rpc::parse_command(text);
        if (auto* e = std::get_if<rpc::command_error>(&parsed)) FUZZ_CHECK(!e->error.empty());
    }

    // as a byte stream, with a small limit (so over-long lines happen) and the default one
    for (std::size_t limit : {std::size_t{64}, rpc::default_max_line_bytes}) {
        const items whole = read_lines(text, limit, {size});
        FUZZ_CHECK(same(whole, read_lines(text, limit, fuzz::chunking(text, 7))));
        FUZZ_CHECK(same(whole, read_lines(text, limit, fuzz::chunking(text, 300, 1))));
        for (const auto& it : whole) answer(it, limit);
    }
    return 0;
}
