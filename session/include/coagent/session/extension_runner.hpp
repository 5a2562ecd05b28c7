#pragma once
// In-process extensions: each gets every session event (auto_retry_* included) in load order.
// An extension that throws produces an extension_error event; it never stops the session.

#include <coagent/runtime/event.hpp>

#include <functional>
#include <string>
#include <vector>

namespace coagent {

class extension_runner {
  public:
    using handler = std::function<void(const event&)>;

    /// Adds an extension; `path` names it in extension_error events.
    void add(std::string path, handler h) {
        extensions_.push_back({std::move(path), std::move(h)});
    }
    bool empty() const noexcept { return extensions_.empty(); }

    /// Delivers `e` to every extension in load order; each failure is reported through
    /// `on_error` (as an extension_error event) and delivery goes on.
    template <typename OnError>
    void emit(const event& e, OnError&& on_error) {
        for (auto& x : extensions_) {
            try {
                x.h(e);
            } catch (const std::exception& ex) {
                on_error(extension_error_event{x.path, std::string(event_type(e)), ex.what()});
            } catch (...) {
                on_error(
                    extension_error_event{x.path, std::string(event_type(e)), "unknown exception"});
            }
        }
    }

  private:
    struct entry {
        std::string path;
        handler h;
    };
    std::vector<entry> extensions_;
};

}  // namespace coagent
