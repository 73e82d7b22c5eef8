// SPDX-License-Identifier: Apache-2.0
#include "resp/reply_reader.hpp"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <new>

#include "dlock/error.hpp"

namespace dlock::detail {
namespace {

// hiredis 0.14's own functions allocated an array's element table as soon as they read the
// header, for up to INT_MAX elements: one "*1877585808\r\n" from a peer cost a 15 GB table
// (fuzz/regressions/fuzz_reply_reader/). These allocate as the elements come; still, no reply
// dlock deals in comes near this bound, and a longer one is refused, which hiredis reports as
// out of memory and next() as a protocol error.
constexpr int max_array_elements = 1 << 24;

}  // namespace

reply_reader::reply_reader() {
  // The default functions made a redisReply per element (and a copy of each string) that was
  // then converted and freed: a quarter of a lock cycle's client instructions.
  static redisReplyObjectFunctions functions{create_string, create_array, create_integer,
                                             create_nil, free_object};
  reader_ = redisReaderCreateWithFunctions(&functions);
  if (reader_ == nullptr) throw std::bad_alloc();
  reader_->privdata = this;
}

reply_reader::~reply_reader() { redisReaderFree(reader_); }

reply_reader& reply_reader::of(const redisReadTask* task) noexcept {
  return *static_cast<reply_reader*>(task->privdata);
}

// Where an array's elements gather: its level, found through the object hiredis keeps for the
// array (task->obj, which its elements see as parent->obj), not through hiredis's own task
// stack, whose layout differs between versions.
std::size_t reply_reader::depth_of(const redisReadTask* array) const noexcept {
  return static_cast<std::size_t>(static_cast<const level*>(array->obj) - levels_.data());
}

// A reply goes to its array's level (completing the arrays it was the last element of) or, at
// the top, to root_. hiredis needs a non-null object back; it only keeps the root's (for
// free_object) and an array's (as its elements' parent).
void* reply_reader::place(const redisReadTask* task, reply r) {
  if (task->parent == nullptr) {
    root_ = std::move(r);
    return &root_;
  }
  std::size_t depth = depth_of(task->parent);
  for (;;) {
    auto& l = levels_[depth];
    l.elements.push_back(std::move(r));
    if (l.elements.size() < l.expected) return this;
    r = reply::make_array(std::move(l.elements));
    l.elements = {};
    if (depth == 0) {
      root_ = std::move(r);
      return this;
    }
    --depth;
  }
}

// The object functions are called from hiredis's C code: an exception must not cross it. A
// null return is hiredis's out of memory, which next() reports as a protocol error.
template <class Build>
void* reply_reader::guarded(Build build) noexcept {
  try {
    return build();
  } catch (...) {
    return nullptr;
  }
}

void* reply_reader::create_string(const redisReadTask* task, char* text, std::size_t length) {
  auto k = task->type == REDIS_REPLY_ERROR    ? reply::kind::error
           : task->type == REDIS_REPLY_STATUS ? reply::kind::status
                                              : reply::kind::string;
  return guarded([&] { return of(task).place(task, reply::make_string(k, {text, length})); });
}

void* reply_reader::create_array(const redisReadTask* task, int elements) {
  if (elements > max_array_elements) return nullptr;
  auto& self = of(task);
  return guarded([&]() -> void* {
    if (elements == 0) return self.place(task, reply::make_array({}));
    std::size_t depth = task->parent ? self.depth_of(task->parent) + 1 : 0;
    if (depth >= self.levels_.size()) return nullptr;  // hiredis 0.14 stops at 8 itself
    auto& l = self.levels_[depth];
    l.expected = static_cast<std::size_t>(elements);
    // What the header announces is reserved only up to what dlock's own replies hold: a
    // peer's "*16000000" would otherwise cost a gigabyte before a single element came.
    l.elements.reserve(std::min<std::size_t>(l.expected, 64));
    return &l;
  });
}

void* reply_reader::create_integer(const redisReadTask* task, long long value) {
  return guarded([&] { return of(task).place(task, reply::make_integer(value)); });
}

void* reply_reader::create_nil(const redisReadTask* task) {
  return guarded([&] { return of(task).place(task, reply{}); });
}

// A reply hiredis gives up on (a protocol error midway, the reader freed): what was gathered
// is dropped with the levels' lists (after an error the reader is not used again).
void reply_reader::free_object(void*) {}

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
  return std::move(root_);
}

}  // namespace dlock::detail
