"""The paperbench-rcb image: known by name, never built by default. Nothing here builds it."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.sandbox._cli import BuildLog
from paperbench.sandbox._egress import DEFAULT_HOST_CA_BUNDLE
from paperbench.sandbox._images import (
    DEFAULT_IMAGES,
    IMAGES,
    ImageOptions,
    base_tag,
    build_image,
    dockerfile,
    ensure_images,
    image_tag,
)

runner = CliRunner()
PEM = "-----BEGIN CERTIFICATE-----\nUkNCLVRFU1Q=\n-----END CERTIFICATE-----\n"


class _Api:
    """An engine where every image already exists; records what was looked up."""

    def __init__(self) -> None:
        self.inspected: list[str] = []

    def inspect_image(self, ref: str) -> dict[str, str]:
        self.inspected.append(ref)
        return {"Id": "sha256:" + "0" * 64}


class _Client:
    def __init__(self) -> None:
        self.api = _Api()


def test_rcb_is_an_image_but_not_a_default_one() -> None:
    assert "paperbench-rcb" in IMAGES
    assert "paperbench-rcb" not in DEFAULT_IMAGES
    assert set(DEFAULT_IMAGES) == {"paperbench-agent", "paperbench-reproducer"}
    # its apt packages are all in the base already: adding it changed no base tag
    assert set(IMAGES["paperbench-rcb"]) <= set(
        IMAGES["paperbench-agent"] + IMAGES["paperbench-reproducer"]
    )
    assert image_tag("paperbench-rcb", base_tag(), ImageOptions()).startswith("paperbench-rcb:")


def test_rcb_trusts_the_hosts_ca_bundle_unless_given_one(tmp_path: Path) -> None:
    host = ImageOptions(ca_bundle=DEFAULT_HOST_CA_BUNDLE)
    plain = image_tag("paperbench-rcb", base_tag(), ImageOptions())
    assert DEFAULT_HOST_CA_BUNDLE.is_file()
    assert plain == image_tag("paperbench-rcb", base_tag(), host)
    pem = tmp_path / "other.pem"
    pem.write_text(PEM)
    assert plain != image_tag("paperbench-rcb", base_tag(), ImageOptions(ca_bundle=pem))
    # the other images stay without one
    assert image_tag("paperbench-agent", base_tag(), ImageOptions()) != image_tag(
        "paperbench-agent", base_tag(), host
    )


def test_ensure_images_without_names_never_looks_at_rcb() -> None:
    client: Any = _Client()
    tags = ensure_images(client=client)
    assert set(tags) == set(DEFAULT_IMAGES)
    assert client.api.inspected and not any(
        r.startswith("paperbench-rcb") for r in client.api.inspected
    )
    tags = ensure_images(("paperbench-rcb",), client=client)
    assert list(tags) == ["paperbench-rcb"]


def test_the_dockerfile_installs_what_the_tests_import() -> None:
    text = dockerfile("paperbench-rcb")
    for package in ("torch==", "timm==", "jax[cpu]", "scipy", "pandas", "einops", "numpy=="):
        assert package in text, package
    assert "download.pytorch.org" not in text  # PyPI's default index only


def test_build_help_names_the_default_and_the_extra_images() -> None:
    result = runner.invoke(app, ["images", "build", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    also = "also: paperbench-rcb, paperbench-agent-cli"
    assert f"default: paperbench-agent, paperbench-reproducer; {also}" in result.output


@pytest.mark.docker
def test_images_build_with_no_names_does_not_build_rcb() -> None:
    result = runner.invoke(app, ["images", "build", "--json"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)["images"]) == set(DEFAULT_IMAGES)
    # piped, what the build does is plain lines on stderr with the time so far
    said = result.stderr.splitlines()
    assert said and all(re.search(r" is up to date \(\d+ s\)$", line) for line in said), said


class _Building(_Api):
    """An engine whose build streams the classic builder's step lines."""

    def build(self, **_: Any) -> Any:
        yield {"stream": "Step 1/3 : ARG BASE\n"}
        yield {"stream": " ---> Running in 1234\n"}
        yield {
            "stream": "\x1b[1mStep 2/3 : RUN pip install --no-cache-dir torch==2.5.1 timm\x1b[0m\n"
        }
        yield {"stream": "Collecting torch\nSuccessfully built 0123\n"}

    def tag(self, *_: Any) -> None:
        return None


def test_a_build_says_each_step_as_it_starts() -> None:
    client: Any = _Client()
    client.api = _Building()
    said: list[str] = []
    build_image(client, "paperbench-rcb", "paperbench-rcb:x", "base", ImageOptions(), said.append)
    assert said == [
        "building paperbench-rcb:x",
        "building paperbench-rcb: step 1/3: ARG BASE",
        "building paperbench-rcb: step 2/3: RUN pip install --no-cache-dir torch==2.5.1 timm",
    ]


def test_piped_a_build_step_that_says_nothing_gets_a_line_that_it_is_still_running() -> None:
    out = io.StringIO()
    with BuildLog(Console(file=out, width=200), interval=0.05) as log:
        log("building paperbench-rcb: step 2/3: RUN pip install torch")
        for _ in range(400):  # until the heartbeat has spoken (at most 4 s)
            if "still" in out.getvalue():
                break
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    step = r"building paperbench-rcb: step 2/3: RUN pip install torch"
    assert re.fullmatch(rf"{step} \(0 s\)", lines[0]), lines
    assert re.fullmatch(rf"still {step} \(\d+ s so far\)", lines[1]), lines
