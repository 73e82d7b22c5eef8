// SPDX-License-Identifier: Apache-2.0
// reply_reader: RESP2 decoding of every reply type, replies split at any byte, pipelines of
// several replies in one chunk, and streams that are not RESP at all.
#include "resp/reply_reader.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dlock/error.hpp"

namespace dlock::detail {
namespace {

// Feeds all of `bytes` at once and returns every complete reply.
std::vector<reply> decode(std::string_view bytes) {
  reply_reader reader;
  reader.feed(bytes);
  std::vector<reply> out;
  for (;;) {
    std::error_code ec;
    auto r = reader.next(ec);
    EXPECT_FALSE(ec) << ec.message();
    if (ec || !r) break;
    out.push_back(std::move(*r));
  }
  return out;
}

reply decode_one(std::string_view bytes) {
  auto all = decode(bytes);
  EXPECT_EQ(all.size(), 1u) << bytes;
  return all.empty() ? reply{} : all.front();
}

// Replies compare by rendering plus kind, recursively; enough to spot any difference here.
void expect_same(const reply& a, const reply& b) {
  ASSERT_EQ(a.type(), b.type()) << a.to_string() << " vs " << b.to_string();
  EXPECT_EQ(a.integer(), b.integer());
  EXPECT_EQ(a.str(), b.str());
  ASSERT_EQ(a.elements().size(), b.elements().size());
  for (std::size_t i = 0; i < a.elements().size(); ++i)
    expect_same(a.elements()[i], b.elements()[i]);
}

TEST(ReplyReaderTest, SimpleString) {
  reply r = decode_one("+OK\r\n");
  EXPECT_EQ(r.type(), reply::kind::status);
  EXPECT_TRUE(r.is_string());
  EXPECT_EQ(r.str(), "OK");
}

TEST(ReplyReaderTest, Error) {
  reply r = decode_one("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
  EXPECT_TRUE(r.is_error());
  EXPECT_FALSE(r.is_string());
  EXPECT_EQ(r.str(), "WRONGTYPE Operation against a key holding the wrong kind of value");
}

TEST(ReplyReaderTest, Integers) {
  EXPECT_EQ(decode_one(":0\r\n").integer(), 0);
  EXPECT_EQ(decode_one(":42\r\n").integer(), 42);
  EXPECT_EQ(decode_one(":-7\r\n").integer(), -7);
  reply big = decode_one(":9223372036854775807\r\n");
  EXPECT_TRUE(big.is_integer());
  EXPECT_EQ(big.integer(), INT64_MAX);
  EXPECT_EQ(decode_one(":-9223372036854775808\r\n").integer(), INT64_MIN);
}

TEST(ReplyReaderTest, BulkStringsAreBinarySafe) {
  reply r = decode_one("$5\r\nhello\r\n");
  EXPECT_EQ(r.type(), reply::kind::string);
  EXPECT_EQ(r.str(), "hello");

  reply empty = decode_one("$0\r\n\r\n");
  EXPECT_EQ(empty.type(), reply::kind::string);
  EXPECT_EQ(empty.str(), "");

  using namespace std::string_literals;
  reply binary = decode_one("$7\r\na\r\nb\0c\xff\r\n"s);
  EXPECT_EQ(binary.str(), "a\r\nb\0c\xff"s);
}

TEST(ReplyReaderTest, NilBulkAndNilArray) {
  EXPECT_TRUE(decode_one("$-1\r\n").is_nil());
  EXPECT_TRUE(decode_one("*-1\r\n").is_nil());
}

TEST(ReplyReaderTest, Arrays) {
  reply empty = decode_one("*0\r\n");
  EXPECT_TRUE(empty.is_array());
  EXPECT_TRUE(empty.elements().empty());

  reply mixed = decode_one("*5\r\n:1\r\n$3\r\nfoo\r\n$-1\r\n+OK\r\n-ERR bad\r\n");
  ASSERT_TRUE(mixed.is_array());
  ASSERT_EQ(mixed.elements().size(), 5u);
  EXPECT_EQ(mixed.elements()[0].integer(), 1);
  EXPECT_EQ(mixed.elements()[1].str(), "foo");
  EXPECT_TRUE(mixed.elements()[2].is_nil());
  EXPECT_EQ(mixed.elements()[3].type(), reply::kind::status);
  EXPECT_TRUE(mixed.elements()[4].is_error());
  EXPECT_EQ(mixed.elements()[4].str(), "ERR bad");
}

TEST(ReplyReaderTest, NestedArrays) {
  // [[1, [a, nil]], [], b]
  reply r = decode_one("*3\r\n*2\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n*0\r\n$1\r\nb\r\n");
  ASSERT_TRUE(r.is_array());
  ASSERT_EQ(r.elements().size(), 3u);
  const reply& first = r.elements()[0];
  ASSERT_TRUE(first.is_array());
  ASSERT_EQ(first.elements().size(), 2u);
  EXPECT_EQ(first.elements()[0].integer(), 1);
  const reply& inner = first.elements()[1];
  ASSERT_TRUE(inner.is_array());
  ASSERT_EQ(inner.elements().size(), 2u);
  EXPECT_EQ(inner.elements()[0].str(), "a");
  EXPECT_TRUE(inner.elements()[1].is_nil());
  EXPECT_TRUE(r.elements()[1].is_array());
  EXPECT_TRUE(r.elements()[1].elements().empty());
  EXPECT_EQ(r.elements()[2].str(), "b");
  EXPECT_EQ(r.to_string(), R"([[(integer) 1, ["a", (nil)]], [], "b"])");
}

// The deepest nesting hiredis reads (8 arrays), closing all at once, then a reply after it:
// each array ends where its last element does, however deep that is.
TEST(ReplyReaderTest, ArraysThatEndTogetherAtEveryDepth) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += "*1\r\n";
  bytes += ":5\r\n*2\r\n*0\r\n*-1\r\n";
  auto all = decode(bytes);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].to_string(), "[[[[[[[[(integer) 5]]]]]]]]");
  EXPECT_EQ(all[1].to_string(), "[[], (nil)]");
  reply_reader reader;
  reader.feed("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n");
  std::error_code ec;
  EXPECT_FALSE(reader.next(ec));
  EXPECT_EQ(ec, errc::protocol_error) << "9 deep";
}

// Several replies of every type back to back, as a pipelined response arrives.
const std::string pipeline =
    "+OK\r\n"
    ":12345\r\n"
    "$12\r\nhello\r\nworld\r\n"
    "$-1\r\n"
    "-NOSCRIPT No matching script\r\n"
    "*3\r\n*1\r\n:7\r\n$0\r\n\r\n*-1\r\n"
    "*0\r\n"
    "$3\r\nend\r\n";

TEST(ReplyReaderTest, PipelinedRepliesInOneChunk) {
  auto all = decode(pipeline);
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all[0].str(), "OK");
  EXPECT_EQ(all[1].integer(), 12345);
  EXPECT_EQ(all[2].str(), "hello\r\nworld");
  EXPECT_TRUE(all[3].is_nil());
  EXPECT_TRUE(all[4].is_error());
  ASSERT_TRUE(all[5].is_array());
  EXPECT_EQ(all[5].elements()[0].elements()[0].integer(), 7);
  EXPECT_TRUE(all[5].elements()[2].is_nil());
  EXPECT_TRUE(all[6].is_array());
  EXPECT_EQ(all[7].str(), "end");
}

// Feeding one byte at a time, or in chunks of any size, gives the same replies: a reply is
// handed out only when complete, and never twice.
TEST(ReplyReaderTest, ArbitraryChunkBoundaries) {
  auto expected = decode(pipeline);
  ASSERT_EQ(expected.size(), 8u);
  for (std::size_t chunk = 1; chunk <= pipeline.size(); ++chunk) {
    SCOPED_TRACE("chunk size " + std::to_string(chunk));
    reply_reader reader;
    std::vector<reply> got;
    for (std::size_t pos = 0; pos < pipeline.size(); pos += chunk) {
      reader.feed(std::string_view(pipeline).substr(pos, chunk));
      for (;;) {
        std::error_code ec;
        auto r = reader.next(ec);
        ASSERT_FALSE(ec) << ec.message();
        if (!r) break;
        got.push_back(std::move(*r));
      }
    }
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) expect_same(got[i], expected[i]);
  }
}

TEST(ReplyReaderTest, ByteByByteReportsNothingUntilComplete) {
  const std::string bulk = "$10\r\n0123456789\r\n";
  reply_reader reader;
  for (std::size_t i = 0; i + 1 < bulk.size(); ++i) {
    reader.feed(bulk.substr(i, 1));
    std::error_code ec;
    EXPECT_FALSE(reader.next(ec).has_value()) << "after byte " << i;
    EXPECT_FALSE(ec);
  }
  reader.feed(bulk.substr(bulk.size() - 1));
  std::error_code ec;
  auto r = reader.next(ec);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->str(), "0123456789");
  EXPECT_FALSE(reader.next(ec).has_value());
  EXPECT_FALSE(ec);
}

TEST(ReplyReaderTest, EmptyReaderHasNothing) {
  reply_reader reader;
  std::error_code ec = errc::timeout;
  EXPECT_FALSE(reader.next(ec).has_value());
  EXPECT_FALSE(ec);
  reader.feed("");
  EXPECT_FALSE(reader.next(ec).has_value());
  EXPECT_FALSE(ec);
}

void expect_protocol_error(std::string_view bytes) {
  reply_reader reader;
  reader.feed(bytes);
  std::error_code ec;
  auto r = reader.next(ec);
  EXPECT_EQ(ec, errc::protocol_error) << bytes;
  EXPECT_FALSE(r.has_value());
}

TEST(ReplyReaderTest, GarbageIsAProtocolError) {
  expect_protocol_error("HTTP/1.1 200 OK\r\n");
  expect_protocol_error("SSH-2.0-OpenSSH_9.2\r\n");
  expect_protocol_error("hello");
  expect_protocol_error("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");  // a TLS ClientHello
  // Garbage after a good reply: the good one is still handed out first.
  reply_reader reader;
  reader.feed("+OK\r\nHTTP/1.1 400 Bad Request\r\n");
  std::error_code ec;
  auto first = reader.next(ec);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(ec);
  EXPECT_EQ(first->str(), "OK");
  EXPECT_FALSE(reader.next(ec).has_value());
  EXPECT_EQ(ec, errc::protocol_error);
}

TEST(ReplyReaderTest, StaysFailedAfterAProtocolError) {
  reply_reader reader;
  reader.feed("GET / HTTP/1.1\r\n");
  std::error_code ec;
  EXPECT_FALSE(reader.next(ec).has_value());
  EXPECT_EQ(ec, errc::protocol_error);
  // More bytes, even valid RESP, are ignored without an exception; the error persists.
  EXPECT_NO_THROW(reader.feed("+OK\r\n"));
  ec.clear();
  EXPECT_FALSE(reader.next(ec).has_value());
  EXPECT_EQ(ec, errc::protocol_error);
}

TEST(ReplyReaderTest, MalformedLengthsAreProtocolErrors) {
  expect_protocol_error("$abc\r\nxyz\r\n");  // bulk length not a number
  expect_protocol_error("$-2\r\n");          // negative length other than -1
  expect_protocol_error("*-5\r\n");
  expect_protocol_error(":12abc\r\n");  // integer not a number
  // hiredis 0.14 refuses arrays nested deeper than 7 levels; no Redis reply nests that deep.
  std::string deep;
  for (int i = 0; i < 9; ++i) deep += "*1\r\n";
  expect_protocol_error(deep + ":1\r\n");
}

TEST(ReplyReaderTest, GarbageSplitByteByByte) {
  const std::string garbage = "HTTP/1.1 200 OK\r\n";
  reply_reader reader;
  std::error_code ec;
  for (std::size_t i = 0; i < garbage.size() && !ec; ++i) {
    reader.feed(garbage.substr(i, 1));
    EXPECT_FALSE(reader.next(ec).has_value());
  }
  EXPECT_EQ(ec, errc::protocol_error);
}

}  // namespace
}  // namespace dlock::detail
