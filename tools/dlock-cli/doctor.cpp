// SPDX-License-Identifier: Apache-2.0
// dlock doctor: checks the Redis nodes a lock would run on (dlock::check_deployment) and prints
// one line per finding with its fix: too few or an even number of nodes, the same server listed
// twice, replicas, an evicting maxmemory-policy, persistence that forgets locks on restart, a
// master with replicas but no quarantine (restart_quarantine) or no min-replicas-to-write; on a
// cluster (--cluster), every master of the slot map, slots without a master,
// cluster-require-full-coverage, and with --copies K, names whose copies share a master.
// Exit 0 when there is nothing to warn about, 1 when there are warnings, 69 when a node could
// not be inspected.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli.hpp"
#include "dlock/diagnostics.hpp"

namespace dlock::cli {

subcommand add_doctor_command(CLI::App& parent, const global_options& g) {
  auto* app = parent.add_subcommand(
      "doctor", "Check the nodes for what would weaken the lock (eviction, no fsync, replicas ...)");
  return {app, [&g]() -> int {
            std::error_code ec;
            auto warnings = check_deployment(make_clients(g), {.copies = g.copies}, ec);
            for (const auto& w : warnings) std::printf("%s\n", to_string(w).c_str());
            if (warnings.empty()) std::printf("no warnings: the deployment looks sound\n");
            if (ec) return exit_unavailable;
            return warnings.empty() ? exit_ok : 1;
          }};
}

}  // namespace dlock::cli
