"""The paperbench-agent-cli image (Claude Code, Codex CLI, mini-SWE-agent at pinned versions):
known by name, never built by default, its pins part of its tag. Nothing here builds it: the
test that runs it is skipped when it is not built (``paperbench images build
paperbench-agent-cli``, about 3 minutes, 2.3 GB)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from paperbench.sandbox import SandboxConfig
from paperbench.sandbox._base import SandboxSpec
from paperbench.sandbox._images import (
    BUILD_ARGS,
    DEFAULT_IMAGES,
    IMAGES,
    NETWORK_IMAGES,
    ImageOptions,
    base_tag,
    dockerfile,
    image_tag,
)

from .docker_fixtures import TEST_LABELS, docker_client, sweep  # noqa: F401  (a fixture)

NAME = "paperbench-agent-cli"
PINS = BUILD_ARGS[NAME]


def test_agent_cli_is_an_image_built_only_by_name() -> None:
    assert NAME in IMAGES and NAME in NETWORK_IMAGES
    assert NAME not in DEFAULT_IMAGES
    # its debootstrapped packages are paperbench-agent's: adding it changed no base tag
    assert set(IMAGES[NAME]) == set(IMAGES["paperbench-agent"])
    assert image_tag(NAME, base_tag(), ImageOptions()).startswith(NAME + ":")


def test_the_pinned_versions_are_part_of_the_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(PINS) == {
        "CLAUDE_CODE_VERSION",
        "CODEX_VERSION",
        "MINI_SWE_AGENT_VERSION",
        "LITELLM_VERSION",
    }
    text = dockerfile(NAME)
    plain = image_tag(NAME, base_tag(), ImageOptions())
    others = {n: image_tag(n, base_tag(), ImageOptions()) for n in DEFAULT_IMAGES}
    for arg, version in PINS.items():
        assert re.search(rf"^ARG {arg}$", text, re.M), arg  # taken from the build, no default
        assert version not in text  # one place: BUILD_ARGS
        monkeypatch.setitem(BUILD_ARGS[NAME], arg, version + ".1")
        assert image_tag(NAME, base_tag(), ImageOptions()) != plain, arg
        monkeypatch.setitem(BUILD_ARGS[NAME], arg, version)
    assert image_tag(NAME, base_tag(), ImageOptions()) == plain
    # images without build arguments keep their tags
    assert {n: image_tag(n, base_tag(), ImageOptions()) for n in DEFAULT_IMAGES} == others


def test_the_dockerfile_fetches_nothing_at_rollout_time() -> None:
    text = dockerfile(NAME)
    for variable in (
        "DISABLE_AUTOUPDATER=1",
        "DISABLE_TELEMETRY=1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
        "LITELLM_LOCAL_MODEL_COST_MAP=True",
        "MSWEA_CONFIGURED=true",
    ):
        assert variable in text, variable
    for binary in ("claude", "codex", "mini"):
        assert re.search(rf"\b{binary}\b.*/usr/local/bin", text), binary


@pytest.mark.docker
@pytest.mark.slow
def test_the_image_runs_the_pinned_clis_as_the_sandbox_user(docker_client: Any) -> None:  # noqa: F811
    from docker.errors import ImageNotFound

    tag = image_tag(NAME, base_tag(), ImageOptions())
    try:
        docker_client.api.inspect_image(tag)
    except ImageNotFound:
        pytest.skip(f"{tag} is not built (paperbench images build {NAME})")
    checks = {
        "id -u": "1000",
        "claude --version": f"{PINS['CLAUDE_CODE_VERSION']} (Claude Code)",
        "codex --version": f"codex-cli {PINS['CODEX_VERSION']}",
        "mini --help >/dev/null && /opt/mini-swe-agent/bin/python -c "
        "'import minisweagent, litellm, importlib.metadata as m; "
        'print(minisweagent.__version__, m.version("litellm"))\'': (
            f"{PINS['MINI_SWE_AGENT_VERSION']} {PINS['LITELLM_VERSION']}"
        ),
        "mini-extra --help >/dev/null && echo ok": "ok",
    }

    async def main() -> dict[str, tuple[int, str]]:
        backend = await SandboxConfig(backend="docker").build()
        sb = await backend.start(SandboxSpec(image=tag, user="sandbox", labels=TEST_LABELS))
        try:
            said = {}
            for command in checks:
                r = await sb.exec(command, timeout=120)
                said[command] = (r.exit_code, r.stdout.strip().splitlines()[-1:])
            return {c: (code, "".join(last)) for c, (code, last) in said.items()}
        finally:
            await sb.stop()

    try:
        said = asyncio.run(main())
    finally:
        sweep(docker_client)
    assert said == {command: (0, expected) for command, expected in checks.items()}
