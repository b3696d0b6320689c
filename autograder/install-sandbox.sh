#!/usr/bin/env bash
# Install and check the grading sandbox (bubblewrap). Safe to run again.
#   autograder/install-sandbox.sh          install bwrap when missing (as root, Debian/Ubuntu)
#                                          and check that it can start a sandbox here
set -uo pipefail
say() { printf '[ptxlab] %s\n' "$*"; }

if ! command -v bwrap >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing bubblewrap (the grading sandbox)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) ||
      { say "apt-get could not install bubblewrap"; exit 1; }
  else
    say "bwrap is missing: ask an administrator for 'apt-get install bubblewrap' (or dnf install bubblewrap)"
    exit 1
  fi
fi

# bwrap needs unprivileged user namespaces (on by default on Debian 12 and Ubuntu; on some
# systems: sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap).
if bwrap --ro-bind / / --unshare-user --unshare-pid --unshare-net --proc /proc --dev /dev \
     --uid 65534 --gid 65534 --die-with-parent -- /bin/true 2>/tmp/ptxlab-bwrap-check.$$; then
  say "grading sandbox ready: $(bwrap --version)"
  rm -f /tmp/ptxlab-bwrap-check.$$
else
  say "bwrap is installed but cannot start a sandbox here: $(cat /tmp/ptxlab-bwrap-check.$$)"
  say "enable unprivileged user namespaces, or grade with PTXLAB_SANDBOX=none (trusted notebooks only)"
  rm -f /tmp/ptxlab-bwrap-check.$$
  exit 1
fi
