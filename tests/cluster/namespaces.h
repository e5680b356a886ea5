// namespaces.h — whether emulated nodes (tools/cluster.sh) can be made on
// this machine, for the tests that run jobs across them.
#ifndef TL_TESTS_CLUSTER_NAMESPACES_H
#define TL_TESTS_CLUSTER_NAMESPACES_H

#include <unistd.h>

#include <string>

#include "tests/launcher/subprocess.h"

// Why emulated nodes cannot be made here, or "" when they can: a network
// namespace named `probe` made, entered and removed (a chroot without /sys,
// say, makes one but cannot enter it).
inline std::string NoNamespaces(const std::string& probe) {
  if (geteuid() != 0) return "emulated nodes need root (ip netns, tc): not root here";
  // `ip netns add` mounts /run/netns the first time; where entering fails
  // (a chroot), that mount is this probe's to take back
  const bool mounted = RunProcess({"mountpoint", "-q", "/run/netns"}, {}, 30, true).status == 0;
  RunResult r = RunProcess({"ip", "netns", "add", probe}, {}, 30, true);
  if (r.status != 0) return "emulated nodes need network namespaces: ip netns add: " + r.output;
  RunResult e = RunProcess({"ip", "netns", "exec", probe, "true"}, {}, 30, true);
  RunProcess({"ip", "netns", "delete", probe}, {}, 30, true);
  if (e.status == 0) return "";
  if (!mounted) RunProcess({"umount", "/run/netns"}, {}, 30, true);
  return "emulated nodes need network namespaces: ip netns exec: " + e.output;
}

#endif
