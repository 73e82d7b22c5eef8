// SPDX-License-Identifier: Apache-2.0
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

// hiredis 0.14 allocates an array's element table as soon as it reads the header, for up to
// INT_MAX elements, and frees a partial one by visiting every slot: one "*1877585808\r\n" from
// a peer costs a 15 GB table and seconds on the I/O thread that every lock shares. No reply dlock deals in comes near this bound; a longer one is
// refused, which hiredis reports as out of memory and next() as a protocol error.
constexpr int max_array_elements = 1 << 24;
void* (*hiredis_create_array)(const redisReadTask*, int) = nullptr;

void* create_bounded_array(const redisReadTask* task, int elements) {
  if (elements > max_array_elements) return nullptr;
  return hiredis_create_array(task, elements);
}

}  // namespace

reply_reader::reply_reader() : reader_(redisReaderCreate()) {
  if (reader_ == nullptr) throw std::bad_alloc();
  static redisReplyObjectFunctions* const bounded = [this] {
    static redisReplyObjectFunctions functions = *reader_->fn;
    hiredis_create_array = functions.createArray;
    functions.createArray = create_bounded_array;
    return &functions;
  }();
  reader_->fn = bounded;
}

reply_reader::~reply_reader() { redisReaderFree(reader_); }

void reply_reader::feed(std::string_view bytes) {
  // hiredis also refuses bytes once the stream was found not to be RESP (or an array too long);
  // that is not an allocation failure, and next() keeps reporting the protocol error.
  if (reader_->err) return;
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
