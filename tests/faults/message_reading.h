// Reading a failure message the way a user does (docs/FAILURES.md): the root causes first, each
// starting with the rank that failed, then "; rank R's own view: ...". The fault tests assert on
// what these return, so they are written from the documented shape, not from braid's code.
#pragma once

#include <cctype>
#include <cstdlib>
#include <string>

namespace braid::testing {

// The first rank a message names ("rank 2 is gone ..." -> 2), or -1. "ranks 0, 1" does not
// count: only "rank " followed by a digit does.
inline int FirstRankNamed(const std::string& message) {
  for (size_t at = message.find("rank "); at != std::string::npos;
       at = message.find("rank ", at + 1)) {
    if (at + 5 < message.size() && std::isdigit(static_cast<unsigned char>(message[at + 5]))) {
      return std::atoi(message.c_str() + at + 5);
    }
  }
  return -1;
}

// The root causes: the part of a message before "'s own view: ", or the whole message when it
// has no own view (the rank was its own root cause).
inline std::string Lead(const std::string& message) {
  const size_t own = message.find("'s own view: ");
  return own == std::string::npos ? message : message.substr(0, own);
}

}  // namespace braid::testing
