#include "resp/reply_reader.hpp"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <new>

#include "dlock/error.hpp"

namespace dlock::detail {
namespace {

reply convert(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER: return reply::make_integer(r->integer);
    case REDIS_REPLY_STRING: return reply::make_string(reply::kind::string, {r->str, r->len});
    case REDIS_REPLY_STATUS: return reply::make_string(reply::kind::status, {r->str, r->len});
    case REDIS_REPLY_ERROR: return reply::make_string(reply::kind::error, {r->str, r->len});
    case REDIS_REPLY_ARRAY: {
      std::vector<reply> elements;
      elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) elements.push_back(convert(r->element[i]));
      return reply::make_array(std::move(elements));
    }
    default: return reply::make_nil();
  }
}

}  // namespace

reply_reader::reply_reader() : reader_(redisReaderCreate()) {
  if (reader_ == nullptr) throw std::bad_alloc();
}

reply_reader::~reply_reader() { redisReaderFree(reader_); }

void reply_reader::feed(std::string_view bytes) {
  // hiredis also refuses bytes once the stream was found not to be RESP; that is not an
  // allocation failure, and next() keeps reporting the protocol error.
  if (redisReaderFeed(reader_, bytes.data(), bytes.size()) != REDIS_OK &&
      reader_->err == REDIS_ERR_OOM)
    throw std::bad_alloc();
}

std::optional<reply> reply_reader::next(std::error_code& ec) {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    ec = errc::protocol_error;
    return std::nullopt;
  }
  ec.clear();
  if (raw == nullptr) return std::nullopt;
  auto* r = static_cast<redisReply*>(raw);
  reply out = convert(r);
  freeReplyObject(r);
  return out;
}

}  // namespace dlock::detail
