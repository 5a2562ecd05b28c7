// The terminal layer of interactive mode: raw terminal, libedit as the line-editing engine,
// key input on an Asio stream_descriptor, SIGWINCH, and the bottom-region renderer. Every
// decision (what Esc does, what the loader says, what is queued) is tui_controller's.
//
// libedit runs on a private pseudo-terminal: it keeps its termios handling and its key maps
// (arrows, Home/End, word moves, kill/yank, history) but never touches the user's terminal,
// and its own drawing goes to /dev/null. The characters it edits come from key_decoder
// through EL_GETCFN; the input rows are drawn here from el_wline(), like every other row.

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <coagent/modes/interactive_mode.hpp>
#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/tui_keys.hpp>
#include <coagent/modes/tui_layout.hpp>
#include <coagent/modes/tui_screen.hpp>
#include <coagent/modes/tui_text.hpp>
#include <coagent/runtime/json_input.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <histedit.h>

#include <fcntl.h>
#include <langinfo.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include <cerrno>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace coagent {

// terminfo lives at the end of this file: <term.h> defines macros named like common words
tui::terminal_caps load_terminfo_caps(bool& found);
void release_terminfo();

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using tui::row_style;
using tui::screen_row;

constexpr auto esc_timeout = 60ms;  // a lone ESC: no further byte within this time

// ---- the terminal --------------------------------------------------------------------------

class terminal {
  public:
    terminal() = default;
    terminal(const terminal&) = delete;
    terminal& operator=(const terminal&) = delete;
    ~terminal() { leave(); }

    /// Raw input (no echo, no line buffering, no signals from keys, CR stays CR), output
    /// post-processing kept; bracketed paste on.
    void enter() {
        if (::tcgetattr(STDIN_FILENO, &saved_) != 0)
            throw config_error(std::string("interactive mode: cannot read the terminal mode: ") +
                               std::strerror(errno));
        entered_ = true;
        raw();
        write("\x1b[?2004h");  // bracketed paste
    }
    void raw() {
        termios t = saved_;
        t.c_iflag &= ~static_cast<tcflag_t>(ICRNL | INLCR | IGNCR | IXON | ISTRIP | BRKINT);
        t.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG | IEXTEN);
        t.c_cc[VMIN] = 1;
        t.c_cc[VTIME] = 0;
        ::tcsetattr(STDIN_FILENO, TCSADRAIN, &t);
    }
    void cooked() {
        if (entered_) ::tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_);
    }
    void leave() {
        if (!entered_) return;
        write("\x1b[?2004l\x1b[0m\x1b[?25h");
        cooked();
        entered_ = false;
    }

    /// Columns and rows (80×24 when the terminal does not say).
    std::pair<int, int> size() const {
        winsize ws{};
        if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
            return {ws.ws_col, ws.ws_row};
        return {80, 24};
    }

    /// Writes everything (stdout may share a non-blocking file description with stdin).
    void write(std::string_view s) {
        while (!s.empty()) {
            const ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
            if (n > 0) {
                s.remove_prefix(static_cast<std::size_t>(n));
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                pollfd p{STDOUT_FILENO, POLLOUT, 0};
                ::poll(&p, 1, 1000);
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else {
                return;  // the terminal is gone
            }
        }
    }

  private:
    termios saved_{};
    bool entered_ = false;
};

// ---- libedit on a private pseudo-terminal ----------------------------------------------------

class line_editor {
  public:
    line_editor() = default;
    line_editor(const line_editor&) = delete;
    line_editor& operator=(const line_editor&) = delete;
    ~line_editor() { close(); }

    void open() {
        master_ = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master_ < 0 || ::grantpt(master_) != 0 || ::unlockpt(master_) != 0)
            fail("cannot create a pseudo-terminal for the line editor");
        const char* name = ::ptsname(master_);
        if (!name) fail("cannot name the line editor's pseudo-terminal");
        const int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (slave < 0) fail("cannot open the line editor's pseudo-terminal");
        in_ = ::fdopen(slave, "r");
        const int slave_out = ::dup(slave);
        out_ = slave_out >= 0 ? ::fdopen(slave_out, "w") : nullptr;
        null_ = std::fopen("/dev/null", "we");
        if (!in_ || !out_ || !null_) fail("cannot open the line editor's streams");
        el_ = ::el_init("coagent", in_, out_, null_);
        if (!el_) fail("libedit el_init failed");
        // libedit draws its line to /dev/null: the rows are drawn from el_wline()
        ::el_set(el_, EL_SETFP, 1, null_);
        ::el_set(el_, EL_SETFP, 2, null_);
        ::el_set(el_, EL_EDITOR, "emacs");
        ::el_set(el_, EL_CLIENTDATA, static_cast<void*>(this));
        ::el_wset(el_, EL_GETCFN, &line_editor::getc_fn);
        hist_ = ::history_winit();
        HistEventW ev;
        ::history_w(hist_, &ev, H_SETSIZE, 1000);
        ::history_w(hist_, &ev, H_SETUNIQUE, 1);
        ::el_wset(el_, EL_HIST, ::history_w, hist_);
        for (const auto& [seq, fn] : tui::key_decoder::editor_bindings())
            ::el_set(el_, EL_BIND, seq.c_str(), fn.c_str(), nullptr);
        // libedit functions that draw their own prompt inside the line (incremental search,
        // extended commands) would leave it in the text: plain history search instead
        ::el_set(el_, EL_BIND, "^R", "ed-search-prev-history", nullptr);
        ::el_set(el_, EL_BIND, "^S", "ed-search-next-history", nullptr);
        ::el_set(el_, EL_BIND, "^[x", "ed-unassigned", nullptr);
        ::el_set(el_, EL_BIND, "^[X", "ed-unassigned", nullptr);
        ::el_set(el_, EL_UNBUFFERED, 1);
    }

    void close() {
        if (el_) ::el_end(el_);
        el_ = nullptr;
        if (hist_) ::history_wend(hist_);
        hist_ = nullptr;
        if (in_) std::fclose(in_);
        if (out_) std::fclose(out_);
        if (null_) std::fclose(null_);
        in_ = out_ = null_ = nullptr;
        if (master_ >= 0) ::close(master_);
        master_ = -1;
    }

    /// Lets libedit edit with these characters (one key or a run of text).
    void feed(std::u32string_view chars) {
        queue_.assign(chars.begin(), chars.end());
        pos_ = 0;
        while (pos_ < queue_.size()) {
            const std::size_t before = pos_;
            int n = 0;
            ::el_wgets(el_, &n);
            if (pos_ == before) break;  // nothing consumed: never spin
        }
        queue_.clear();
        pos_ = 0;
    }

    /// Inserts text at the cursor (paste, a line break).
    void insert(std::u32string_view text) {
        if (text.empty()) return;
        std::wstring w(text.begin(), text.end());
        ::el_winsertstr(el_, w.c_str());
    }

    void clear() { ::el_reset(el_); }

    std::u32string text() const {
        const LineInfoW* li = ::el_wline(el_);
        return std::u32string(li->buffer, li->lastchar);
    }
    std::size_t cursor() const {
        const LineInfoW* li = ::el_wline(el_);
        return static_cast<std::size_t>(li->cursor - li->buffer);
    }
    void move_cursor(long delta) {
        if (delta != 0) ::el_cursor(el_, static_cast<int>(delta));
    }
    void remember(const std::u32string& line) {
        HistEventW ev;
        std::wstring w(line.begin(), line.end());
        ::history_w(hist_, &ev, H_ENTER, w.c_str());
    }

  private:
    [[noreturn]] void fail(const char* what) {
        const std::string msg =
            std::string("interactive mode: ") + what + ": " + std::strerror(errno);
        close();
        throw config_error(msg);
    }

    static int getc_fn(EditLine* el, wchar_t* c) {
        void* data = nullptr;
        ::el_get(el, EL_CLIENTDATA, &data);
        auto* self = static_cast<line_editor*>(data);
        if (!self || self->pos_ >= self->queue_.size()) return 0;  // never block: "end of input"
        *c = static_cast<wchar_t>(self->queue_[self->pos_++]);
        return 1;
    }

    EditLine* el_ = nullptr;
    HistoryW* hist_ = nullptr;
    int master_ = -1;
    FILE* in_ = nullptr;
    FILE* out_ = nullptr;
    FILE* null_ = nullptr;
    std::u32string queue_;
    std::size_t pos_ = 0;
};

std::string to_utf8(std::u32string_view s) {
    std::string out;
    for (char32_t c : s) tui::append_utf8(out, c);
    return out;
}

std::u32string to_u32(std::string_view s) {
    std::u32string out;
    for (std::size_t p = 0; p < s.size();) out.push_back(tui::decode_utf8(s, p));
    return out;
}

// ---- the UI ----------------------------------------------------------------------------------

class interactive_ui {
  public:
    explicit interactive_ui(app_context& app)
        : app_(app), io_(app.io()), in_(io_), esc_timer_(io_), tick_timer_(io_), signals_(io_) {}

    interactive_ui(const interactive_ui&) = delete;
    interactive_ui& operator=(const interactive_ui&) = delete;

    int run() {
        // the session's warnings go to $COAGENT_DIR/coagent.log: stderr would draw over the screen
        std::shared_ptr<spdlog::logger> log;
        const auto log_path = app_.dir() / "coagent.log";
        try {
            log = std::make_shared<spdlog::logger>(
                "coagent", std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_path.string()));
        } catch (const spdlog::spdlog_ex& e) {
            throw config_error("cannot open the log file " + log_path.string() + ": " + e.what());
        }
        log_ = log;
        session_ =
            app_.make_session(true, std::move(log));  // config_error → exit 2, terminal untouched
        editor_.open();

        bool have_terminfo = false;
        tui::terminal_caps caps = load_terminfo_caps(have_terminfo);
        screen_.emplace(std::move(caps));
        printer_.set_markdown(app_.settings_layers().current().tui.markdown &&
                              !app_.options().no_markdown);
        ctl_.set_thinking_expanded(app_.settings_layers().current().tui.expand_thinking);
        printer_.set_thinking_expanded(ctl_.thinking_expanded());
        std::tie(width_, height_) = term_.size();

        const model_info m = session_->model();
        ctl_.set_model_label(model_selector(m));
        update_totals();
        ctl_.set_usage(session_->usage());
        ctl_.set_auto_retry_state(session_->auto_retry_enabled());
        const std::string why = app_.choice() ? " (" + app_.choice()->reason + ")" : "";
        ctl_.add_notice("coagent \u2014 " + m.provider + "/" + m.id + why +
                        ". Enter sends, Esc interrupts, Ctrl+C twice or Ctrl+D exits.");
        show_history();
        sub_ = session_->subscribe([this](const event& e) { on_event(e); });

        const int in_fd = open_input();
        term_.enter();
        in_.assign(in_fd);

        signals_.add(SIGWINCH);
        signals_.add(SIGTERM);
        signals_.add(SIGHUP);
        signals_.add(SIGINT);
        arm_signals();

        render(false);
        if (session_->open_park_in_history()) launch_resume_park();  // --continue of a park
        if (app_.options().message) {  // MESSAGE (its error lines, if any, drawn at once)
            perform(ctl_.on_enter(*app_.options().message));
            schedule_render();
        }
        asio::co_spawn(io_, read_loop(), [this](std::exception_ptr e) {
            if (e) log_exception("reading the terminal", e);
            request_exit(exit_code_);
        });
        try {
            io_.run();
        } catch (...) {
            restore_terminal();
            throw;
        }
        restore_terminal();
        sub_.reset();
        return exit_code_;
    }

  private:
    // ---- set-up and tear-down ------------------------------------------------------------

    void show_history() {
        // a resumed session: its transcript as it was live (failed attempts, retry lines)
        for (const event& e : resumed_transcript_events(session_->history().entries()))
            ctl_.on_event(e, tui_controller::clock::now());
    }

    static int open_input() {
        // a file description of our own: O_NONBLOCK on it does not reach stdout or the shell
        const char* name = ::ttyname(STDIN_FILENO);
        int fd = name ? ::open(name, O_RDONLY | O_NOCTTY | O_CLOEXEC) : -1;
        if (fd < 0) fd = ::dup(STDIN_FILENO);
        if (fd < 0)
            throw config_error(std::string("interactive mode: cannot read the terminal: ") +
                               std::strerror(errno));
        return fd;
    }

    void restore_terminal() {
        if (restored_) return;
        restored_ = true;
        if (screen_) {
            std::string out = collect_and_render(true);
            out += screen_->clear_live();
            term_.write(out);
        }
        term_.leave();
        editor_.close();
        release_terminfo();
    }

    void log_exception(const char* what, const std::exception_ptr& e) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            errors_.push_back(std::string(what) + ": " + x.what());
        } catch (...) {
            errors_.push_back(std::string(what) + ": unknown exception");
        }
        ctl_.add_item(transcript_item::kind::error, "Internal error while " + errors_.back());
        schedule_render();
    }

    void arm_signals() {
        signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
            if (ec) return;
            if (sig == SIGWINCH) {
                on_resize();
                arm_signals();
                return;
            }
            request_exit(128 + sig);
        });
    }

    void request_exit(int code) {
        if (!exiting_) {
            exiting_ = true;
            exit_code_ = code;
            app_.stop_limits();
        }
        if (session_ && session_->parked_until()) {
            // a park is not cancelled by leaving: it stays open in the session file and
            // `coagent --continue` re-enters it (docs/tui.md)
            leave_parked_ = true;
        } else if (session_ && session_->is_busy()) {
            session_->abort();  // the running prompt settles soon
        }
        maybe_finish();
    }

    void maybe_finish() {
        if (!exiting_ || (tasks_ > 0 && !leave_parked_) || finished_) return;
        finished_ = true;
        if (leave_parked_) io_.stop();  // the parked prompt's timer would keep it running
        boost::system::error_code ec;
        in_.cancel(ec);
        in_.close(ec);
        esc_timer_.cancel();
        tick_timer_.cancel();
        signals_.cancel(ec);
    }

    // ---- input -----------------------------------------------------------------------------

    asio::awaitable<void> read_loop() {
        std::vector<char> buf(4096);
        for (;;) {
            auto [ec, n] = co_await in_.async_read_some(asio::buffer(buf),
                                                        asio::as_tuple(asio::use_awaitable));
            if (exiting_) co_return;
            if (n > 0) on_bytes(std::string_view(buf.data(), n));
            if (ec) {
                if (ec != asio::error::eof && ec != asio::error::operation_aborted)
                    errors_.push_back("reading the terminal: " + ec.message());
                co_return;  // end of input: leave
            }
        }
    }

    void on_bytes(std::string_view bytes) {
        ++esc_generation_;  // more bytes: a pending ESC timeout is void
        std::vector<tui::key_decoder::key> keys;
        keys_.feed(bytes, keys);
        for (const auto& k : keys) {
            handle_key(k);
            if (exiting_) return;
        }
        if (keys_.pending()) {
            const auto gen = esc_generation_;
            esc_timer_.expires_after(esc_timeout);
            esc_timer_.async_wait([this, gen](const boost::system::error_code& ec) {
                if (ec || gen != esc_generation_ || exiting_) return;
                std::vector<tui::key_decoder::key> late;
                keys_.flush(late);
                for (const auto& k : late) {
                    handle_key(k);
                    if (exiting_) return;
                }
                schedule_render();
            });
        }
        schedule_render();
    }

    void handle_key(const tui::key_decoder::key& k) {
        using kk = tui::key_decoder::key::kind;
        switch (k.type) {
            case kk::escape:
                perform(ctl_.on_escape());
                return;
            case kk::enter: {
                const std::u32string input = editor_.text();
                const tui_command c = ctl_.on_enter(to_utf8(input));
                if (c.consume) {  // a command or a pick: into the history, out of the input
                    editor_.remember(input);
                    editor_.clear();
                }
                perform(c);
                return;
            }
            case kk::ctrl_c:
                perform(ctl_.on_ctrl_c(editor_.text().empty(), tui_controller::clock::now()));
                return;
            case kk::tab: {
                const auto c = ctl_.on_tab(to_utf8(editor_.text()));
                if (c.type == tui_command::kind::edit)
                    editor_.feed(k.chars);
                else
                    perform(c);
                return;
            }
            case kk::ctrl_d: {
                const auto c = ctl_.on_ctrl_d(editor_.text().empty());
                if (c.type == tui_command::kind::edit) {
                    const char32_t eot = 0x04;
                    editor_.feed(std::u32string_view(&eot, 1));
                } else {
                    perform(c);
                }
                return;
            }
            case kk::ctrl_z:
                ctl_.on_other_key();
                suspend();
                return;
            case kk::ctrl_t:
                perform(ctl_.on_ctrl_t());
                return;
            case kk::newline: {
                ctl_.on_other_key();
                const char32_t nl = '\n';
                editor_.insert(std::u32string_view(&nl, 1));
                return;
            }
            case kk::paste: {
                ctl_.on_other_key();
                // a dropped image file (its path pasted): inserted as its @file attachment
                const auto path = tui::pasted_image_path(to_utf8(k.chars));
                std::error_code ec;
                if (path && std::filesystem::is_regular_file(*path, ec))
                    editor_.insert(to_u32(tui::attachment_token(*path) + " "));
                else
                    editor_.insert(k.chars);
                return;
            }
            case kk::up:
            case kk::down:
                ctl_.on_other_key();
                if (!move_between_lines(k.type == kk::up)) editor_.feed(k.chars);
                return;
            case kk::editor:
                ctl_.on_other_key();
                editor_.feed(k.chars);
                return;
        }
    }

    /// Up/Down inside a multi-line input move between its lines; at the first / last line they
    /// go through the history (libedit). Returns false to let libedit have the key.
    bool move_between_lines(bool up) {
        const std::u32string t = editor_.text();
        const std::size_t cur = std::min(editor_.cursor(), t.size());
        const std::size_t line_start = cur == 0 ? 0
                                                : (t.rfind(U'\n', cur - 1) == std::u32string::npos
                                                       ? 0
                                                       : t.rfind(U'\n', cur - 1) + 1);
        const std::size_t col = cur - line_start;
        if (up) {
            if (line_start == 0) return false;
            const std::size_t prev_end = line_start - 1;  // the '\n' ending the previous line
            const std::size_t p =
                prev_end == 0 ? std::u32string::npos : t.rfind(U'\n', prev_end - 1);
            const std::size_t prev_start = p == std::u32string::npos ? 0 : p + 1;
            const std::size_t target = prev_start + std::min(col, prev_end - prev_start);
            editor_.move_cursor(static_cast<long>(target) - static_cast<long>(cur));
            return true;
        }
        const std::size_t line_end = t.find(U'\n', cur);
        if (line_end == std::u32string::npos) return false;
        const std::size_t next_start = line_end + 1;
        const std::size_t next_end = std::min(t.find(U'\n', next_start), t.size());
        const std::size_t target = next_start + std::min(col, next_end - next_start);
        editor_.move_cursor(static_cast<long>(target) - static_cast<long>(cur));
        return true;
    }

    void perform(const tui_command& c) {
        switch (c.type) {
            case tui_command::kind::none:
            case tui_command::kind::edit:
                return;
            case tui_command::kind::abort:
                session_->abort();
                if (!c.restore.empty()) {  // the queued follow-ups, back into the input
                    const std::u32string now = editor_.text();
                    editor_.clear();
                    editor_.insert(to_u32(c.restore) + (now.empty() ? U"" : U"\n" + now));
                }
                return;
            case tui_command::kind::abort_retry:
                session_->abort_retry();
                return;
            case tui_command::kind::retry_now:
                session_->retry_now();
                return;
            case tui_command::kind::clear_input:
                editor_.clear();
                return;
            case tui_command::kind::submit: {
                if (!c.consume) {
                    editor_.remember(to_u32(c.text));
                    editor_.clear();
                }
                launch_prompt(c.text, c.join, std::exchange(next_images_, {}));
                return;
            }
            case tui_command::kind::attach:
                attach(c);
                return;
            case tui_command::kind::exit:
                request_exit(0);
                return;
            case tui_command::kind::set_auto_retry:
                set_auto_retry(c.enabled);
                return;
            case tui_command::kind::set_input:
                editor_.clear();
                editor_.insert(to_u32(c.text));
                return;
            case tui_command::kind::set_model:
                set_model(c.text);
                return;
            case tui_command::kind::new_session:
                replace_session(false);
                return;
            case tui_command::kind::resume:
                resume(c.text);
                return;
            case tui_command::kind::compact:
                launch_compact(c.text);
                return;
            case tui_command::kind::redraw: {  // Ctrl+T: the thinking blocks folded or whole
                printer_.set_thinking_expanded(ctl_.thinking_expanded());
                // kept for the next start, as the reference keeps hideThinkingBlock
                const std::string error =
                    app_.override_and_persist("tui.expandThinking", ctl_.thinking_expanded());
                if (!error.empty())
                    ctl_.add_item(transcript_item::kind::error,
                                  "Thinking blocks: saving tui.expandThinking failed: " + error);
                render(true);
                return;
            }
            case tui_command::kind::show_settings: {
                std::string text = "Retry settings (" +
                                   app_.settings_layers().global_file().string() + ", then " +
                                   app_.settings_layers().project_file().string() + "):";
                for (const auto& line : effective_retry_settings(app_.settings_layers()))
                    text += "\n  " + line;
                ctl_.add_notice(std::move(text));
                return;
            }
        }
    }

    /// Enter on a message with `@file` images: read them (a missing, unreadable, too large or
    /// non-image file is an error line naming it, and nothing is sent), then the submit.
    void attach(const tui_command& c) {
        std::vector<image_block> images;
        std::vector<std::string> errors;
        for (const auto& typed : c.attachments) {
            std::filesystem::path file = typed;
            if (typed.rfind("~/", 0) == 0)
                if (const char* home = std::getenv("HOME")) file = home + typed.substr(1);
            try {
                images.push_back(load_image_file(file, typed));
            } catch (const config_error& e) {
                errors.push_back(e.what());
            }
        }
        const tui_command next = ctl_.on_attachments_loaded(c.text, errors);
        if (next.type == tui_command::kind::submit) next_images_ = std::move(images);
        if (!errors.empty() && editor_.text() != to_u32(c.text)) {
            // `coagent MESSAGE` or /retry: the message comes into the input to be corrected
            editor_.clear();
            editor_.insert(to_u32(c.text));
        }
        perform(next);
    }

    /// /model provider/id, or the numbered list of the models with a key.
    void set_model(const std::string& selector) {
        if (selector.empty()) {
            std::vector<std::string> labels, values;
            const model_info now = session_->model();
            for (const auto& m : app_.catalog()->available()) {
                const std::string sel = m.provider + "/" + m.id;
                labels.push_back(
                    sel + (m.provider == now.provider && m.id == now.id ? "  (in use)" : ""));
                values.push_back(sel);
            }
            ctl_.begin_pick(tui_command::kind::set_model,
                            "Models (a number and Enter picks):", std::move(labels),
                            std::move(values));
            return;
        }
        const auto slash = selector.find('/');
        const std::string error =
            session_->set_model(selector.substr(0, slash), selector.substr(slash + 1));
        if (!error.empty()) {
            ctl_.add_item(transcript_item::kind::error, "Model not changed: " + error);
            return;
        }
        ctl_.set_model_label(model_selector(session_->model()));
        update_totals();
        ctl_.add_notice("Model: " + model_selector(session_->model()));
    }

    /// /new (resume false) or /resume's pick: the session replaced, the screen drawn again.
    void replace_session(bool resume) {
        if (session_->is_busy() || tasks_ > 0) {
            ctl_.add_item(transcript_item::kind::error,
                          "Wait for the current turn to end (or press Esc)");
            return;
        }
        std::unique_ptr<agent_session> next;
        try {
            next = app_.make_session(resume, log_);
        } catch (const config_error& e) {
            ctl_.add_item(transcript_item::kind::error, e.what());
            return;
        }
        sub_.reset();
        session_ = std::move(next);
        sub_ = session_->subscribe([this](const event& e) { on_event(e); });
        ctl_.reset_transcript();
        ctl_.set_model_label(model_selector(session_->model()));
        update_totals();
        ctl_.set_usage(session_->usage());
        const auto file = session_->history().file();
        ctl_.add_notice((resume ? "Resumed " : "New session ") +
                        (file ? file->string() : std::string("(in memory)")));
        if (resume) show_history();
        render(true);
    }

    void resume(const std::string& file) {
        if (!file.empty()) {
            app_.set_session_file(file);
            replace_session(true);
            return;
        }
        const std::string cwd = to_valid_utf8(std::filesystem::current_path().string());
        const auto current = session_->history().file();
        std::vector<std::string> labels, values;
        for (const auto& s : recent_sessions(app_.sessions_dir(), cwd, 11)) {
            if (current && s.file == *current) continue;
            if (labels.size() == 10) break;
            labels.push_back(session_choice_label(s));
            values.push_back(s.file.string());
        }
        if (labels.empty()) {
            ctl_.add_item(transcript_item::kind::error,
                          "No other session of " + cwd + " in " + app_.sessions_dir().string());
            return;
        }
        ctl_.begin_pick(tui_command::kind::resume,
                        "Recent sessions of " + cwd + " (a number and Enter picks):",
                        std::move(labels), std::move(values));
    }

    void launch_compact(std::string instructions) {
        ++tasks_;
        compaction_seen_ = false;
        asio::co_spawn(io_, session_->compact(std::move(instructions)),
                       [this](std::exception_ptr e, compact_result r) {
                           --tasks_;
                           if (e) {
                               log_exception("compacting", e);
                           } else if (!r.ok && !compaction_seen_) {
                               ctl_.add_item(transcript_item::kind::error,
                                             "Compaction failed: " + r.error);
                               schedule_render();
                           }
                           maybe_finish();
                       });
    }

    /// The TUI toggle of docs/architecture.md "Configuration": a runtime override for this session
    /// (and the next), and retry.enabled persisted to the global settings file, as the RPC command
    /// does.
    void set_auto_retry(bool enabled) {
        session_->set_auto_retry_enabled(enabled);
        const std::string error = app_.override_and_persist("retry.enabled", enabled);
        ctl_.on_auto_retry_set(enabled, global_settings_path(app_.dir()).string(), error);
    }

    void suspend() {
        std::string out = collect_and_render(true);
        out += screen_->clear_live();
        term_.write(out);
        term_.leave();
        ::kill(::getpid(), SIGTSTP);  // stops here until SIGCONT
        term_.enter();
        std::tie(width_, height_) = term_.size();
        render(true);
    }

    // ---- the session -----------------------------------------------------------------------

    void launch_prompt(std::string text, bool join = false, std::vector<image_block> images = {}) {
        ++tasks_;
        asio::co_spawn(io_, run_prompt(text, join, std::move(images)),
                       [this, text](std::exception_ptr e, prompt_result r) {
                           --tasks_;
                           if (e) {
                               log_exception("running a prompt", e);
                           } else {
                               ctl_.on_prompt_done(text, r);
                               schedule_render();
                           }
                           maybe_finish();
                       });
    }

    void launch_resume_park() {
        ++tasks_;
        // the prompt the park belongs to: the last user message (what /retry sends again)
        std::string text;
        for (auto it = session_->messages().rbegin(); it != session_->messages().rend(); ++it)
            if ((*it)->role == message_role::user) {
                text = text_of(**it);
                break;
            }
        asio::co_spawn(io_, session_->resume_park(),
                       [this, text](std::exception_ptr e, prompt_result r) {
                           --tasks_;
                           if (e) {
                               log_exception("resuming the park", e);
                           } else {
                               ctl_.on_prompt_done(text, r);
                               schedule_render();
                           }
                           maybe_finish();
                       });
    }

    asio::awaitable<prompt_result> run_prompt(std::string text, bool join,
                                              std::vector<image_block> images) {
        if (exiting_) co_return prompt_result{};
        // during a backoff the message joins the chain and the retry starts now (no streaming
        // behaviour); should the wait have ended meanwhile, it runs as a follow-up instead
        if (join && session_->can_join_backoff())
            co_return co_await session_->prompt(std::move(text), std::move(images),
                                                streaming_behavior::none);
        // follow_up: when the session is busy (streaming or in a retry backoff) the message
        // runs after the current turn; when idle it runs at once
        prompt_result r = co_await session_->prompt(std::move(text), std::move(images),
                                                    streaming_behavior::follow_up);
        co_return r;
    }

    void on_event(const event& e) {
        if (std::holds_alternative<compaction_end_event>(e)) compaction_seen_ = true;
        // the footer names the model in use: a fallback switches it, a restored primary too
        if (std::holds_alternative<agent_start_event>(e) ||
            std::holds_alternative<retry_fallback_applied_event>(e))
            ctl_.set_model_label(model_selector(session_->model()));
        // the footer's tokens, context and cost: a reply ended, a prompt settled
        if (std::holds_alternative<message_end_event>(e) ||
            std::holds_alternative<agent_settled_event>(e) ||
            std::holds_alternative<compaction_end_event>(e))
            update_totals();
        // the footer's retry accounting: a retry decided, a chain or a prompt over
        if (std::holds_alternative<auto_retry_start_event>(e) ||
            std::holds_alternative<auto_retry_end_event>(e) ||
            std::holds_alternative<agent_settled_event>(e))
            ctl_.set_usage(session_->usage());
        ctl_.on_event(e, tui_controller::clock::now());
        schedule_render();
    }

    void update_totals() {
        ctl_.set_totals(totals_of(session_->history().messages(), session_->model()));
    }

    // ---- drawing ---------------------------------------------------------------------------

    void on_resize() {
        const auto [w, h] = term_.size();
        const bool width_changed = w != width_;
        width_ = w;
        height_ = h;
        render(width_changed);  // a new width re-wraps everything; a new height only the region
    }

    void schedule_render() {
        if (render_pending_ || exiting_) return;
        render_pending_ = true;
        asio::post(io_, [this] {
            render_pending_ = false;
            if (!finished_) render(false);
        });
    }

    void arm_tick() {
        const auto next = ctl_.next_wakeup();
        if (!next || (tick_armed_ && *next == tick_at_)) return;
        tick_armed_ = true;
        tick_at_ = *next;
        tick_timer_.expires_at(*next);
        tick_timer_.async_wait([this](const boost::system::error_code& ec) {
            if (ec) return;
            tick_armed_ = false;
            ctl_.on_tick(tui_controller::clock::now());
            if (!finished_) render(false);
        });
    }

    /// The transcript rows not printed yet (all of them after a reset), plus the streaming
    /// reply's last row, which stays in the live region while it can still change.
    void collect(std::vector<screen_row>& commit, std::vector<screen_row>& stream_rows,
                 bool finish) {
        printer_.collect(ctl_.transcript(), !finish && ctl_.streaming(), width_, commit,
                         stream_rows);
    }

    tui::live_region compose_live(std::vector<screen_row> stream_rows) const {
        tui::live_input in;
        in.stream_rows = std::move(stream_rows);
        in.queued = ctl_.queued();
        in.loader = ctl_.loader_text();
        in.status = ctl_.status_text();
        in.attachments = tui::attachment_status(tui::image_attachments(to_utf8(editor_.text())));
        in.footer = ctl_.footer_text();
        in.text = editor_.text();
        in.cursor = editor_.cursor();
        in.width = width_;
        in.height = height_;
        return tui::compose_live(in);
    }

    std::string collect_and_render(bool finish) {
        std::vector<screen_row> commit;
        std::vector<screen_row> stream_rows;
        collect(commit, stream_rows, finish);
        const tui::live_region live = compose_live(std::move(stream_rows));
        return screen_->render(commit, live.rows, live.cursor_row, live.cursor_col);
    }

    void render(bool full) {
        if (!screen_ || restored_) return;
        std::string out;
        if (full) {
            printer_.reset();
            std::vector<screen_row> all;
            std::vector<screen_row> stream_rows;
            collect(all, stream_rows, false);
            const tui::live_region live = compose_live(std::move(stream_rows));
            out = screen_->redraw(all, live.rows, live.cursor_row, live.cursor_col);
        } else {
            out = collect_and_render(false);
        }
        if (!out.empty()) term_.write(out);
        arm_tick();
    }

    app_context& app_;
    asio::io_context& io_;
    std::shared_ptr<spdlog::logger> log_;
    std::unique_ptr<agent_session> session_;
    subscription sub_;
    bool compaction_seen_ = false;
    tui_controller ctl_;
    std::vector<image_block> next_images_;  // the images of the submit being performed
    tui::key_decoder keys_;
    terminal term_;
    line_editor editor_;
    std::optional<tui::screen> screen_;

    asio::posix::stream_descriptor in_;
    asio::steady_timer esc_timer_;
    asio::steady_timer tick_timer_;
    asio::signal_set signals_;
    std::uint64_t esc_generation_ = 0;
    bool tick_armed_ = false;
    tui_controller::time_point tick_at_{};
    bool render_pending_ = false;

    int width_ = 80, height_ = 24;
    tui::transcript_printer printer_;

    int tasks_ = 0;
    bool exiting_ = false;
    bool leave_parked_ = false;  // exiting while parked: the park stays open
    bool finished_ = false;
    bool restored_ = false;
    int exit_code_ = 0;
    std::vector<std::string> errors_;
};

}  // namespace

int run_interactive_mode(app_context& app) {
    // the terminal speaks UTF-8; wcwidth needs a UTF-8 LC_CTYPE to measure CJK and emoji
    std::setlocale(LC_ALL, "");
    if (std::strcmp(::nl_langinfo(CODESET), "UTF-8") != 0) std::setlocale(LC_CTYPE, "C.UTF-8");
    interactive_ui ui(app);
    return ui.run();
}

}  // namespace coagent

// ---- terminfo (ncurses) ------------------------------------------------------------------------
// Last in the file: <term.h> defines macros such as `lines` and `columns`.

#include <term.h>
#undef clear_screen  // a terminfo macro; a terminal_caps member here

namespace coagent {

namespace {

std::string cap(const char* name) {
    const char* s = ::tigetstr(name);
    if (s == nullptr || s == reinterpret_cast<const char*>(-1)) return {};
    return s;
}

std::string param(const std::string& fmt, int n) {
    const char* s = ::tiparm(fmt.c_str(), n);
    return s ? std::string(s) : std::string();
}

}  // namespace

tui::terminal_caps load_terminfo_caps(bool& found) {
    tui::terminal_caps c = tui::terminal_caps::ansi();
    int err = 0;
    found = ::setupterm(nullptr, STDOUT_FILENO, &err) == 0;
    if (!found) return c;
    const auto take = [](std::string& field, const char* name) {
        std::string v = cap(name);
        if (!v.empty()) field = std::move(v);
    };
    take(c.clear_eol, "el");
    take(c.clear_eos, "ed");
    take(c.clear_screen, "clear");
    take(c.clear_scrollback, "E3");
    take(c.hide_cursor, "civis");
    take(c.show_cursor, "cnorm");
    take(c.reset, "sgr0");
    take(c.bold, "bold");
    take(c.dim, "dim");
    take(c.italic, "sitm");
    take(c.underline, "smul");
    if (const std::string setaf = cap("setaf"); !setaf.empty()) {
        c.red = param(setaf, 1);
        c.yellow = param(setaf, 3);
        c.cyan = param(setaf, 6);
    }
    if (std::string cuu = cap("cuu"); !cuu.empty()) c.up = [cuu](int n) { return param(cuu, n); };
    if (std::string cud = cap("cud"); !cud.empty()) c.down = [cud](int n) { return param(cud, n); };
    if (std::string cuf = cap("cuf"); !cuf.empty())
        c.right = [cuf](int n) { return param(cuf, n); };
    return c;
}

void release_terminfo() {
    if (cur_term) ::del_curterm(cur_term);
}

}  // namespace coagent
