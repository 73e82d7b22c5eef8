// SPDX-License-Identifier: Apache-2.0
// peer_bench.cjs: the peers' side of dlock's lock_bench. Runs one scenario of one npm library
// against the given loopback ports and prints one JSON object on stdout.
//
//   node peer_bench.cjs --lib node-redlock|redis-semaphore
//        --scenario uncontended|contended|fairness|semaphore|holder --ports P1[,P2,...] --concurrency N
//        [--warm-ms 300] [--measure-ms 1500] [--hold-ms 1] [--retry-ms 0 (library defaults) | R]
//        [--limit 1 (a mutex) | L (redis-semaphore's Semaphore)] [--key-prefix peer:]
//
// The scenarios mirror bench/harness/measure.cpp: N concurrent lockers (async, one event loop)
// on their own keys doing acquire + release; or N workers on one key (a mutex, or a semaphore
// of `limit` permits), holding ~1 ms. Times are process.hrtime (monotonic). One ioredis
// connection per node, with auto-pipelining, shared by all lockers: the peers' best setup.
'use strict';

const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');
const RedlockModule = require('redlock');
const Redlock = RedlockModule.default || RedlockModule;
const { Mutex, RedlockMutex, Semaphore } = require('redis-semaphore');

function parseArgs(argv) {
  const args = { warmMs: 300, measureMs: 1500, holdMs: 1, retryMs: 0, limit: 1, keyPrefix: 'peer:' };
  for (let i = 2; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    args[name] = argv[i + 1];
  }
  for (const k of ['warmMs', 'measureMs', 'holdMs', 'retryMs', 'limit', 'concurrency']) {
    args[k] = Number(args[k]);
  }
  args.ports = String(args.ports).split(',').map(Number);
  return args;
}

const now = () => process.hrtime.bigint();
const ms = (ns) => Number(ns) / 1e6;
const sleep = (t) => new Promise((resolve) => setTimeout(resolve, t));

function percentile(sorted, q) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)))];
}

// Read from the installed package.json (redlock's "exports" hides it from require).
function version(pkg) {
  const file = path.join(__dirname, 'node_modules', pkg, 'package.json');
  return JSON.parse(fs.readFileSync(file, 'utf8')).version;
}

// A lock factory per library: make(key) returns { acquire(), release() }, where acquire
// resolves when held and rejects when the library gave up.
function makeLibrary(args, clients) {
  const ttl = 10000;
  if (args.lib === 'node-redlock') {
    const settings = args.retryMs > 0
      ? { retryCount: -1, retryDelay: args.retryMs, retryJitter: Math.max(1, args.retryMs / 2) }
      : {};
    const redlock = new Redlock(clients, settings);
    redlock.on('error', () => {});  // contention shows as rejected acquires, counted below
    return {
      version: `redlock ${version('redlock')}, ioredis ${version('ioredis')}`,
      variant: args.retryMs > 0 ? `retryDelay ${args.retryMs} ms` : 'defaults (retryDelay 200 ms)',
      make(key) {
        let lock = null;
        return {
          async acquire() { lock = await redlock.acquire([key], ttl); },
          async release() { await lock.release(); lock = null; },
        };
      },
    };
  }
  if (args.lib === 'redis-semaphore') {
    const options = { lockTimeout: ttl };
    if (args.retryMs > 0) options.retryInterval = args.retryMs;
    return {
      version: `redis-semaphore ${version('redis-semaphore')}, ioredis ${version('ioredis')}`,
      variant: args.retryMs > 0 ? `retryInterval ${args.retryMs} ms` : 'defaults (retryInterval 10 ms)',
      make(key) {
        let m;
        if (args.limit > 1) m = new Semaphore(clients[0], key, args.limit, options);
        else if (clients.length === 1) m = new Mutex(clients[0], key, options);
        else m = new RedlockMutex(clients, key, options);
        return { acquire: () => m.acquire(), release: () => m.release() };
      },
    };
  }
  throw new Error(`unknown --lib ${args.lib}`);
}

async function uncontended(args, lib) {
  const start = now() + 20_000_000n;
  const begin = start + BigInt(args.warmMs) * 1_000_000n;
  const end = begin + BigInt(args.measureMs) * 1_000_000n;
  const latencies = [];
  let total = 0, errors = 0;
  async function locker(i) {
    const lock = lib.make(`${args.keyPrefix}u:${i}`);
    while (now() < start) await sleep(1);
    for (;;) {
      const t0 = now();
      if (t0 >= end) return;
      try {
        await lock.acquire();
        await lock.release();
      } catch (e) {
        errors++;
        continue;
      }
      const t1 = now();
      total++;
      if (t0 >= begin && t1 <= end) latencies.push(ms(t1 - t0));
    }
  }
  await Promise.all(Array.from({ length: args.concurrency }, (_, i) => locker(i)));
  latencies.sort((a, b) => a - b);
  return {
    cycles_per_s: latencies.length / (args.measureMs / 1000),
    p50_ms: percentile(latencies, 0.5),
    p99_ms: percentile(latencies, 0.99),
    samples: latencies.length,
    errors,
    operations_total: total,
  };
}

// Mirrors run_contended in bench/harness/measure.cpp: handoffs pair each acquisition with the
// oldest unpaired release made while someone waited; polite workers wait after releasing until
// another worker acquired (greedy ones, in the fairness scenario, contend again at once).
async function contended(args, lib) {
  const start = now() + 20_000_000n;
  const begin = start + BigInt(args.warmMs) * 1_000_000n;
  const end = begin + BigInt(args.measureMs) * 1_000_000n;
  const limit = args.limit;
  const polite = args.scenario !== 'fairness';
  const handoffs = [];
  const perWorker = new Array(args.concurrency).fill(0);
  let total = 0, errors = 0, violations = 0, holders = 0, waiting = 0, seq = 0;
  const releases = [];
  let waiters = [];  // resolvers of polite workers waiting for the next acquisition
  const key = `${args.keyPrefix}c`;

  async function worker(i) {
    const lock = lib.make(key);
    while (now() < start) await sleep(1);
    while (now() < end) {
      waiting++;
      try {
        await lock.acquire();
      } catch (e) {
        errors++;  // the library gave up (its retry limit or acquire timeout)
        continue;
      } finally {
        waiting--;
      }
      const acquired = now();
      if (holders++ >= limit) violations++;
      if (acquired >= begin && acquired <= end) perWorker[i]++;
      total++;
      const mySeq = ++seq;
      if (releases.length > 0) {
        const released = releases.shift();
        if (released >= begin && acquired <= end) handoffs.push(ms(acquired - released));
      }
      for (const wake of waiters.splice(0)) wake();

      await sleep(args.holdMs);
      holders--;
      if (waiting > 0) releases.push(now());
      try {
        await lock.release();
      } catch (e) {
        errors++;
      }
      if (polite && seq === mySeq) {
        await Promise.race([new Promise((resolve) => waiters.push(resolve)), sleep(1000)]);
      }
    }
  }
  await Promise.all(Array.from({ length: args.concurrency }, (_, i) => worker(i)));
  handoffs.sort((a, b) => a - b);
  return {
    acquisitions_per_s: perWorker.reduce((a, b) => a + b, 0) / (args.measureMs / 1000),
    handoff_p50_ms: percentile(handoffs, 0.5),
    handoff_p99_ms: percentile(handoffs, 0.99),
    samples: handoffs.length,
    violations,
    errors,
    per_worker_min: Math.min(...perWorker),
    per_worker_max: Math.max(...perWorker),
    operations_total: total,
  };
}

// The foreign holder of lock_bench's "foreign" scenario: the library takes one key, holds it
// --hold-ms, and lets it go; it takes it again once dlock's waiter has had it (the waiter
// INCRs <key>:taken while holding it; after 300 ms without, it goes on anyway), for
// --measure-ms. Writes the time (CLOCK_MONOTONIC ns, as std::chrono::steady_clock reads it)
// just before each release to --out, one per line: dlock's side pairs its acquisitions with
// them.
async function holder(args, lib, clients) {
  const key = `${args.keyPrefix}foreign`;
  const lock = lib.make(key);
  const end = now() + BigInt(args.measureMs) * 1_000_000n;
  const releases = [];
  while (now() < end) {
    await lock.acquire();
    await sleep(args.holdMs);
    const taken = await clients[0].get(`${key}:taken`);
    releases.push(now());
    await lock.release();
    const giveUp = now() + 300_000_000n;
    while (now() < giveUp && (await clients[0].get(`${key}:taken`)) === taken) await sleep(1);
  }
  fs.writeFileSync(args.out, releases.join('\n') + '\n');
  return { operations_total: releases.length };
}

async function main() {
  const args = parseArgs(process.argv);
  const clients = args.ports.map((port) => new Redis({
    host: '127.0.0.1', port, enableAutoPipelining: true, lazyConnect: true,
    maxRetriesPerRequest: 1,
  }));
  await Promise.all(clients.map((c) => c.connect()));
  const lib = makeLibrary(args, clients);
  const run = args.scenario === 'uncontended' ? uncontended
    : args.scenario === 'holder' ? holder : contended;
  const cpuBefore = process.cpuUsage();
  const figures = await run(args, lib, clients);
  const cpu = process.cpuUsage(cpuBefore);  // this process, user + system, microseconds
  if (figures.operations_total > 0) {
    figures.client_cpu_us_per_op = (cpu.user + cpu.system) / figures.operations_total;
  }
  const out = { library: args.lib, version: lib.version, variant: lib.variant, ...figures };
  process.stdout.write(JSON.stringify(out) + '\n');
  await Promise.all(clients.map((c) => c.quit()));
}

main().then(() => process.exit(0), (e) => {
  process.stderr.write(`peer_bench: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
