// SPDX-License-Identifier: Apache-2.0
// net/sentinel.hpp: the master of a redis-sentinel:// endpoint. Private.
//   sentinel_resolver  asks every sentinel for the master on each connect (one round for all
//                      the connections that ask meanwhile), decides by majority
//                      (algo/sentinel_vote.hpp), follows +switch-master on every sentinel and
//                      moves the connections that watch it. One per sentinel endpoint and
//                      process, shared by the connections of every client of that endpoint.
// Thread-safety: shared_for() from any thread; the rest on the I/O thread.
#pragma once

#include <asio/steady_timer.hpp>

#include <memory>
#include <string>
#include <vector>

#include "algo/sentinel_vote.hpp"
#include "dlock/client.hpp"

namespace dlock::detail {

class connection;

// Throws std::system_error(invalid_argument) for a sentinel endpoint that cannot work, as one
// built by hand may be: no sentinels, one listed twice (it would vote twice), an empty host or
// port 0, TLS or a unix socket (neither is supported with Sentinel).
void check_sentinel_endpoint(const endpoint& where);

// How to reach the sentinels of a client with `o`: its timeouts, the sentinels' own
// credentials (client_options::sentinel_user, sentinel_password), short reconnect backoff.
client_options sentinel_options(const client_options& o);

class sentinel_resolver : public std::enable_shared_from_this<sentinel_resolver> {
 public:
  using verdict_handler = unique_function<void(const sentinel_verdict&)>;

  // The resolver of `where` (is_sentinel()) in this process, made on first use.
  static std::shared_ptr<sentinel_resolver> shared_for(const endpoint& where,
                                                       const client_options& options);
  sentinel_resolver(const endpoint& where, const client_options& options);
  ~sentinel_resolver();
  sentinel_resolver(const sentinel_resolver&) = delete;
  sentinel_resolver& operator=(const sentinel_resolver&) = delete;

  // Asks every sentinel, joining a round already under way, and hands over the vote as soon
  // as a majority agrees or every sentinel answered. Also starts following +switch-master.
  void resolve(verdict_handler done);
  // `c` is told of every master that a switch brings (connection::master_moved), while alive.
  void watch(std::weak_ptr<connection> c);

 private:
  struct sentinel {
    host_port where;
    std::shared_ptr<connection> ask;        // SENTINEL GET-MASTER-ADDR-BY-NAME
    std::shared_ptr<connection> subscriber; // SUBSCRIBE +switch-master
    std::unique_ptr<asio::steady_timer> resubscribe;
    bool dropped = false;  // the subscription was lost: vote again once it is back
  };
  static constexpr int max_switch_votes = 25;

  void follow();  // subscribes to +switch-master on every sentinel, once
  void start_round();
  void revote();  // a round after the one under way, if any
  void on_answer(std::size_t i, std::size_t round, sentinel_answer answer);
  void deliver(const sentinel_verdict& v);
  void subscribe(std::size_t i);
  void send_subscribe(std::size_t i);
  void resubscribe_later(std::size_t i);
  void on_switch(const reply& message);

  endpoint where_;
  std::chrono::milliseconds timeout_;
  std::vector<sentinel> sentinels_;
  std::vector<host_port> addresses_;
  std::string ask_command_;

  std::size_t round_ = 0;  // bumped per round; late answers of older rounds are dropped
  bool asking_ = false;
  std::vector<sentinel_answer> answers_;
  std::vector<verdict_handler> waiting_;
  bool following_ = false;
  bool revote_ = false;        // another round is due when this one ends
  int switch_votes_left_ = 0;  // after a switch cue, votes left while the sentinels disagree
  asio::steady_timer revote_timer_;
  std::vector<std::weak_ptr<connection>> watchers_;
};

}  // namespace dlock::detail
