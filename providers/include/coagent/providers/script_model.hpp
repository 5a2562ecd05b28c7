#pragma once
// The script model of the two fakes, the faux provider and coagent-fakellm: a script is a list
// of steps played in order, one step a request, each answering `times` requests, with its
// faults in time (`delayMs` before the answer, a `stallMs` silence mid-stream) and a tool call
// as one kind of reply. Each fake has its own syntax (faux_provider.hpp, fakellm.hpp) that
// parses into this model. Header-only: coagent::fakellm links neither runtime nor session.

#include <boost/json/object.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent::scripted {

/// A malformed script: what() names the source (file or inline), the position or the step.
class script_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// What a step of either script has.
struct step_base {
    std::string text;                    ///< the reply (or error) text
    std::string tool_name;               ///< a tool call: its name
    boost::json::object tool_arguments;  ///< a tool call: its arguments
    int times = 1;                       ///< how many requests the step answers
    std::int64_t delay_ms = 0;           ///< wait before answering
    std::int64_t stall_ms = 0;           ///< silence mid-stream
};

/// Where a script stands: which step answers the next request.
class cursor {
  public:
    /// The step of the next request (a step answers `times` requests, then the next one
    /// does), or nullptr when the script has run out.
    template <class Step>
    const Step* next(const std::vector<Step>& steps) noexcept {
        if (index_ >= steps.size()) return nullptr;
        const Step& s = steps[index_];
        if (++repeat_ >= s.times) {
            ++index_;
            repeat_ = 0;
        }
        return &s;
    }

  private:
    std::size_t index_ = 0;
    int repeat_ = 0;
};

/// A reply's text as both fakes stream it by default: one word a chunk, each word with the
/// space before it ("a b" -> "a", " b").
inline std::vector<std::string_view> split_words(std::string_view text) {
    std::vector<std::string_view> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t next = text.find(' ', pos + 1);
        if (next == std::string_view::npos) next = text.size();
        out.push_back(text.substr(pos, next - pos));
        pos = next;
    }
    return out;
}

/// Throws script_error "<source>: step <index + 1>: <what>".
[[noreturn]] inline void step_error(const std::string& source, std::size_t index,
                                    const std::string& what) {
    throw script_error(source + ": step " + std::to_string(index + 1) + ": " + what);
}

/// A script of `Step`s in the syntax `Syntax`, which provides
/// `static std::vector<Step> parse_steps(std::string_view text, const std::string& source)`,
/// `inline_name` (the source of an inline script) and `cannot_read` (the error text for a file
/// that cannot be read).
template <class Step, class Syntax>
struct basic_script {
    std::vector<Step> steps;

    /// Parses script JSON; `source` names it in errors.
    static basic_script parse(std::string_view json_text, const std::string& source) {
        return basic_script{Syntax::parse_steps(json_text, source)};
    }
    /// `arg` is inline JSON when it starts with '[' (after blanks), else a file path.
    static basic_script from_argument(const std::string& arg) {
        const auto first = arg.find_first_not_of(" \t\r\n");
        if (first != std::string::npos && arg[first] == '[')
            return parse(arg, std::string(Syntax::inline_name));
        std::ifstream in(arg, std::ios::binary);
        if (!in)
            throw script_error(arg + ": " + std::string(Syntax::cannot_read) + ": " +
                               std::strerror(errno));
        std::stringstream ss;
        ss << in.rdbuf();
        return parse(ss.str(), arg);
    }
};

}  // namespace coagent::scripted
