// SPDX-License-Identifier: Apache-2.0
// tests/fault/netns_lab.hpp: a private network of Linux network namespaces, for the nemesis.
//   netns_lab   one bridge namespace (a Linux bridge, no uplink) and one namespace per member
//               (a redis-server, a worker process), each joined to the bridge by a veth pair,
//               with an address of its own on a /24 that exists only on these links; this
//               process joins the bridge too, by one more veth pair, to start and watch the
//               members. Made by the constructor, removed by the destructor (and stale labs
//               of dead test processes, with their processes, at the next start). The /24 is
//               one this machine routes nowhere else. Needs root, `ip` and, for one-way cuts,
//               `iptables` (scripts/bootstrap installs both).
//   Faults, each undone by heal():
//     cut(m)            m's link to the bridge goes down: nothing passes either way, without a
//                       RST or FIN (the peers' TCP retransmits into the void); once ARP gives up
//                       (about 3 s) a peer's new connects fail with EHOSTUNREACH, as across a
//                       real LAN whose host went away
//     cut_between(a, b) a and b cannot reach each other (iptables DROP in a, both directions);
//                       everyone else still reaches both
//     drop_from(a, b)   one way: a drops what comes from b (iptables INPUT); what a sends still
//                       reaches b, so a's requests run on b but their replies never arrive
// Not thread-safe: one test thread drives it.
#pragma once

#include <string>
#include <vector>

namespace dlock::fault {

class netns_lab {
 public:
  // Why this machine cannot run a lab ("" when it can): not root, no `ip`, namespaces refused.
  static std::string unavailable();
  // Why one-way cuts and cut_between cannot work here ("" when they can): no `iptables`.
  static std::string no_iptables();

  netns_lab();
  ~netns_lab();
  netns_lab(const netns_lab&) = delete;
  netns_lab& operator=(const netns_lab&) = delete;

  // A new member: its index, from 0.
  int add_member();
  int members() const noexcept { return static_cast<int>(members_.size()); }
  const std::string& address(int member) const;  // "10.x.y.z"
  // The argv prefix that runs a program inside the member's namespace.
  std::vector<std::string> launcher(int member) const;
  // Moves the calling thread into the member's namespace (setns): the sockets it opens from
  // then on are the member's. For a thread of its own, which then stays there.
  void enter(int member) const;

  void cut(int member);
  void cut_between(int a, int b);
  void drop_from(int a, int b);
  // Every link up and every rule gone.
  void heal();
  // What the faults in force are, for the test's log: "cut 2; drop 1<-0".
  std::string faults() const;

 private:
  struct member {
    std::string ns, inside_link, bridge_link, address;
    bool cut = false;
    bool filtered = false;
  };
  std::string name(const std::string& suffix) const;
  void iptables(int member, const std::vector<std::string>& rule);

  std::string prefix_;  // "dlk<pid>"
  std::string subnet_;  // "10.x.y."
  std::string bridge_ns_, host_link_;
  std::vector<member> members_;
  std::vector<std::string> in_force_;
};

}  // namespace dlock::fault
