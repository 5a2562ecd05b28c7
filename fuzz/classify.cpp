// Fuzz target: the error classifier and the retry-hint parser on hostile error texts (RE2
// patterns, dated hints, saturating arithmetic).
// Invariants: a decision names its rule; retryable() agrees with the kind; hints are never
// negative; the `coagent classify` JSON is strict JSON; the same text gives the same answer.

#include "fuzz_support.hpp"

#include <coagent/classify/classify.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <climits>

using namespace coagent;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);
    static constexpr std::int64_t nows[] = {0, 1'700'000'000'000, INT64_MAX, INT64_MIN, -1};
    for (std::int64_t now : nows) {
        const auto hint = parse_retry_hint(text, now);
        if (hint) FUZZ_CHECK(*hint >= 0);
        FUZZ_CHECK(parse_retry_hint(text, now) == hint);
    }
    static constexpr int statuses[] = {0, 200, 400, 408, 413, 429, 500, 503, 529, 599};
    const classification plain = classify_error_text(text, std::nullopt, 1'700'000'000'000);
    for (std::optional<int> status :
         {std::optional<int>{}, std::optional<int>{INT_MIN}, std::optional<int>{INT_MAX}}) {
        const auto c = classify_error_text(text, status, 1'700'000'000'000);
        FUZZ_CHECK(!c.rule.empty());
    }
    for (int status : statuses) {
        const auto c = classify_error_text(text, status, 1'700'000'000'000);
        FUZZ_CHECK(!c.rule.empty());
        FUZZ_CHECK(c.retryable() ==
                   (c.kind == error_kind::retryable || c.kind == error_kind::usage_limit));
        if (c.retry_after_ms) FUZZ_CHECK(*c.retry_after_ms >= 0);
        const std::string j = json::serialize(to_json(c));
        boost::system::error_code ec;
        (void)json::parse(j, ec);
        FUZZ_CHECK(!ec);
    }
    FUZZ_CHECK(classify_error_text(text, std::nullopt, 1'700'000'000'000).rule == plain.rule);

    // the same text as an assistant error message, through the spec's gate
    message m;
    m.role = message_role::assistant;
    m.stop = stop_reason::error;
    m.error_message = std::string(text);
    const model_info model{"p", "m", "openai-completions", 128000, 4096};
    const auto c = classify(m, model, 1'700'000'000'000);
    FUZZ_CHECK(c.kind == plain.kind);
    return 0;
}
