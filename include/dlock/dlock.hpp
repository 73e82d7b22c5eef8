// SPDX-License-Identifier: Apache-2.0
/// @file
/// dlock/dlock.hpp: everything of dlock's API in one include.
#pragma once

#include "dlock/client.hpp"
#include "dlock/diagnostics.hpp"
#include "dlock/election.hpp"
#include "dlock/endpoint.hpp"
#include "dlock/error.hpp"
#include "dlock/fencing.hpp"
#include "dlock/key_layout.hpp"
#include "dlock/latch.hpp"
#include "dlock/lease.hpp"
#include "dlock/lock_set.hpp"
#include "dlock/mutex.hpp"
#include "dlock/observer.hpp"
#include "dlock/options.hpp"
#include "dlock/prometheus.hpp"
#include "dlock/reply.hpp"
#include "dlock/semaphore.hpp"
#include "dlock/shared_mutex.hpp"
#include "dlock/transaction.hpp"
#include "dlock/watchdog.hpp"
#include "dlock/with_lock.hpp"
