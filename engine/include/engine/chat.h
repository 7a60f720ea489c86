// A chat message, as passed to chat templates.
#pragma once

#include <string>

namespace braid {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

}  // namespace braid
