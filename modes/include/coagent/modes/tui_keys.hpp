#pragma once
// The key decoder of the terminal UI: splits terminal input into the keys the UI handles itself
// and runs of input for the line editor. A small state machine, no terminal.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent::tui {

/// Splits terminal input into the keys the UI handles itself and runs of input for the line
/// editor (libedit decodes those: arrows, Home/End, Alt+b, …). A lone ESC is only known to be
/// one when no byte follows soon: the shell calls flush() after a short timeout.
class key_decoder {
  public:
    struct key {
        enum class kind {
            editor,   ///< code points for the line editor (one complete key or text run)
            escape,   ///< a lone Esc
            enter,    ///< CR
            newline,  ///< insert a line break: Ctrl+J, Alt+Enter, Shift+Enter (CSI 13;2u)
            ctrl_c,
            ctrl_d,
            ctrl_z,
            ctrl_t,  ///< toggle the thinking blocks (folded / expanded), as the reference's ctrl+t
            paste,   ///< bracketed paste (ESC[200~ … ESC[201~): text, CR/CRLF → LF
            up,      ///< Up arrow (the shell moves between input lines or through history)
            down,
            tab,  ///< Tab (the shell completes a slash command, or gives it to the editor)
        };
        kind type = kind::editor;
        std::u32string chars;  ///< editor / paste
    };

    /// Feeds bytes; appends the complete keys to `out`.
    void feed(std::string_view bytes, std::vector<key>& out);
    /// No more bytes came: a pending lone ESC is an Esc key (an unfinished sequence is dropped;
    /// an unfinished UTF-8 sequence becomes U+FFFD). Inside a paste nothing is flushed.
    void flush(std::vector<key>& out);
    /// Bytes are held waiting for the rest of a sequence (arm the ESC timeout).
    bool pending() const noexcept { return !buf_.empty() && !in_paste_; }
    bool in_paste() const noexcept { return in_paste_; }

    /// Escape sequences passed to the editor; the shell binds them to editor functions.
    /// Others (unknown CSI / SS3 sequences) are dropped, so they never become text.
    static const std::vector<std::pair<std::string, std::string>>& editor_bindings();

  private:
    void parse(std::vector<key>& out, bool at_end);
    void emit_editor(std::vector<key>& out, char32_t c);

    std::string buf_;
    bool in_paste_ = false;
    std::string paste_;
};

}  // namespace coagent::tui
