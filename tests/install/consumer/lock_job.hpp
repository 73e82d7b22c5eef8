// SPDX-License-Identifier: Apache-2.0
// lock_job.hpp: the consumer library's API (libconsumer.so, tests/install/consumer). No dlock
// type appears here: the executable sees only this library, which holds dlock inside.
#pragma once

namespace consumer {

// Takes a lock with a fencing token on the Redis server at `url` and releases it; returns 0
// when both worked, else 1 after saying why on stderr.
int lock_job(const char* url);

}  // namespace consumer
