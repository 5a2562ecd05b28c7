// Fuzz target: a session file (JSONL) as `coagent --session FILE` / `--continue` loads it,
// then one more entry appended to it and the file loaded again.
// Invariants: a file that is not a session file is a runtime_error naming it; a loaded one
// rebuilds its context without failing, takes an append (after a torn tail too), and loads
// again with exactly one more entry, the new one last. Each message cut to fit a short line
// (fit_message, issue 16) fits it, or keeps only the marker when its other fields alone do not.

#include "fuzz_support.hpp"
#include "known_bugs.hpp"

#include <boost/json/parse.hpp>

#include <coagent/session/history.hpp>

using namespace coagent;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // known bug: a number beyond int64 in a message is undefined behaviour (message.cpp get_int)
    for (std::string_view rest = fuzz::as_text(data, size); !rest.empty();) {
        const auto nl = rest.find('\n');
        boost::system::error_code ec;
        const auto v = json::parse(rest.substr(0, nl), ec);
        if (!ec && fuzz::skip_huge_numbers(v)) return 0;
        if (nl == std::string_view::npos) break;
        rest.remove_prefix(nl + 1);
    }
    const auto file = fuzz::write_scratch("session.jsonl", data, size);
    std::size_t entries = 0;
    {
        std::optional<session_history::loaded> l;
        try {
            l.emplace(session_history::load(file));
        } catch (const std::system_error& e) {
            FUZZ_CHECK(false);  // the file exists and is writable: not an I/O error
        } catch (const std::runtime_error& e) {
            FUZZ_CHECK(std::string_view(e.what()).starts_with(file.string()));
            return 0;
        }
        auto& h = l->history;
        entries = h.entries().size();
        const auto ctx = h.context();
        const auto msgs = h.messages();
        FUZZ_CHECK(msgs.size() <= entries);
        for (const auto& m : ctx) FUZZ_CHECK(m != nullptr);
        for (const auto& m : msgs) {
            const message cut = fit_message(*m, 300);
            std::string line;
            append_json(line, cut);
            FUZZ_CHECK(line.size() <= 300 ||
                       (cut.content.size() == 1 &&
                        std::get<text_block>(cut.content[0]).text.ends_with(" bytes not stored]")));
        }
        for (const auto& w : l->warnings) FUZZ_CHECK(w.starts_with(file.string()));
        auto m = std::make_shared<message>(make_user_message("appended by the fuzzer"));
        FUZZ_CHECK(!h.append_message(m));
    }
    auto again = session_history::load(file);
    FUZZ_CHECK(again.history.entries().size() == entries + 1);
    const auto& last = again.history.entries().back();
    FUZZ_CHECK(last.msg && text_of(*last.msg) == "appended by the fuzzer");
    return 0;
}
