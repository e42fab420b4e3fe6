"""Blacklist parsing and URL matching, with property tests for the normalisation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paperbench.sandbox._blacklist import Blacklist, normalise_url, read_blacklist

REPO_RULE = "https://github.com/Owner/Repo"


@pytest.fixture
def blacklist() -> Blacklist:
    return Blacklist.parse(
        "# official code\n"
        f"{REPO_RULE}\n"
        "\n"
        "example.com/code   # a comment after the URL\n"
        "https://gitlab.com/group/project.git\n"
        "git@github.com:scp/style.git\n"
        "https://github.com/big/mono/tree/master/papers/ours\n"
        "https://gist.github.com/someone/0123abcd\n"
        "blocked-host.org\n",
        source="bl.txt",
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/owner/repo",
        "http://github.com/owner/repo",
        "github.com/owner/repo",
        "https://www.github.com/owner/repo",
        "https://GITHUB.COM/OWNER/REPO/",
        "https://github.com/owner/repo.git",
        "https://github.com/owner/repo//",
        "https://github.com/owner/repo?tab=readme#top",
        "https://github.com/owner/repo/tree/main/src",
        "https://github.com/owner/repo/blob/main/train.py",
        "https://github.com/owner/repo/archive/refs/heads/main.zip",
        "https://github.com/owner/repo/releases/download/v1/model.pt",
        "https://github.com/owner/repo.git/info/refs?service=git-upload-pack",
        "https://github.com/owner/repo.git/git-upload-pack",
        "https://github.com/owner/repo.wiki.git",
        "https://codeload.github.com/owner/repo/tar.gz/refs/heads/main",
        "https://codeload.github.com/Owner/Repo/zip/main",
        "https://raw.githubusercontent.com/owner/repo/main/README.md",
        "https://api.github.com/repos/owner/repo/tarball/main",
        "https://api.github.com/repos/owner/repo/contents/x.py?ref=main",
        "https://uploads.github.com/repos/owner/repo/releases/1/assets",
        "https://user:token@github.com:443/owner/repo",
        "https://github.com/owner/other/../repo/x",
        "https://github.com/owner/%72epo",
        "https://github.com./owner/repo",
    ],
)
def test_github_repo_forms_match(blacklist: Blacklist, url: str) -> None:
    hit = blacklist.matches(url)
    assert hit is not None
    assert hit.rule == REPO_RULE
    assert hit.line == 2
    assert hit.url == url


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/owner/repo2",
        "https://github.com/owner/rep",
        "https://github.com/owner",
        "https://github.com/other/repo",
        "https://github.com/repo/owner",
        "https://codeload.github.com/owner/repository/zip/main",
        "https://raw.githubusercontent.com/owner/repo-fork/main/x",
        "https://api.github.com/users/owner/repos",
        "https://api.github.com/repos/owner/repo2",
        "https://gitlab.com/owner/repo",
        "https://owner.github.io/repo",
        "https://pypi.org/simple/repo/",
        "https://objects.githubusercontent.com/github-production-release-asset/123/x",
        "not a url",
        "",
    ],
)
def test_unrelated_urls_do_not_match(blacklist: Blacklist, url: str) -> None:
    assert blacklist.matches(url) is None


def test_path_prefix_on_segment_boundary(blacklist: Blacklist) -> None:
    assert blacklist.matches("http://example.com/code") is not None
    assert blacklist.matches("https://www.example.com/code/x/y.py") is not None
    assert blacklist.matches("https://example.com/Code/") is not None
    assert blacklist.matches("https://example.com/codebase") is None
    assert blacklist.matches("https://example.com/") is None
    assert blacklist.matches("https://example.com/other/code") is None
    assert blacklist.matches("https://sub.example.com/code") is None


def test_other_forges_and_scp_syntax(blacklist: Blacklist) -> None:
    assert blacklist.matches("https://gitlab.com/group/project") is not None
    assert blacklist.matches("https://gitlab.com/group/project/-/archive/main.zip") is not None
    assert blacklist.matches("https://gitlab.com/group/project.git/info/refs") is not None
    assert blacklist.matches("https://gitlab.com/group/projects") is None
    assert blacklist.matches("https://github.com/scp/style") is not None
    assert blacklist.matches("git@github.com:scp/style") is not None


def test_rule_inside_a_repository_refuses_the_whole_repository(blacklist: Blacklist) -> None:
    assert blacklist.matches("https://github.com/big/mono/tree/master/papers/ours/x") is not None
    assert blacklist.matches("https://codeload.github.com/big/mono/zip/master") is not None
    assert blacklist.matches("https://github.com/big/mono.git/info/refs") is not None
    assert blacklist.matches("https://github.com/big/monolith") is None


def test_gists(blacklist: Blacklist) -> None:
    assert blacklist.matches("https://gist.github.com/someone/0123abcd") is not None
    assert blacklist.matches("https://gist.github.com/0123abcd.git") is not None
    assert blacklist.matches("https://gist.github.com/other/0123abcd") is not None
    raw = "https://gist.githubusercontent.com/someone/0123abcd/raw/abc/file.py"
    assert blacklist.matches(raw) is not None
    assert blacklist.matches("https://gist.github.com/someone/0123abce") is None
    # A repository rule does not cover a gist of the same owner.
    assert blacklist.matches("https://gist.github.com/owner/ffff0000") is None


def test_whole_host_rules(blacklist: Blacklist) -> None:
    assert blacklist.matches("https://blocked-host.org/anything/at/all") is not None
    assert blacklist.matches("http://BLOCKED-HOST.org") is not None
    assert blacklist.blocks_host("blocked-host.org") is not None
    assert blacklist.blocks_host("www.blocked-host.org:443") is not None
    assert blacklist.blocks_host("sub.blocked-host.org") is None
    # Hosts with only some URLs refused are not refused at CONNECT time.
    assert blacklist.blocks_host("github.com") is None
    assert blacklist.blocks_host("example.com") is None


def test_bare_github_rule_refuses_all_github_forms() -> None:
    bl = Blacklist.parse("github.com\n")
    assert bl.blocks_host("github.com") is not None
    assert bl.blocks_host("codeload.github.com") is None  # but each request there is refused:
    assert bl.matches("https://codeload.github.com/a/b/zip/main") is not None
    assert bl.matches("https://raw.githubusercontent.com/a/b/main/x") is not None


def test_owner_rule_refuses_every_repository_of_the_owner() -> None:
    bl = Blacklist.parse("https://github.com/lab\n")
    assert bl.matches("https://github.com/lab/anything.git") is not None
    assert bl.matches("https://raw.githubusercontent.com/lab/x/main/y") is not None
    assert bl.matches("https://github.com/labs/x") is None


@pytest.mark.parametrize("text", ["none", "none\n", "# nothing\n\nNone\n", "", "\n# only\n"])
def test_empty_blacklists(text: str) -> None:
    bl = Blacklist.parse(text)
    assert not bl
    assert len(bl) == 0
    assert bl.matches("https://github.com/owner/repo") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("github.com/a/b\nnone\n", "line 2: 'none' must be the only entry"),
        ("https://github.com/a/b https://github.com/c/d\n", "line 1: expected one URL per line"),
        ("https:///path-only\n", "line 1: not a URL with a host"),
    ],
)
def test_bad_lines_name_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^bl\.txt: ") as info:
        Blacklist.parse(text, source="bl.txt")
    assert message in str(info.value)


def test_url_fragments_are_not_comments() -> None:
    bl = Blacklist.parse("https://example.com/page#section\n")
    assert bl.urls == ["https://example.com/page#section"]
    assert bl.matches("https://example.com/page") is not None


def test_read_blacklist_file(tmp_path: Path) -> None:
    path = tmp_path / "blacklist.txt"
    path.write_text("https://github.com/a/b\r\n# c\r\nhttps://example.org/x\r\n")
    bl = read_blacklist(path)
    assert bl.source == str(path)
    assert bl.urls == ["https://github.com/a/b", "https://example.org/x"]
    assert [r.line for r in bl.rules] == [1, 3]
    with pytest.raises(ValueError, match="cannot read blacklist"):
        read_blacklist(tmp_path / "missing.txt")


def test_from_urls_matches_spec_lists() -> None:
    bl = Blacklist.from_urls(["https://github.com/a/b", "  ", "example.org/x"])
    assert bl.urls == ["https://github.com/a/b", "example.org/x"]
    assert bl.matches("https://codeload.github.com/a/b/zip/main") is not None


def test_normalise_url() -> None:
    assert str(normalise_url("HTTPS://WWW.Example.COM:8443/A//b/./c/../d.git/?q#f")) == (
        "example.com/a/b/d"
    )
    with pytest.raises(ValueError):
        normalise_url("/just/a/path")


# --- property tests -------------------------------------------------------------------------

_name = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,14}", fullmatch=True)
_tail = st.lists(st.from_regex(r"[A-Za-z0-9_.-]{1,10}", fullmatch=True), max_size=4)


def _case_variants(text: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c.lower() for c, flip in zip(text, flips, strict=False))


@settings(max_examples=200, deadline=None)
@given(
    owner=_name,
    repo=_name,
    scheme=st.sampled_from(["https://", "http://", ""]),
    www=st.booleans(),
    git=st.booleans(),
    slashes=st.integers(min_value=0, max_value=3),
    flips=st.lists(st.booleans(), min_size=80, max_size=80),
    form=st.sampled_from(
        [
            "github.com/{o}/{r}{git}",
            "github.com/{o}/{r}{git}/tree/main",
            "github.com/{o}/{r}{git}/info/refs",
            "codeload.github.com/{o}/{r}/zip/main",
            "raw.githubusercontent.com/{o}/{r}/main",
            "api.github.com/repos/{o}/{r}/tarball",
        ]
    ),
    tail=_tail,
)
def test_variants_of_a_blacklisted_repo_always_match(
    owner: str,
    repo: str,
    scheme: str,
    www: bool,
    git: bool,
    slashes: int,
    flips: list[bool],
    form: str,
    tail: list[str],
) -> None:
    bl = Blacklist.from_urls([f"https://github.com/{owner}/{repo}"])
    path = form.format(o=owner, r=repo, git=".git" if git else "")
    if tail:
        path += "/" + "/".join(t for t in tail if t not in {".", ".."})
    url = scheme + ("www." if www and path.startswith("github.com") else "") + path
    url = _case_variants(url, flips) + "/" * slashes
    assert bl.matches(url) is not None, url


@settings(max_examples=200, deadline=None)
@given(owner=_name, repo=_name, other_owner=_name, other_repo=_name, tail=_tail)
def test_unrelated_repos_never_match(
    owner: str, repo: str, other_owner: str, other_repo: str, tail: list[str]
) -> None:
    norm = lambda s: s.lower().removesuffix(".git").removesuffix(".wiki")  # noqa: E731
    if (norm(owner), norm(repo)) == (norm(other_owner), norm(other_repo)):
        return
    bl = Blacklist.from_urls([f"https://github.com/{owner}/{repo}"])
    for url in (
        f"https://github.com/{other_owner}/{other_repo}",
        f"https://codeload.github.com/{other_owner}/{other_repo}/zip/main",
        f"https://raw.githubusercontent.com/{other_owner}/{other_repo}/main",
    ):
        assert bl.matches("/".join([url, *tail])) is None, url


@settings(max_examples=200, deadline=None)
@given(host=st.from_regex(r"[a-z][a-z0-9-]{0,10}\.(org|net|io)", fullmatch=True), base=_name)
def test_generic_prefix_needs_a_segment_boundary(host: str, base: str) -> None:
    bl = Blacklist.from_urls([f"https://{host}/{base}"])
    assert bl.matches(f"http://WWW.{host.upper()}/{base}/") is not None
    assert bl.matches(f"https://{host}/{base}/deeper/file.txt") is not None
    assert bl.matches(f"https://{host}/{base}x") is None
    assert bl.matches(f"https://{host}/x{base}") is None


def test_from_urls_rejects_entries_that_are_not_one_url() -> None:
    with pytest.raises(ValueError, match="expected one URL per line"):
        Blacklist.from_urls(["github.com/a/b junk"])
    with pytest.raises(ValueError, match="not a URL with a host"):
        Blacklist.from_urls(["/a/b"])


BUNDLED = sorted((Path(__file__).parents[2] / "blacklists").glob("*.txt"))


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_blacklists_parse_and_match_themselves(path: Path) -> None:
    from paperbench.papers import parse_blacklist

    bl = read_blacklist(path)
    # The paper loader's list (what SandboxSpec.blacklist gets) builds the same rules.
    assert Blacklist.from_urls(parse_blacklist(path.read_text())).urls == bl.urls
    for rule in bl.rules:
        assert bl.matches(rule.raw) is not None, rule.raw


# --- bypasses: other readings of a URL ------------------------------------------------------

SECRET_RULE = "blocked.test/secret"


@pytest.fixture
def probed() -> Blacklist:
    return Blacklist.parse(f"blocked-host.test\n{SECRET_RULE}\n{REPO_RULE}\n", source="bl.txt")


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        # A trailing dot on the host, with any port, any number of dots, any case.
        ("http://blocked-host.test.:8080/x", "blocked-host.test"),
        ("http://blocked-host.test..:8080/x", "blocked-host.test"),
        ("http://BLOCKED-HOST.TEST.:8080/x", "blocked-host.test"),
        ("blocked-host.test.:8080", "blocked-host.test"),
        ("http://blocked.test.:8080/secret", SECRET_RULE),
        ("https://api.github.com.:443/repos/Owner/Repo/zipball", REPO_RULE),
        ("https://codeload.github.com.:443/Owner/Repo/zip/main", REPO_RULE),
        ("https://github.com.:443/Owner/Repo/archive/main.zip", REPO_RULE),
        # An escaped or internationalised host name.
        ("http://blocked%2Dhost.test/x", "blocked-host.test"),
        ("http://ｂｌｏｃｋｅｄ-ｈｏｓｔ.test/x", "blocked-host.test"),
        ("http://blocked-host。test/x", "blocked-host.test"),
    ],
)
def test_host_spellings_are_refused(probed: Blacklist, url: str, rule: str) -> None:
    hit = probed.matches(url)
    assert hit is not None, url
    assert hit.rule == rule


@pytest.mark.parametrize(
    "path",
    [
        "/secret;x",  # path parameters (Tomcat, Jetty, Spring)
        "/secret;jsessionid=1/x",
        "/secret%3Bx",
        "/secret%3bx/y",
        "/x/..;/secret",  # Tomcat reads '..;' as '..'
        "/secret%00",  # a NUL ends the segment (C servers)
        "/secret%00.html",
        "/secret%2Fx",  # an encoded slash splits segments
        "/secret%252Fx",  # double encoding
        "/secret%2500",
        "/%2573ecret",
        "/secret%253Bx",
        "/secret%3Fx",  # an encoded '?' or '#' a server decodes before routing
        "/secret%23x",
        "/SECRET",
        "/Secret/",
        "/secret.",  # trailing dots and spaces (Windows servers)
        "/secret%20",
        "/secret%2e",
        "\\secret",  # backslashes as separators (browsers, IIS)
        "/x\\..\\secret",
        "/secret\\x",
        "/x%5C..%5Csecret",
        "/x/%2e%2e/secret",
        "/secret/x/../..",  # a server that does not resolve dot segments
        "/x#/../secret",  # a raw '#' in a request-target some servers keep in the path
    ],
)
def test_path_readings_of_a_prefix_rule_are_refused(probed: Blacklist, path: str) -> None:
    url = "http://blocked.test" + path
    hit = probed.matches(url)
    assert hit is not None, url
    assert hit.rule == SECRET_RULE
    assert hit.url == url


@pytest.mark.parametrize(
    "url",
    [
        "https://api.github.com/repos/Owner/Repo/zipball",
        "https://api.github.com/repos/Owner/Repo/zipball/main",
        "https://api.github.com/repos/owner/repo/tarball/v1.0",
        "https://api.github.com/repos/Owner/Repo/contents/src/model.py?ref=main",
        "https://api.github.com/repos/Owner/Repo/git/trees/main?recursive=1",
        "https://api.github.com/repos/Owner/Repo/git/blobs/0123abcd",
        "https://api.github.com/repos/Owner/Repo/releases/assets/42",
        "https://API.GITHUB.COM:443/repos/Owner/Repo.git/zipball/",
        "https://codeload.github.com/Owner/Repo/zip/refs/heads/main",
        "https://codeload.github.com/Owner/Repo/tar.gz/main",
        "https://codeload.github.com/Owner/Repo/legacy.zip/main",
        "https://codeload.github.com/Owner/Repo/legacy.tar.gz/refs/heads/main",
        "https://raw.githubusercontent.com/Owner/Repo/refs/heads/main/train.py",
        "https://media.githubusercontent.com/media/Owner/Repo/main/weights.bin",
        "https://github.com/Owner/Repo/archive/main.zip",
        "https://github.com/Owner/Repo/archive/refs/tags/v1.tar.gz",
        "https://github.com/Owner/Repo/zipball/main",
        "https://github.com/Owner/Repo/releases/download/v1/model.pt",
        "https://github.com/Owner/Repo/raw/main/train.py",
        # The same, spelled to slip past a reader that is too literal.
        "https://github.com/Owner/Repo;x/archive/main.zip",
        "https://github.com/Owner/Repo%3B/archive/main.zip",
        "https://codeload.github.com/Owner/Repo%00/zip/main",
        "https://api.github.com/repos/Owner%2FRepo/zipball",
        "https://api.github.com/repos/Owner/Repo.git./zipball",
        "https://github.com/Owner/Repo/archive/main.zip/../../..",
        "https://github.com\\Owner\\Repo\\archive\\main.zip",
        "github.com:Owner/Repo.git",
    ],
)
def test_repository_download_routes_are_refused(probed: Blacklist, url: str) -> None:
    hit = probed.matches(url)
    assert hit is not None, url
    assert hit.rule == REPO_RULE
    assert hit.line == 3


ID_RULE = "github.com/* (repository id cannot be checked offline)"


@pytest.mark.parametrize(
    "url",
    [
        "https://api.github.com/repositories/123456/zipball",
        "https://api.github.com/repositories/123456/zipball/main",
        "https://api.github.com/repositories/123456/tarball/v1",
        "https://api.github.com/repositories/123456/contents/model.py",
        "https://api.github.com/repositories/123456/git/trees/main",
        "https://api.github.com/repositories/123456/releases/assets/7",
        "https://api.github.com/repositories/123456/readme",
        "https://API.github.com.:443/Repositories/%31%32/zipball",
    ],
)
def test_repository_id_routes_are_refused_with_a_github_rule(probed: Blacklist, url: str) -> None:
    hit = probed.matches(url)
    assert hit is not None, url
    assert hit.rule == ID_RULE
    assert hit.line is None
    # Without a GitHub rule there is nothing to protect.
    assert Blacklist.parse("blocked.test/secret\n").matches(url) is None
    # A bare github.com or an owner rule counts as a GitHub rule, a gist does not.
    assert Blacklist.parse("github.com/lab\n").matches(url) is not None
    assert Blacklist.parse("gist.github.com/0123abcd\n").matches(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://blocked.test/secretary",
        "http://blocked.test/secret-notes",
        "http://blocked.test/public/secret",
        "http://blocked.test/x;/secret",
        "http://blocked.test/secre%74ary",
        "http://blocked.test/",
        "http://sub.blocked.test/secret",
        "http://blocked.test.example/secret",
        "http://blocked-host.test.example/x",
        "https://github.com/Owner/Repo2",
        "https://github.com/Owner/Repo2/archive/main.zip",
        "https://github.com/Other/Repo",
        "https://api.github.com/repos/Other/Repo/zipball",
        "https://api.github.com/repos/Owner/Repo2/tarball",
        "https://codeload.github.com/Owner/Repo-fork/zip/main",
        "https://media.githubusercontent.com/media/Owner/Repo2/main/x",
        "https://api.github.com/repositories/123456",
        "https://api.github.com/repositories?since=123456",
        "https://objects.githubusercontent.com/github-production-release-asset-2e65be/123456/x",
        "https://github.com/Owner/Repo2#readme",
    ],
)
def test_near_misses_stay_allowed(probed: Blacklist, url: str) -> None:
    assert probed.matches(url) is None, url


def test_rules_are_read_like_urls() -> None:
    bl = Blacklist.parse(
        "https://github.com.:443/A/B\nblocked.test.:8080/Secret;v=1\ngithub.com:c/d.git\n"
    )
    assert [str(rule.target) for rule in bl.rules] == [
        "github.com/a/b",
        "blocked.test/secret",
        "github.com/c/d",
    ]
    assert bl.matches("https://codeload.github.com/a/b/zip/main") is not None
    assert bl.matches("http://blocked.test/secret/x") is not None
    assert bl.matches("https://github.com/c/d/archive/main.zip") is not None
    # host:port without a scheme is still a port, not scp-like git syntax.
    assert str(Blacklist.parse("localhost:8080/x\n").rules[0].target) == "localhost/x"
