#include "dlock/reply.hpp"

namespace dlock {

reply reply::make_integer(std::int64_t v) {
  reply r;
  r.kind_ = kind::integer;
  r.integer_ = v;
  return r;
}

reply reply::make_string(kind k, std::string_view text) {
  reply r;
  r.kind_ = k;
  r.text_ = text;
  return r;
}

reply reply::make_array(std::vector<reply> elements) {
  reply r;
  r.kind_ = kind::array;
  r.elements_ = std::move(elements);
  return r;
}

std::string reply::to_string() const {
  switch (kind_) {
    case kind::nil: return "(nil)";
    case kind::integer: return "(integer) " + std::to_string(integer_);
    case kind::string: return '"' + text_ + '"';
    case kind::status: return text_;
    case kind::error: return "(error) " + text_;
    case kind::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < elements_.size(); ++i) {
        if (i) out += ", ";
        out += elements_[i].to_string();
      }
      return out + "]";
    }
  }
  return {};
}

}  // namespace dlock
