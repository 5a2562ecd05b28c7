// Fuzz target: settings.json as read from $COAGENT_DIR (settings_store::load), and the
// read-modify-write of persist_global on it (what the RPC set_auto_retry does).
// Invariants: a bad file is a settings_error naming the file; a good one loads, and persisting
// retry.enabled keeps every other key (unknown ones too) and the warnings; a file that cannot
// be used is never overwritten.

#include "fuzz_support.hpp"
#include "known_bugs.hpp"

#include <coagent/session/settings_store.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <fstream>
#include <sstream>

using namespace coagent;
namespace json = boost::json;

namespace {
std::string read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::clear_scratch();
    const auto file = fuzz::write_scratch("settings.json", data, size);
    const auto project = fuzz::scratch_dir() / "project" / "settings.json";  // missing: empty layer
    const std::string label = file.string();
    std::optional<settings_store> store;
    try {
        store = settings_store::load(file, project);
    } catch (const settings_error& e) {
        FUZZ_CHECK(e.file == label);
        FUZZ_CHECK(std::string_view(e.what()).starts_with(label));
        FUZZ_CHECK(!e.expected.empty());
        return 0;
    }
    for (const auto& w : store->warnings()) FUZZ_CHECK(w.file == label);
    // the file as parsed before the write (what must be kept)
    auto parse_file = [](const std::string& text) {
        std::string_view t = text;
        if (t.starts_with("\xEF\xBB\xBF")) t.remove_prefix(3);
        boost::system::error_code ec;
        auto v = json::parse(t, ec);
        return !ec && v.is_object() ? std::optional<json::object>(v.get_object()) : std::nullopt;
    };
    const auto before = parse_file(read(file));
    if (before && fuzz::skip_non_finite(*before)) return 0;  // known bug: persisted as Infinity
    const auto warnings = store->warnings();
    const bool enabled = store->current().retry.enabled;
    try {
        store->persist_global("retry.enabled", json::value(!enabled));
    } catch (const settings_error& e) {
        // the file loaded, so it can be used: persisting must work
        std::fprintf(stderr, "persist_global failed on a file that loaded: %s\n", e.what());
        FUZZ_CHECK(read(file) == fuzz::as_text(data, size));  // and it was not overwritten
        FUZZ_CHECK(false);
    }
    FUZZ_CHECK(store->current().retry.enabled == !enabled);
    const auto again = settings_store::load(file, project);
    FUZZ_CHECK(again.current().retry.enabled == !enabled);
    // every other key kept as found (unknown ones, flat "a.b" ones, and retry's other keys)
    const auto after = parse_file(read(file));
    FUZZ_CHECK(after.has_value());
    if (before) {
        for (const auto& kv : *before) {
            if (kv.key() != "retry") {
                FUZZ_CHECK(after->contains(kv.key()) &&
                           fuzz::same_json(after->at(kv.key()), kv.value()));
            } else if (kv.value().is_object()) {
                for (const auto& r : kv.value().get_object())
                    if (r.key() != "enabled")
                        FUZZ_CHECK(
                            after->at("retry").as_object().contains(r.key()) &&
                            fuzz::same_json(after->at("retry").as_object().at(r.key()), r.value()));
            }
        }
    }
    FUZZ_CHECK(again.warnings().size() == warnings.size());
    return 0;
}
