"""Blacklists: the URLs an agent must not reach, and matching a request URL against them.

A blacklist file (``blacklists/<id>.txt`` here, ``blacklist.txt`` in a PaperBench data
directory) holds one URL per line; ``#`` starts a comment, blank lines are skipped, and a file
whose only word is ``none`` is empty.

Both sides are normalised before comparing, and a URL is refused when any of the ways a
client or server may read it matches a rule (refusing a variant is the safe side):

- the scheme, user info, port and query are dropped;
- the host is percent-decoded, cut at a NUL, lower-cased, put in its IDNA (punycode) form
  (``ｇｉｔｈｕｂ。com`` is ``github.com``), loses every trailing dot (with any port), then a
  leading ``www.``;
- the path is percent-decoded until nothing changes (``%252F`` is ``/``) and split into
  segments at ``/`` and ``\\`` (so ``%2F`` splits, trailing and doubled slashes vanish);
- each segment ends at its first ``;``, ``?``, ``#`` or NUL once decoded (``secret;x``,
  ``secret%3Bx`` and ``secret%00.html`` are ``secret``), is stripped of whitespace, and unless
  it is ``.`` or ``..``, lower-cased (``casefold``), stripped of trailing dots and spaces, and
  of a ``.git`` suffix;
- ``.`` segments are dropped; ``..`` is read both resolved and kept as a literal segment (for a
  server that does not resolve it); ``..;`` is ``..``, as Tomcat reads it;
- a ``\\`` anywhere is read both as ``/`` (browsers: ``http://host\\path``) and as written
  (``urllib``: ``http://a\\@b/`` is host ``b``); a ``#`` both as a fragment (dropped) and as
  part of the path (a raw request-target some servers keep whole).

A rule is read the usual way only (``\\`` as ``/``, fragment dropped, ``..`` resolved).

A rule then matches a URL whose host is the rule's host and whose path begins with the
rule's path *on a segment boundary*: ``example.com/code`` matches ``example.com/code/x`` but
not ``example.com/codebase``. A host-only rule refuses the whole host (not its subdomains).

GitHub repositories have many addresses, all reduced to ``github.com/<owner>/<repo>``:

- ``github.com/o/r``, ``.git``, ``/tree/…``, ``/blob/…``, ``/raw/…``, ``/archive/…``,
  ``/zipball/…``, ``/releases/download/…``, git smart-HTTP (``/o/r.git/info/refs``,
  ``/git-upload-pack``), and the wiki (``o/r.wiki.git``);
- ``codeload.github.com/o/r/…`` (``zip``, ``tar.gz``, ``legacy.zip``, ``legacy.tar.gz``),
  ``raw.githubusercontent.com/o/r/…`` and ``media.githubusercontent.com/media/o/r/…`` (LFS);
- ``api.github.com/repos/o/r/…`` (``zipball``, ``tarball``, ``contents``, ``git``,
  ``releases/assets``, …) and ``uploads.github.com/repos/o/r/…``;
- ``git@github.com:o/r.git`` and ``github.com:o/r`` (scp-like syntax; ``host:8080/x`` is a
  port).

A GitHub rule that points inside a repository (``github.com/o/r/tree/main/sub``) refuses the
whole repository: its archives and clones hold that path anyway. ``github.com/o`` refuses
every repository of ``o``. Gists are their own namespace: ``gist.github.com/<user>/<id>``,
``gist.github.com/<id>`` and ``gist.githubusercontent.com/<user>/<id>/raw/…`` all reduce to
the gist's id; a repository rule does not cover gists.

``api.github.com/repositories/<id>/…`` (and ``uploads.github.com``) name a repository by
numeric id, which cannot be resolved offline: while the blacklist holds any ``github.com``
rule (host, owner or repository; not a gist), every such route below the id is refused under
the rule name ``GITHUB_ID_RULE``. ``api.github.com/repositories/<id>`` itself (metadata) passes.

Not covered: ``objects.githubusercontent.com`` also names release assets by numeric
repository id, but it serves every repository's releases, so it is not refused. A download
through ``github.com/o/r/releases/download/…`` or ``api.github.com/repos/o/r/releases/assets/…``
is refused before its redirect there; an asset URL obtained some other way passes.
``<owner>.github.io`` (GitHub Pages) is matched as an ordinary host, since a paper's project
page is usually fair to read. Only URLs are matched: request bodies (a GraphQL query naming a
repository) are not read, and an IP literal is not mapped to the names it serves.

This module uses only the standard library so the egress proxy process, which runs in its own
environment, can load it by path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = [
    "GITHUB_ID_RULE",
    "Blacklist",
    "BlacklistHit",
    "BlacklistRule",
    "normalise_url",
    "read_blacklist",
]

GITHUB = "github.com"
GIST = "gist.github.com"
GITHUB_ID_RULE = "github.com/* (repository id cannot be checked offline)"
"""The rule a hit names when it refuses an id-addressed GitHub repository route."""
_GITHUB_REPO_HOSTS = frozenset({"github.com", "codeload.github.com", "raw.githubusercontent.com"})
_GITHUB_API_HOSTS = frozenset({"api.github.com", "uploads.github.com"})
_GITHUB_PREFIXED_HOSTS = {
    "api.github.com": "repos",
    "uploads.github.com": "repos",
    "media.githubusercontent.com": "media",
}
_GIST_HOSTS = frozenset({"gist.github.com", "gist.githubusercontent.com"})
_SCP_LIKE = re.compile(r"^(?:(?P<user>[\w.-]+)@)?(?P<host>[\w.-]+):(?!//)(?P<path>.*)$")
_PORT_AND_PATH = re.compile(r"^\d*(?:/|$)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_SEGMENT_END = re.compile(r"[;?#\x00]")


@dataclass(frozen=True, slots=True)
class NormalisedUrl:
    """A URL reduced to what matching compares: a site and its path segments."""

    site: str
    segments: tuple[str, ...]

    def __str__(self) -> str:
        return "/".join((self.site, *self.segments))


@dataclass(frozen=True, slots=True)
class BlacklistRule:
    """One blacklist line, as written and normalised."""

    raw: str
    target: NormalisedUrl
    host: str
    """The rule's own host, normalised (``codeload.github.com`` stays itself)."""
    line: int | None = None

    @classmethod
    def parse(cls, raw: str, *, line: int | None = None) -> BlacklistRule:
        """Raises: ValueError: ``raw`` is not one URL with a host."""
        if any(c.isspace() for c in raw.strip()):
            raise ValueError(f"expected one URL per line, got {raw.strip()!r}")
        return cls(
            raw=raw, target=_normalise_rule(raw), host=_normalise_host(_split(raw)[0]), line=line
        )

    def matches(self, url: NormalisedUrl) -> bool:
        n = len(self.target.segments)
        return url.site == self.target.site and url.segments[:n] == self.target.segments

    @property
    def whole_host(self) -> bool:
        """Whether the rule refuses every URL of its site."""
        return not self.target.segments


@dataclass(frozen=True, slots=True)
class BlacklistHit:
    """Why a URL was refused: the URL, its normal form, and the rule it matched."""

    url: str
    normalised: str
    rule: str
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Blacklist:
    """A paper's blacklist: ``matches(url)`` says which rule, if any, refuses ``url``."""

    rules: tuple[BlacklistRule, ...] = ()
    source: str | None = None
    _by_site: dict[str, tuple[BlacklistRule, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        by_site: dict[str, list[BlacklistRule]] = {}
        for rule in self.rules:
            by_site.setdefault(rule.target.site, []).append(rule)
        object.__setattr__(self, "_by_site", {k: tuple(v) for k, v in by_site.items()})

    @property
    def has_github_rules(self) -> bool:
        """Whether a rule names github.com, an owner or a repository (not a gist)."""
        return GITHUB in self._by_site

    @classmethod
    def from_urls(cls, urls: Iterable[str], *, source: str | None = None) -> Blacklist:
        """Build from bare URLs (e.g. ``SandboxSpec.blacklist``).

        Raises:
            ValueError: an entry is not one URL with a host.
        """
        rules = []
        for url in urls:
            stripped = url.strip()
            if stripped:
                rules.append(BlacklistRule.parse(stripped))
        return cls(rules=tuple(rules), source=source)

    @classmethod
    def parse(cls, text: str, *, source: str | None = None) -> Blacklist:
        """Parse blacklist file content: one URL a line, ``#`` comments, ``none`` for empty.

        Raises:
            ValueError: a line is not a URL with a host (the message names the line).
        """
        rules: list[BlacklistRule] = []
        entries: list[tuple[int, str]] = []
        for number, line in enumerate(text.splitlines(), start=1):
            content = _strip_comment(line)
            if content:
                entries.append((number, content))
        if len(entries) == 1 and entries[0][1].lower() == "none":
            return cls(rules=(), source=source)
        where = f"{source}: " if source else ""
        for number, content in entries:
            if content.lower() == "none":
                raise ValueError(
                    f"{where}line {number}: 'none' must be the only entry of an empty blacklist"
                )
            try:
                rules.append(BlacklistRule.parse(content, line=number))
            except ValueError as exc:
                raise ValueError(f"{where}line {number}: {exc}") from None
        return cls(rules=tuple(rules), source=source)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def urls(self) -> list[str]:
        return [rule.raw for rule in self.rules]

    def matches(self, url: str) -> BlacklistHit | None:
        """The first rule that refuses any reading of ``url``, or None.

        A URL without a host never matches. An id-addressed GitHub repository route is refused
        under ``GITHUB_ID_RULE`` while the blacklist has a GitHub rule (see the module doc).
        """
        readings = _readings(url)
        for normal in readings:
            for rule in self._by_site.get(normal.site, ()):
                if rule.matches(normal):
                    return BlacklistHit(url, str(normal), rule=rule.raw, line=rule.line)
        if self.has_github_rules:
            for normal in readings:
                if _by_repository_id(normal):
                    return BlacklistHit(url, str(normal), rule=GITHUB_ID_RULE)
        return None

    def blocks_host(self, host: str) -> BlacklistHit | None:
        """The host-only rule refusing every URL of ``host`` (checked at CONNECT), or None."""
        name = _normalise_host(host)
        for rule in self.rules:
            if rule.whole_host and rule.host == name:
                return BlacklistHit(url=host, normalised=name, rule=rule.raw, line=rule.line)
        return None


def read_blacklist(path: Path) -> Blacklist:
    """Read a blacklist file.

    Raises:
        ValueError: the file cannot be read or a line is not a URL (the message names it).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read blacklist: {exc}") from None
    return Blacklist.parse(text, source=str(path))


def _strip_comment(line: str) -> str:
    """Drop a ``#`` comment: at the start of a line, or after whitespace (URLs keep fragments)."""
    stripped = line.strip()
    if stripped.startswith("#"):
        return ""
    match = re.search(r"\s#", stripped)
    return stripped[: match.start()].strip() if match else stripped


def _normalise_host(netloc: str) -> str:
    """The host of ``netloc`` (``user@host:port``) as matching compares it, or ``""``."""
    try:
        name = urlsplit("//" + netloc.strip()).hostname or ""
    except ValueError:  # a broken IPv6 literal
        return ""
    name = _ascii_host(unquote(name).split("\x00", 1)[0].strip().lower())
    return name.rstrip(".").removeprefix("www.")


def _ascii_host(name: str) -> str:
    """The IDNA (punycode) form of a Unicode host name; one IDNA rejects stays as written."""
    if name.isascii():
        return name
    try:
        return name.encode("idna").decode("ascii")
    except UnicodeError:
        return name


def _split(url: str, *, fragment: bool = True) -> tuple[str, str]:
    """Split ``url`` into (netloc, path), accepting missing schemes and scp-like git syntax.

    With ``fragment=False`` a ``#`` does not end the path.
    """
    text = url.strip()
    scp = _SCP_LIKE.match(text) if not _SCHEME.match(text) else None
    if scp and (scp["user"] or not _PORT_AND_PATH.match(scp["path"])):
        return scp["host"], "/" + scp["path"]
    if not _SCHEME.match(text) and not text.startswith("/"):
        text = "//" + text
    parts = urlsplit(text, allow_fragments=fragment)
    return parts.netloc, parts.path


def _decode(text: str) -> str:
    """Percent-decode until nothing changes (each pass that changes ``text`` shortens it)."""
    while (decoded := unquote(text)) != text:
        text = decoded
    return text


def _pieces(path: str) -> list[str]:
    """The path's segments, each normalised (see the module doc); dot segments kept."""
    out = []
    for raw in _decode(path).replace("\\", "/").split("/"):
        seg = _SEGMENT_END.split(raw, maxsplit=1)[0].strip()
        if seg not in {".", ".."}:
            seg = seg.casefold().rstrip(". ").removesuffix(".git")
        if seg:
            out.append(seg)
    return out


def _resolved(pieces: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for seg in pieces:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    return tuple(out)


def _repo_name(name: str) -> str:
    return name.removesuffix(".wiki")


def _readings(url: str) -> list[NormalisedUrl]:
    """Each way ``url`` may be read (see the module doc), the usual one first; no duplicates."""
    return list(dict.fromkeys(_all_readings(url)))


def _all_readings(url: str) -> Iterator[NormalisedUrl]:
    for text in (url.replace("\\", "/"), url):
        for fragment in (True, False):
            try:
                netloc, path = _split(text, fragment=fragment)
            except ValueError:  # a broken IPv6 literal
                continue
            host = _normalise_host(netloc)
            if host:
                pieces = _pieces(path)
                yield _site(host, _resolved(pieces))
                yield _site(host, tuple(seg for seg in pieces if seg != "."))


def normalise_url(url: str) -> NormalisedUrl:
    """Reduce ``url`` to the site and path segments matching compares: its usual reading, with
    ``\\`` read as ``/``, the fragment dropped and dot segments resolved (see the module doc).

    Raises:
        ValueError: the URL has no host.
    """
    readings = _readings(url)
    if not readings:
        raise ValueError(f"not a URL with a host: {url!r}")
    return readings[0]


def _site(host: str, segs: tuple[str, ...]) -> NormalisedUrl:
    if host in _GITHUB_REPO_HOSTS:
        return _github(segs)
    prefix = _GITHUB_PREFIXED_HOSTS.get(host)
    if prefix is not None and segs[:1] == (prefix,):
        return _github(segs[1:])
    if host in _GIST_HOSTS:
        return _gist(host, segs)
    return NormalisedUrl(host, segs)


def _github(segs: tuple[str, ...]) -> NormalisedUrl:
    if len(segs) >= 2:
        return NormalisedUrl(GITHUB, (segs[0], _repo_name(segs[1]), *segs[2:]))
    return NormalisedUrl(GITHUB, segs)


def _by_repository_id(url: NormalisedUrl) -> bool:
    """``api.github.com/repositories/<id>/…``: a route below a repository named by id."""
    return (
        url.site in _GITHUB_API_HOSTS
        and len(url.segments) >= 3
        and url.segments[0] == "repositories"
    )


_GIST_ID = re.compile(r"^[0-9a-f]{6,}$")


def _gist(host: str, segs: tuple[str, ...]) -> NormalisedUrl:
    # gist.github.com/<id>, gist.github.com/<user>/<id>, gist.githubusercontent.com/<user>/<id>/…
    for seg in segs[:2]:
        if _GIST_ID.match(seg):
            return NormalisedUrl(GIST, (seg,))
    return NormalisedUrl(host, segs)


def _normalise_rule(url: str) -> NormalisedUrl:
    normal = normalise_url(url)
    if normal.site == GITHUB and len(normal.segments) > 2:
        # A rule inside a repository refuses the whole repository.
        return NormalisedUrl(GITHUB, normal.segments[:2])
    return normal
