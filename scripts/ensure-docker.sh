#!/usr/bin/env bash
# Make sure this machine can run paperbench's sandboxes: installs docker.io, debootstrap,
# bubblewrap, slirp4netns, iptables and xfsprogs with apt-get when missing, and starts dockerd
# in the background when no engine answers. Idempotent: a second run changes nothing. Needs
# root (or sudo) for installs, mounts and dockerd.
#
# The dockerd it starts keeps its data (images, containers' writable layers) on an XFS file
# system mounted with pquota: a sparse loop image ($XFS_IMAGE, ${XFS_GB} GB at most, grown only
# as written) mounted at $DATA_ROOT. There Docker caps each container's writable layer
# (`storage_opt size`), so a sandbox's disk cap leaves its root file system writable (apt-get
# install works). PAPERBENCH_DOCKER_XFS=0 starts dockerd on its default data root instead.
#
# Where the kernel cannot mount XFS with pquota, dockerd keeps its default data root and the
# sandboxes' disk caps use a loop-mounted ext4 image each (said on the console).
# A dockerd this script started earlier on a data root without that support (its output goes to
# $LOG) is restarted on the XFS data root when no container runs (the paperbench-* images are
# carried over with docker save/load); with running containers it is left alone unless
# --restart is given (their containers are then stopped, and said so). A dockerd started
# otherwise is never touched: the script says what it would need instead.
set -euo pipefail

LOG=${PAPERBENCH_DOCKERD_LOG:-/var/log/paperbench-dockerd.log}
WAIT_S=${PAPERBENCH_DOCKERD_WAIT:-60}
USE_XFS=${PAPERBENCH_DOCKER_XFS:-1}
DATA_ROOT=${PAPERBENCH_DOCKER_DATA_ROOT:-/var/lib/paperbench-docker}
XFS_IMAGE=${PAPERBENCH_DOCKER_XFS_IMAGE:-/var/lib/paperbench-docker.xfs}
XFS_GB=${PAPERBENCH_DOCKER_XFS_GB:-100}
RESTART=0
for arg in "$@"; do
  case "$arg" in
    --restart) RESTART=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) printf 'ensure-docker: unknown argument %s (usage: ensure-docker.sh [--restart])\n' "$arg" >&2; exit 2 ;;
  esac
done
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
if [ "$USE_XFS" != 0 ]; then
  command -v mkfs.xfs >/dev/null 2>&1 || missing+=(xfsprogs)          # the data root's file system
fi
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  say "installing: $pkgs"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $pkgs
fi

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
server_version() { docker version --format '{{.Server.Version}}' 2>/dev/null; }
engine_root() { docker info --format '{{.DockerRootDir}}' 2>/dev/null; }

# Whether folder $1 is on XFS mounted with project quotas (what overlay2's storage_opt needs).
xfs_pquota() {
  local fs opts
  fs=$(findmnt -n -o FSTYPE -T "$1" 2>/dev/null) || return 1
  opts=$(findmnt -n -o OPTIONS -T "$1" 2>/dev/null) || return 1
  [ "$fs" = xfs ] && [[ ",$opts," == *,prjquota,* || ",$opts," == *,pquota,* ]]
}

# The pid of the running dockerd, when there is one.
dockerd_pid() { pgrep -x dockerd 2>/dev/null | head -n 1; }

# Whether dockerd $1 was started by this script: its output goes to $LOG.
started_here() {
  [ -n "$1" ] && [ "$($SUDO readlink "/proc/$1/fd/1" 2>/dev/null)" = "$(readlink -f "$LOG")" ]
}

# The running kernel's build configuration, where it can be read (else nothing).
kernel_config() {
  if [ -r /proc/config.gz ]; then zcat /proc/config.gz 2>/dev/null || true
  elif [ -r "/boot/config-$(uname -r)" ]; then cat "/boot/config-$(uname -r)"
  fi
}

# Mount the XFS data root (made on first use); false, said why, when this machine cannot.
mount_data_root() {
  if findmnt -n "$DATA_ROOT" >/dev/null 2>&1; then
    if xfs_pquota "$DATA_ROOT"; then return 0; fi
    say "$DATA_ROOT is mounted but not XFS with pquota; unmount it or set PAPERBENCH_DOCKER_DATA_ROOT"
    return 1
  fi
  if ! grep -qw xfs /proc/filesystems && ! $SUDO modprobe xfs 2>/dev/null; then
    say "this kernel has no XFS"
    return 1
  fi
  if kernel_config | grep '^# CONFIG_XFS_QUOTA is not set' >/dev/null; then  # (no -q: no SIGPIPE)
    say "this kernel has no XFS quotas (CONFIG_XFS_QUOTA), so no XFS data root with pquota"
    return 1
  fi
  local made=0
  $SUDO mkdir -p "$(dirname "$XFS_IMAGE")" "$DATA_ROOT"
  if [ ! -e "$XFS_IMAGE" ]; then
    made=1
    say "making the data root's file system: $XFS_IMAGE (sparse, ${XFS_GB} GB at most, XFS)"
    $SUDO truncate -s "${XFS_GB}G" "$XFS_IMAGE.new"
    $SUDO mkfs.xfs -q -n ftype=1 "$XFS_IMAGE.new"   # d_type: overlay2 needs it
    $SUDO mv "$XFS_IMAGE.new" "$XFS_IMAGE"
  fi
  say "mounting $XFS_IMAGE at $DATA_ROOT (loop, pquota)"
  if ! $SUDO mount -o loop,pquota "$XFS_IMAGE" "$DATA_ROOT" 2>/dev/null; then
    say "cannot mount $XFS_IMAGE with pquota at $DATA_ROOT (a kernel without CONFIG_XFS_QUOTA?)"
    if [ "$made" = 1 ]; then  # made just now, holding nothing: not left behind
      $SUDO rm -f "$XFS_IMAGE"
      $SUDO rmdir "$DATA_ROOT" 2>/dev/null || true
    fi
    return 1
  fi
  xfs_pquota "$DATA_ROOT"
}

start_dockerd() {
  local args=()
  if [ "$USE_XFS" != 0 ]; then
    if mount_data_root; then
      args=(--data-root "$DATA_ROOT")
    else
      say "dockerd starts on its default data root: no storage_opt, so sandboxes cap their" \
        "disk with a loop-mounted ext4 image per sandbox (loop-overlay)"
    fi
  fi
  say "starting dockerd in the background ${args[*]:+(${args[*]}) }(log: $LOG)"
  $SUDO mkdir -p "$(dirname "$LOG")"
  # setsid: dockerd outlives this script and its terminal.
  $SUDO setsid dockerd "${args[@]}" >>"$LOG" 2>&1 < /dev/null &
}

wait_for_engine() {
  for _ in $(seq 1 "$WAIT_S"); do
    if engine_answers; then return 0; fi
    sleep 1
  done
  say "dockerd did not answer within ${WAIT_S}s; the end of its log ($LOG):"
  tail -n 30 "$LOG" >&2 2>/dev/null || true
  return 1
}

report() {
  local root
  root=$(engine_root)
  if xfs_pquota "$root"; then
    say "Docker engine answers (server $(server_version), data root $root: XFS with pquota, disk caps via storage_opt)"
  else
    say "Docker engine answers (server $(server_version), data root $root: no storage_opt, disk caps via a loop-mounted ext4 image per sandbox)"
  fi
}

# Stop dockerd $1 (started here, data root $2) and start it again on the XFS data root,
# carrying over the paperbench images.
restart_on_xfs() {
  local pid=$1 old_root=$2 saved="" images
  images=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep '^paperbench-' | grep -v ':<none>$' || true)
  if [ -n "$images" ]; then
    saved=$(mktemp /var/tmp/paperbench-images.XXXXXX.tar)
    say "saving the paperbench images to $saved (they move to the new data root)"
    # shellcheck disable=SC2086
    docker save -o "$saved" $images
  fi
  say "stopping dockerd (pid $pid, started by this script)"
  $SUDO kill -TERM "$pid"
  for _ in $(seq 1 "$WAIT_S"); do
    if ! $SUDO kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 1
  done
  if $SUDO kill -0 "$pid" 2>/dev/null; then
    say "dockerd (pid $pid) did not stop within ${WAIT_S}s; left as it is"
    [ -z "$saved" ] || rm -f "$saved"
    return 1
  fi
  start_dockerd
  wait_for_engine || return 1
  if [ -n "$saved" ]; then
    say "loading the paperbench images into the new data root"
    docker load -q -i "$saved" >/dev/null
    rm -f "$saved"
  fi
  say "the old data root $old_root is left as it is (remove it when nothing needs it)"
}

if engine_answers; then
  root=$(engine_root)
  pid=$(dockerd_pid)
  if [ "$USE_XFS" = 0 ] || xfs_pquota "$root"; then
    report
    exit 0
  fi
  if ! started_here "$pid"; then
    report
    say "this dockerd was not started by this script: it is left alone. For a writable root" \
      "under a disk cap give it a data root on XFS mounted with pquota (dockerd --data-root," \
      "or \"data-root\" in /etc/docker/daemon.json), or stop it and run this script"
    exit 0
  fi
  if ! mount_data_root; then  # before anything is stopped: nothing to gain here
    report
    say "dockerd (pid $pid, started by this script) stays on $root: this machine cannot give" \
      "it an XFS data root with pquota"
    exit 0
  fi
  running=$(docker ps -q | wc -l)
  if [ "$running" -gt 0 ] && [ "$RESTART" = 0 ]; then
    report
    say "dockerd (pid $pid, started by this script) runs on $root without storage_opt support," \
      "but $running container(s) run: not restarting it. Run scripts/ensure-docker.sh" \
      "--restart to stop them and move it to the XFS data root $DATA_ROOT"
    exit 0
  fi
  if [ "$running" -gt 0 ]; then
    say "--restart: stopping dockerd stops its $running running container(s)"
  fi
  say "restarting dockerd (started by this script) on the XFS data root $DATA_ROOT:" \
    "$root has no storage_opt support"
  restart_on_xfs "$pid" "$root" || exit 1
  report
  exit 0
fi

if [ -n "$(dockerd_pid)" ]; then
  say "dockerd runs but does not answer yet; waiting"
else
  start_dockerd
fi
wait_for_engine || exit 1
report
