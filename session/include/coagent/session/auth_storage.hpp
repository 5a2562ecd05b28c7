#pragma once
// Credentials and the usage-limit path (policy §3 step 7): when a usage limit is reached the
// session asks the auth storage to put the current credential aside; if it could switch to
// another one the retry waits 0 ms.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

class auth_storage {
  public:
    virtual ~auth_storage() = default;
    /// Blocks the credential `session_id` uses for `provider` until now + retry_after_ms
    /// (60 s without a hint). Returns true iff another unblocked credential exists and the
    /// session's next request will use it.
    virtual bool mark_usage_limit_reached(std::string_view provider, std::string_view session_id,
                                          std::optional<std::int64_t> retry_after_ms) = 0;
    /// The key the session's next request to `provider` uses (empty if none).
    virtual std::string api_key(std::string_view provider, std::string_view session_id) = 0;
};

/// Credentials held in memory. Thread-safe. `now_ms` is injectable for tests.
class in_memory_auth_storage final : public auth_storage {
  public:
    explicit in_memory_auth_storage(std::function<std::int64_t()> now_ms = {});

    void add_credential(std::string provider, std::string key);

    bool mark_usage_limit_reached(std::string_view provider, std::string_view session_id,
                                  std::optional<std::int64_t> retry_after_ms) override;
    std::string api_key(std::string_view provider, std::string_view session_id) override;

    /// When credential `index` of `provider` is blocked until (epoch ms), 0 if not blocked.
    std::int64_t blocked_until(std::string_view provider, std::size_t index) const;

    static constexpr std::int64_t default_block_ms = 60'000;

  private:
    struct credential {
        std::string key;
        std::int64_t blocked_until = 0;
    };
    std::size_t pick(std::vector<credential>& creds, std::int64_t now) const;

    std::function<std::int64_t()> now_ms_;
    mutable std::mutex mutex_;
    std::map<std::string, std::vector<credential>, std::less<>> creds_;
    std::map<std::string, std::size_t, std::less<>> in_use_;  // provider + '\n' + session → index
};

}  // namespace coagent
