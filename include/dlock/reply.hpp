// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/reply.hpp: a decoded RESP2 reply.
/// - reply:  nil, integer, simple string (status), bulk string, error or array of replies
/// - error_from_reply: the errc an error reply stands for
///
/// A reply is a plain value: copy it, move it, read it from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "dlock/export.hpp"

namespace dlock {

/// A decoded RESP2 reply: nil, integer, simple string (status), bulk string, error or array of
/// replies. A plain value: copy it, move it, read it from any thread.
class DLOCK_EXPORT reply {
 public:
  /// The RESP2 type of a reply.
  enum class kind {
    nil,      ///< a null bulk string or null array (hiredis's nil)
    integer,  ///< an integer: integer()
    string,   ///< a bulk string: str()
    status,   ///< a simple string, such as OK: str()
    error,    ///< an error reply, such as "WRONGTYPE ...": str()
    array     ///< an array of replies: elements()
  };

  reply() = default;                                        ///< a nil reply
  static reply make_nil() { return {}; }                    ///< a nil reply
  static reply make_integer(std::int64_t v);                ///< an integer reply
  static reply make_string(kind k, std::string_view text);  ///< string, status or error
  static reply make_array(std::vector<reply> elements);     ///< an array reply

  kind type() const noexcept { return kind_; }                         ///< the reply's kind
  bool is_nil() const noexcept { return kind_ == kind::nil; }          ///< type() == kind::nil
  bool is_integer() const noexcept { return kind_ == kind::integer; }  ///< type() == kind::integer
  bool is_error() const noexcept { return kind_ == kind::error; }      ///< type() == kind::error
  bool is_array() const noexcept { return kind_ == kind::array; }      ///< type() == kind::array
  /// Bulk and simple strings both count as strings.
  bool is_string() const noexcept { return kind_ == kind::string || kind_ == kind::status; }

  /// The integer of an integer reply; 0 for other kinds.
  std::int64_t integer() const noexcept { return integer_; }
  /// The text of a string, status or error reply; empty for other kinds.
  const std::string& str() const noexcept { return text_; }
  /// The elements of an array reply; empty for other kinds.
  const std::vector<reply>& elements() const noexcept { return elements_; }

  /// A short human-readable rendering, for logs and error messages.
  std::string to_string() const;

 private:
  kind kind_ = kind::nil;
  std::int64_t integer_ = 0;
  std::string text_;
  std::vector<reply> elements_;
};

/// Maps an error reply's text ("WRONGTYPE ...", "NOPERM ...") to an errc.
DLOCK_EXPORT std::error_code error_from_reply(const reply& r) noexcept;

}  // namespace dlock
