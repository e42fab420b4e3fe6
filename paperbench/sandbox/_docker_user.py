"""The unprivileged user of a Docker sandbox (``SandboxSpec.user == "sandbox"``).

Commands run as uid 1000 with its primary group and no other, with ``HOME``, ``USER`` and
``LOGNAME`` set to the user's (``docker exec --user uid:gid``); a timed-out command's killer
runs as that user too when it has to run inside the container. Right after the container
starts, one root command sets the user up (:data:`SETUP_SCRIPT`):

- when the image has no uid 1000 it is made: ``sandbox``, group ``sandbox`` (gid 1000), home
  ``/home/sandbox``, a line each in /etc/passwd and /etc/group (no ``useradd`` needed); an
  image's own uid 1000 is taken as it is, with its home when that lies in /home;
- it owns its home, ``/submission`` and ``/home/submission`` (made when missing, owned
  recursively), and each of ``spec.writable_dirs`` that is missing (then made) or empty (e.g.
  a volume's mount point): a folder with something in it keeps its owner, so ``/`` or
  ``/usr`` never change hands;
- what the host uploads or writes in afterwards belongs to it (the tar members carry its ids).

``no-new-privileges`` keeps it from becoming root again through a setuid binary.
"""

from __future__ import annotations

from dataclasses import dataclass

from paperbench.errors import SandboxError

SANDBOX_UID = 1000
OWNED_DIRS = ("/submission", "/home/submission")
"""Folders the user owns, with everything in them, whatever the image had there."""

# $1: the uid; then the spec's writable_dirs. Prints the user's name, gid and home.
SETUP_SCRIPT = r"""
set -eu
uid=$1; shift
entry=
while IFS= read -r line; do
  IFS=: read -r _ _ id _ <<< "$line"
  if [ "$id" = "$uid" ]; then entry=$line; break; fi
done < /etc/passwd
if [ -z "$entry" ]; then
  group=
  while IFS=: read -r _ _ id _; do [ "$id" = "$uid" ] && group=1; done < /etc/group
  [ -n "$group" ] || echo "sandbox:x:$uid:" >> /etc/group
  entry="sandbox:x:$uid:$uid:paperbench sandbox:/home/sandbox:/bin/bash"
  echo "$entry" >> /etc/passwd
fi
IFS=: read -r name _ _ gid _ home _ <<< "$entry"
case $home in /home/?*) ;; *) home=/home/$name ;; esac
made=()
for d in "$@"; do
  if [ ! -e "$d" ]; then mkdir -p -- "$d"; made+=("$d")
  elif [ -d "$d" ] && [ -z "$(ls -A -- "$d")" ]; then made+=("$d"); fi
done
mkdir -p -- "$home" /submission /home/submission
chown -R -- "$uid:$gid" "$home" /submission /home/submission
if [ ${#made[@]} -gt 0 ]; then chown -- "$uid:$gid" "${made[@]}"; fi
printf '%s\n%s\n%s\n' "$name" "$gid" "$home"
"""


@dataclass(frozen=True)
class SandboxUser:
    """Who runs a sandbox's commands when it is not root."""

    uid: int
    gid: int
    name: str
    home: str

    @property
    def env(self) -> dict[str, str]:
        """What a command of the user's gets in its environment (the caller's own wins)."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    @property
    def docker(self) -> str:
        """``docker exec --user``'s form."""
        return f"{self.uid}:{self.gid}"


def setup_argv(writable_dirs: tuple[str, ...]) -> list[str]:
    """The root command that sets the user up (see the module docstring)."""
    return ["bash", "-c", SETUP_SCRIPT, "setup", str(SANDBOX_UID), *writable_dirs]


def parse_setup(stdout: str) -> SandboxUser:
    """The user the set-up made or found.

    Raises:
        SandboxError: the set-up did not say who it is.
    """
    lines = stdout.splitlines()
    try:
        name, gid, home = lines[-3:]
        return SandboxUser(uid=SANDBOX_UID, gid=int(gid), name=name, home=home)
    except ValueError as exc:
        raise SandboxError(f"cannot set up the sandbox's user: it said {stdout[-300:]!r}") from exc
