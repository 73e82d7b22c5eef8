// SPDX-License-Identifier: Apache-2.0
// script.hpp: how to run the embedded Lua scripts (algo/request.hpp) on a node. Private.
//   run_script         EVALSHA, falling back to EVAL when the node answers NOSCRIPT
//   run_script_direct  the same, blocking, on the caller's thread when the connection is idle
//   run_request / run_request_direct  the same for an engine's request
#pragma once

#include <chrono>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "algo/request.hpp"
#include "dlock/client.hpp"

namespace dlock::detail {

// Runs `s` on `node`. The first try is EVALSHA; a NOSCRIPT reply (after a restart, failover or
// SCRIPT FLUSH) is answered by one EVAL with the body, which also reloads the cache. Both tries
// share the one `timeout`. The handler gets the script's reply or the error.
void run_script(client& node, const script& s, std::initializer_list<std::string_view> keys,
                std::initializer_list<std::string_view> args, std::chrono::milliseconds timeout,
                unique_function<void(std::error_code, reply)> handler);

// The same for keys and arguments made at run time (any number of them).
void run_script(client& node, const script& s, std::vector<std::string> keys,
                std::vector<std::string> args, std::chrono::milliseconds timeout,
                unique_function<void(std::error_code, reply)> handler);

// The blocking form of run_script for a thread that is not the I/O thread: when the node's
// connection is idle (client::try_exec_direct), this thread sends EVALSHA (and EVAL on
// NOSCRIPT) and reads the reply itself, within `timeout` for both, and returns true with the
// reply in `out` and the error in `ec`. Returns false having sent nothing when the connection
// is busy, connecting or TLS: then use run_script.
// The arguments are views: nothing is copied (a release's direct path allocated three times).
bool run_script_direct(client& node, const script& s, const script_keys& keys,
                       std::initializer_list<std::string_view> args,
                       std::chrono::milliseconds timeout, std::error_code& ec, reply& out);

// run_script and run_script_direct for a request (`node` is the request's node).
void run_request(client& node, request r, unique_function<void(std::error_code, reply)> handler);
bool run_request_direct(client& node, const request& r, std::error_code& ec, reply& out);

}  // namespace dlock::detail
