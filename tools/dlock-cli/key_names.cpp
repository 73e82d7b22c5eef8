// SPDX-License-Identifier: Apache-2.0
// Reading names back from keys. E(name) (dlock/key_layout.hpp) has three forms, each ending in
// '}': name + "{}" (a name with a hash tag), "{" + name + "}" (most names), and
// "{FFFF}" + name + "}}" (the others). No suffix contains '}', so a companion key splits into
// E(name) and a suffix at its end; each form that could have made the rest is undone, and the
// name is kept only when encoding it again gives the rest back. That check uses the library's
// own encoder (high_fence_key), so the two cannot drift apart; the suffixes are spelt here,
// and tests/unit/key_names_test.cpp checks them against the library's key functions.
#include "key_names.hpp"

#include <array>
#include <charconv>
#include <cstdio>

#include "dlock/key_layout.hpp"

namespace dlock::cli {
namespace {

struct suffix_role {
  std::string_view suffix;
  key_role role;
};

constexpr std::array<suffix_role, 27> suffixes{{
    {":fence", key_role::fence},
    {":waiters", key_role::lock},
    {":waiter-info", key_role::lock},
    {":tickets", key_role::lock},
    {":holder", key_role::holder_note},
    {":waiter-notes", key_role::holder_note},
    {":high-fence", key_role::data_fence},
    {":election", key_role::election},
    {":latch", key_role::latch_channel},
    {":sem:holders", key_role::semaphore},
    {":sem:weights", key_role::semaphore},
    {":sem:fence", key_role::semaphore},
    {":sem:waiters", key_role::semaphore},
    {":sem:waiter-info", key_role::semaphore},
    {":sem:tickets", key_role::semaphore},
    {":fairsem:timeouts", key_role::fair_semaphore},
    {":fairsem:owners", key_role::fair_semaphore},
    {":fairsem:weights", key_role::fair_semaphore},
    {":fairsem:fence", key_role::fair_semaphore},
    {":fairsem:waiter-info", key_role::fair_semaphore},
    {":fairsem:counter", key_role::fair_semaphore},
    {":rw:timeouts", key_role::read_write_lock},
    {":rw:owners", key_role::read_write_lock},
    {":rw:weights", key_role::read_write_lock},
    {":rw:fence", key_role::read_write_lock},
    {":rw:waiter-info", key_role::read_write_lock},
    {":rw:counter", key_role::read_write_lock},
}};

// E(name), by the library: high_fence_key is E(name) + ":high-fence".
std::string encode(std::string_view name) {
  std::string key = high_fence_key(name);
  key.resize(key.size() - std::string_view(":high-fence").size());
  return key;
}

// The name that E() turns into `base`, if any.
std::optional<std::string> decode(std::string_view base) {
  if (!base.ends_with('}')) return std::nullopt;
  auto encodes = [&](std::string_view name) { return encode(name) == base; };
  if (base.ends_with("{}")) {
    auto name = base.substr(0, base.size() - 2);
    if (encodes(name)) return std::string(name);
  }
  if (base.size() >= 2 && base.front() == '{') {
    auto name = base.substr(1, base.size() - 2);
    if (encodes(name)) return std::string(name);
  }
  if (base.size() >= 8 && base.front() == '{' && base.ends_with("}}")) {
    auto name = base.substr(6, base.size() - 8);
    if (encodes(name)) return std::string(name);
  }
  return std::nullopt;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// One glob element at pattern[p] against the byte c, for a '[' class: whether it matches, and where
// the class ends (the ']' or the pattern's end), as Redis's stringmatchlen reads it.
bool class_matches(std::string_view pattern, std::size_t& p, char c) {
  ++p;  // past '['
  bool negate = p < pattern.size() && pattern[p] == '^';
  if (negate) ++p;
  bool match = false;
  for (;;) {
    if (p >= pattern.size()) {
      --p;  // an unterminated class ends at the pattern's last byte
      break;
    }
    if (pattern[p] == '\\' && p + 1 < pattern.size()) {
      ++p;
      if (pattern[p] == c) match = true;
    } else if (pattern[p] == ']') {
      break;
    } else if (p + 2 < pattern.size() && pattern[p + 1] == '-') {
      char lo = pattern[p], hi = pattern[p + 2];
      if (lo > hi) std::swap(lo, hi);
      if (c >= lo && c <= hi) match = true;
      p += 2;
    } else if (pattern[p] == c) {
      match = true;
    }
    ++p;
  }
  return negate ? !match : match;
}

bool glob_from(std::string_view pattern, std::size_t p, std::string_view text, std::size_t t) {
  while (p < pattern.size() && t < text.size()) {
    switch (pattern[p]) {
      case '*':
        while (p + 1 < pattern.size() && pattern[p + 1] == '*') ++p;
        if (p + 1 == pattern.size()) return true;
        for (std::size_t from = t; from < text.size(); ++from) {
          if (glob_from(pattern, p + 1, text, from)) return true;
        }
        return false;
      case '?':
        ++t;
        break;
      case '[':
        if (!class_matches(pattern, p, text[t])) return false;
        ++t;
        break;
      case '\\':
        if (p + 1 < pattern.size()) ++p;
        [[fallthrough]];
      default:
        if (pattern[p] != text[t]) return false;
        ++t;
        break;
    }
    ++p;
  }
  while (t == text.size() && p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size() && t == text.size();
}

}  // namespace

std::optional<companion> decode_companion(std::string_view key) {
  for (const auto& [suffix, role] : suffixes) {
    if (!key.ends_with(suffix)) continue;
    if (auto name = decode(key.substr(0, key.size() - suffix.size()))) {
      return companion{std::move(*name), suffix, role};
    }
  }
  return std::nullopt;
}

std::optional<copy_key> decode_copy_key(std::string_view key) {
  constexpr std::string_view marker = "}dlock-copy:";
  if (key.size() < 5 + marker.size() || key[0] != '{' || key.substr(5, marker.size()) != marker) {
    return std::nullopt;
  }
  std::string_view rest = key.substr(5 + marker.size());
  const char* end = rest.data() + rest.size();
  int copy = -1, copies = 0;
  auto [slash, e1] = std::from_chars(rest.data(), end, copy);
  if (e1 != std::errc{} || slash == end || *slash != '/') return std::nullopt;
  auto [colon, e2] = std::from_chars(slash + 1, end, copies);
  if (e2 != std::errc{} || colon == end || *colon != ':') return std::nullopt;
  std::string name(colon + 1, end);
  if (copy < 0 || copies <= 0 || copy >= copies || lock_copy_key(name, copy, copies) != key) {
    return std::nullopt;
  }
  return copy_key{std::move(name), copy, copies};
}

bool is_node_key(std::string_view key) {
  return key == node_identity_key || key == node_quarantine_key || key == node_fence_floor_key;
}

bool glob_match(std::string_view pattern, std::string_view text) {
  if (text.empty()) {  // stringmatchlen's loop never runs: only stars match the
                       // empty string
    return pattern.find_first_not_of('*') == std::string_view::npos;
  }
  return glob_from(pattern, 0, text, 0);
}

std::string scan_match(std::string_view name_pattern) {
  std::size_t trailing = 0;
  while (trailing < name_pattern.size() &&
         name_pattern[name_pattern.size() - 1 - trailing] == '\\') {
    ++trailing;
  }
  if (name_pattern.empty() || trailing % 2 == 1) return "*";
  if (name_pattern.find_first_not_of('*') == std::string_view::npos) return "*";
  std::string match(name_pattern);
  if (!match.starts_with('*')) match.insert(0, 1, '*');
  // A last '*' that no backslash escapes stays the only one.
  std::size_t escapes = 0;
  while (escapes + 2 <= match.size() && match[match.size() - 2 - escapes] == '\\') ++escapes;
  if (!match.ends_with('*') || escapes % 2 == 1) match += '*';
  return match;
}

bool is_dlock_owner(std::string_view value) {
  if (value.ends_with(":settled")) value.remove_suffix(std::string_view(":settled").size());
  if (value.size() < 34 || value[32] != '.') return false;
  for (char c : value.substr(0, 32)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  auto round = value.substr(33);
  if (round.starts_with('h')) round.remove_prefix(1);
  return all_digits(round);
}

std::optional<solo_holder> parse_solo(std::string_view value) {
  auto last = value.rfind(' ');
  if (last == std::string_view::npos || last == 0) return std::nullopt;
  auto middle = value.rfind(' ', last - 1);
  if (middle == std::string_view::npos) return std::nullopt;
  auto permits = latch_count(value.substr(last + 1));
  solo_holder solo{value.substr(0, middle), value.substr(middle + 1, last - middle - 1),
                   permits.value_or(0)};
  if (!permits || *permits < 1 || solo.token.empty()) return std::nullopt;
  if (solo.mark != read_write_lock_mark) {
    auto rest = solo.mark;
    if (!rest.starts_with(semaphore_mark_prefix)) return std::nullopt;
    rest.remove_prefix(semaphore_mark_prefix.size());
    auto space = rest.find(' ');
    if (space == std::string_view::npos || !latch_count(rest.substr(0, space))) return std::nullopt;
    auto fairness = rest.substr(space + 1);
    if (fairness != "fair" && fairness != "unfair") return std::nullopt;
  }
  return solo;
}

std::string_view mark_part(std::string_view value) {
  auto solo = parse_solo(value);
  return solo ? solo->mark : value;
}

std::optional<semaphore_mark_info> parse_semaphore_mark(std::string_view value) {
  value = mark_part(value);
  if (!value.starts_with(semaphore_mark_prefix)) return std::nullopt;
  value.remove_prefix(semaphore_mark_prefix.size());
  auto space = value.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto limit = latch_count(value.substr(0, space));
  auto fairness = value.substr(space + 1);
  if (!limit || *limit < 1 || (fairness != "fair" && fairness != "unfair")) return std::nullopt;
  return semaphore_mark_info{*limit, fairness == "fair"};
}

std::optional<long long> latch_count(std::string_view value) {
  if (!all_digits(value) || value.size() > 16 || (value.size() > 1 && value[0] == '0')) {
    return std::nullopt;
  }
  long long count = 0;
  std::from_chars(value.data(), value.data() + value.size(), count);
  if (count > (1LL << 53)) return std::nullopt;
  return count;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      // A key is bytes; JSON is UTF-8. A valid sequence goes as it is, any other byte as the code
      // point of the same number (\u0080-\u00ff), so the output always parses.
      std::size_t len = u >= 0xf0 && u <= 0xf4   ? 4
                        : u >= 0xe0 && u <= 0xef ? 3
                        : u >= 0xc2 && u <= 0xdf ? 2
                                                 : 0;
      bool valid = len > 0 && i + len <= s.size();
      for (std::size_t k = 1; valid && k < len; ++k) {
        valid = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      }
      if (valid && len == 3) {  // no overlong forms, no surrogates
        auto next = static_cast<unsigned char>(s[i + 1]);
        valid = !(u == 0xe0 && next < 0xa0) && !(u == 0xed && next >= 0xa0);
      }
      if (valid && len == 4) {
        auto next = static_cast<unsigned char>(s[i + 1]);
        valid = !(u == 0xf0 && next < 0x90) && !(u == 0xf4 && next >= 0x90);
      }
      if (valid) {
        out.append(s.substr(i, len));
        i += len - 1;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(u));
        out += buf;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(u));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace dlock::cli
