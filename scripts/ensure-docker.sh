#!/usr/bin/env bash
# Make sure this machine can run paperbench's sandboxes: installs docker.io, debootstrap,
# bubblewrap, slirp4netns and iptables with apt-get when missing, and starts dockerd in the
# background when no engine answers. Idempotent: a second run changes nothing. Needs root (or sudo) for installs/dockerd.
set -euo pipefail

LOG=${PAPERBENCH_DOCKERD_LOG:-/var/log/paperbench-dockerd.log}
WAIT_S=${PAPERBENCH_DOCKERD_WAIT:-30}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

say() { printf 'ensure-docker: %s\n' "$*" >&2; }

missing=()
command -v docker >/dev/null 2>&1 || missing+=(docker.io)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)   # the local sandbox's network=full
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  say "installing: $pkgs"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $pkgs
fi

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if engine_answers; then
  say "Docker engine answers (server $(docker version --format '{{.Server.Version}}'))"
  exit 0
fi

if pgrep -x dockerd >/dev/null 2>&1; then
  say "dockerd runs but does not answer yet; waiting"
else
  say "starting dockerd in the background (log: $LOG)"
  $SUDO mkdir -p "$(dirname "$LOG")"
  # setsid: dockerd outlives this script and its terminal.
  $SUDO setsid dockerd >>"$LOG" 2>&1 < /dev/null &
fi

for _ in $(seq 1 "$WAIT_S"); do
  if engine_answers; then
    say "Docker engine answers (server $(docker version --format '{{.Server.Version}}'))"
    exit 0
  fi
  sleep 1
done

say "dockerd did not answer within ${WAIT_S}s; the end of its log ($LOG):"
tail -n 30 "$LOG" >&2 2>/dev/null || true
exit 1
