// Fuzz target: the SSE parser (WHATWG event-stream rules, bounded event size).
// Invariants: any chunking of the bytes dispatches the same events as feeding them whole
// (CR/LF split across chunks, a BOM split across chunks); no event is larger than the limit;
// once event_too_large is reported it stays so and nothing more is dispatched.

#include "fuzz_support.hpp"

#include <coagent/providers/sse_parser.hpp>

using namespace coagent;

namespace {

struct run {
    std::vector<sse_event> events;
    sse_parser::status status = sse_parser::status::ok;
};

run parse(std::string_view data, const std::vector<std::size_t>& chunks, std::size_t limit) {
    sse_parser p(limit);
    run r;
    std::size_t pos = 0;
    for (std::size_t n : chunks) {
        const auto before = r.events.size();
        const auto s = p.feed(data.substr(pos, n), [&](const sse_event& e) {
            FUZZ_CHECK(e.data.size() + e.type.size() <= limit);
            r.events.push_back(e);
        });
        pos += n;
        if (r.status == sse_parser::status::event_too_large) {
            FUZZ_CHECK(s == sse_parser::status::event_too_large);
            FUZZ_CHECK(r.events.size() == before);
        }
        r.status = s;
        FUZZ_CHECK(p.state() == s);
        FUZZ_CHECK(p.events() == r.events.size());
    }
    p.finish();
    return r;
}

bool same(const run& a, const run& b) {
    if (a.status != b.status || a.events.size() != b.events.size()) return false;
    for (std::size_t i = 0; i < a.events.size(); ++i) {
        const auto &x = a.events[i], &y = b.events[i];
        if (x.type != y.type || x.data != y.data || x.id != y.id || x.retry_ms != y.retry_ms)
            return false;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);
    for (std::size_t limit : {std::size_t{48}, sse_parser::default_max_event_bytes}) {
        const run whole = parse(text, {size}, limit);
        if (limit == sse_parser::default_max_event_bytes)
            FUZZ_CHECK(whole.status == sse_parser::status::ok);
        // the limit is checked on the line being read too, so an over-long line is caught
        // as early as the bytes arrive, but the outcome and the events before it are the same
        FUZZ_CHECK(same(whole, parse(text, std::vector<std::size_t>(size, 1), limit)));
        FUZZ_CHECK(same(whole, parse(text, fuzz::chunking(text, 17), limit)));
    }
    return 0;
}
