// Where a parked session's heap goes (issue 25): parks N sessions in a backoff the way
// session_bench (c) does and prints the heap blocks they still hold, grouped by size and by the
// call stack that allocated them, per session. It replaces malloc and friends (the blocks of
// operator new and of Asio's recycling allocator both come through them), so it is built only
// without sanitizers (bench/CMakeLists.txt).
//
//   parked_probe [--one-at-a-time] [N]    (default N = 1000)
//
// Default: all N prompts start in one io_context::poll, as in session_bench — Asio's recycling
// allocator then hands a new coroutine frame the freed block of a larger one, and the sizes
// show it. --one-at-a-time polls after each prompt. Names come from the executable's symbol
// table (ENABLE_EXPORTS) and, for a coroutine's body (a local clone), from addr2line. A block
// is named by the code that allocated it: a coroutine frame by the function that called the
// coroutine, and a recycled block by the frame it was first made for.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/io_context.hpp>

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace asio = boost::asio;
using namespace coagent;

namespace {

constexpr int depth = 10;
struct block {
    std::size_t size;
    void* stack[depth];
    int frames;
};

bool tracking = false;
thread_local bool inside = false;  // the probe's own allocations are not tracked
std::unordered_map<void*, block>* live = nullptr;

void* track(void* p, std::size_t n) {
    if (p && tracking && !inside) {
        inside = true;
        block b{n, {}, 0};
        b.frames = backtrace(b.stack, depth);
        (*live)[p] = b;
        inside = false;
    }
    return p;
}

void untrack(void* p) {
    if (p && tracking && !inside) {
        inside = true;
        live->erase(p);
        inside = false;
    }
}

std::string demangled(const char* symbol) {
    int status = 0;
    char* d = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
    std::string s = d ? d : symbol;
    std::free(d);
    if (const auto paren = s.find('('); paren != std::string::npos) s.resize(paren);
    return s;
}

// a frame's function: the symbol table's name, else addr2line's (a coroutine's body is a local
// clone the symbol table does not export)
std::string name_of(void* address) {
    static std::map<void*, std::string> cache;
    if (auto it = cache.find(address); it != cache.end()) return it->second;
    std::string name;
    Dl_info info;
    if (dladdr(address, &info)) {
        if (info.dli_sname) {
            name = demangled(info.dli_sname);
        } else if (info.dli_fname) {
            char command[512];
            std::snprintf(command, sizeof command, "addr2line -f -C -e '%s' %#lx 2>/dev/null",
                          info.dli_fname,
                          static_cast<unsigned long>(static_cast<char*>(address) -
                                                     static_cast<char*>(info.dli_fbase) - 1));
            if (FILE* f = popen(command, "r")) {
                char line[4096];
                if (std::fgets(line, sizeof line, f) && line[0] != '?') {
                    name = line;
                    while (!name.empty() && (name.back() == '\n' || name.back() == '\r'))
                        name.pop_back();
                    if (const auto paren = name.find('('); paren != std::string::npos)
                        name.resize(paren);
                }
                pclose(f);
            }
        }
    }
    return cache[address] = name;
}

// the first three named frames below the allocator, Asio's and the standard library's left out
std::string where(const block& b) {
    std::string out;
    int named = 0;
    for (int i = 2; i < b.frames && named < 3; ++i) {
        std::string n = name_of(b.stack[i]);
        if (n.empty() || n.starts_with("operator new") || n.starts_with("std::") ||
            n.starts_with("__gnu_cxx::") || n.find("boost::asio::detail::") != n.npos ||
            n == "main" || n.starts_with("__libc_start") || n == "_start")
            continue;
        if (named++) out += " <- ";
        out += n;
    }
    return out.empty() ? "(main, or an Asio operation)" : out;
}

}  // namespace

extern "C" {
void* __libc_malloc(std::size_t);
void __libc_free(void*);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);

void* malloc(std::size_t n) {
    return track(__libc_malloc(n), n);
}
void free(void* p) {
    untrack(p);
    __libc_free(p);
}
void* calloc(std::size_t a, std::size_t b) {
    return track(__libc_calloc(a, b), a * b);
}
void* realloc(void* p, std::size_t n) {
    untrack(p);
    return track(__libc_realloc(p, n), n);
}
void* aligned_alloc(std::size_t a, std::size_t n) {
    return track(__libc_memalign(a, n), n);
}
void* memalign(std::size_t a, std::size_t n) {
    return track(__libc_memalign(a, n), n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) {
    *out = track(__libc_memalign(a, n), n);
    return *out ? 0 : ENOMEM;
}
}

int main(int argc, char** argv) {
    bool one_at_a_time = false;
    std::size_t n = 1000;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--one-at-a-time") == 0) {
            one_at_a_time = true;
        } else if (char* end = nullptr; (n = std::strtoul(argv[i], &end, 10)) == 0 || *end) {
            std::fprintf(stderr, "usage: parked_probe [--one-at-a-time] [N > 0]\n");
            return 2;
        }
    }
    live = new std::unordered_map<void*, block>();
    asio::io_context io;
    faux_options fo;
    fo.script = faux_script::parse(
        R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":1000000000}])",
        "<probe>");
    fo.record_requests = false;
    auto provider = std::make_shared<faux_provider>(std::move(fo));
    std::vector<std::unique_ptr<agent_session>> sessions;
    sessions.reserve(n + 1);
    for (std::size_t i = 0; i < n + 1; ++i) {
        if (i == 1) tracking = true;  // the first session warms up what is made once
        session_options o;
        o.executor = io.get_executor();
        o.model_provider = provider;
        o.config.retry.base_delay_ms = 1'000'000'000;
        o.config.retry.max_retries = 3;
        sessions.push_back(std::make_unique<agent_session>(std::move(o)));
        sessions.back()->async_prompt("hi", [](std::exception_ptr e, prompt_result) {
            if (e) std::abort();
        });
        if (one_at_a_time || i == 0) io.poll();
    }
    io.poll();
    tracking = false;
    for (auto& s : sessions)
        if (!s->is_retrying()) {
            std::fprintf(stderr, "parked_probe: a session is not parked in its backoff\n");
            return 1;
        }

    std::map<std::pair<std::size_t, std::string>, std::size_t> groups;  // (size, where) -> count
    std::size_t bytes = 0;
    for (const auto& [p, b] : *live) {
        ++groups[{b.size, where(b)}];
        bytes += b.size;
    }
    std::vector<std::pair<std::size_t, std::string>> rows;
    for (const auto& [key, count] : groups) {
        if (count * 2 < n) continue;  // not one per session
        rows.push_back({key.first * count / n, std::to_string(key.first) + " B x" +
                                                   std::to_string(count) + "  " + key.second});
    }
    std::sort(rows.rbegin(), rows.rend());
    std::printf("%zu sessions parked (%s); blocks each holds, bytes requested per session:\n", n,
                one_at_a_time ? "one at a time" : "all in one poll");
    for (const auto& [per, text] : rows) std::printf("%6zu  %s\n", per, text.c_str());
    std::printf("total: %zu B requested per session in %.1f blocks\n", bytes / n,
                double(live->size()) / double(n));
    for (auto& s : sessions) s->abort_retry();
    io.restart();
    io.run();
    return 0;
}
