"""RCB's published results file (their overall_stats.json layout), read into rows.

The fixture is made up (two models, three papers), in the layout only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paperbench.errors import InputError
from paperbench.rcb._published import load_published

FIXTURE = Path(__file__).parent / "data" / "overall_stats.json"


def test_rows_hold_fractions_of_the_published_means() -> None:
    a, b = load_published(FIXTURE)
    assert (a.key, a.model, a.pretty_name) == ("MODEL_A", "made-up/a", "Made Up A")
    assert (b.key, b.model, b.pretty_name) == ("MODEL_B", "MODEL_B", "MODEL_B")
    assert a.overall.line_weighted == pytest.approx(2 / 3)
    assert a.overall.unweighted == pytest.approx(0.5)
    assert b.overall.line_weighted == pytest.approx(0.36666667)
    # alpha and beta from the completions; gamma from problem_scores alone
    assert (a.overall.problems, a.overall.lines) == (4, 15)


def test_per_paper_rates_average_over_completion_indices() -> None:
    a, b = load_published(FIXTURE)
    assert set(a.papers) == {"alpha", "beta", "gamma"}
    assert a.papers["alpha"].line_weighted == pytest.approx(10 / 12)
    assert a.papers["alpha"].unweighted == pytest.approx(2 / 3)
    assert (a.papers["alpha"].problems, a.papers["alpha"].lines) == (3, 12)
    assert a.papers["beta"].line_weighted == 0.0
    gamma = a.papers["gamma"]
    assert gamma.line_weighted == pytest.approx(0.25) and gamma.unweighted is None
    # MODEL_B: alpha idx0 2/12, idx1 6/12; plain 1/3 and 2/3; beta 1 then 0
    assert b.papers["alpha"].line_weighted == pytest.approx((2 / 12 + 6 / 12) / 2)
    assert b.papers["alpha"].unweighted == pytest.approx(0.5)
    assert b.papers["beta"].line_weighted == pytest.approx(0.5)
    assert "gamma" not in b.papers


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "overall_stats.json"
    path.write_text(json.dumps(data))
    return path


def fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_a_wrong_value_is_named_by_its_json_path(tmp_path: Path) -> None:
    data = fixture()
    data["results"]["alpha"]["results"]["MODEL_A"]["results"]["s2"][0]["passed"] = "maybe"
    path = write(tmp_path, data)
    with pytest.raises(InputError) as err:
        load_published(path)
    line = str(err.value)
    assert line.startswith(f"{path}: $.results.alpha.results.MODEL_A.results.s2[0].passed: ")
    assert "\n" not in line


def test_missing_keys_and_wrong_shapes(tmp_path: Path) -> None:
    data = fixture()
    del data["overall_scores"]["MODEL_B"]["task_rates"]
    with pytest.raises(
        InputError, match=r"\$\.overall_scores\.MODEL_B\.task_rates: Field required"
    ):
        load_published(write(tmp_path, data))
    with pytest.raises(InputError, match=r"\$\.overall_scores: Field required"):
        load_published(write(tmp_path, {"results": {}}))
    with pytest.raises(InputError, match=r": \$: expected an object with overall_scores"):
        load_published(write(tmp_path, [1, 2]))


def test_unreadable_and_not_json(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(InputError, match=rf"^{missing}: cannot read"):
        load_published(missing)
    bad = tmp_path / "bad.json"
    bad.write_text('{"overall_scores": {}\n,,}')
    with pytest.raises(InputError, match=rf"^{bad}: line 2: not valid JSON"):
        load_published(bad)


def test_an_empty_file_of_the_layout_has_no_rows(tmp_path: Path) -> None:
    assert load_published(write(tmp_path, {"overall_scores": {}})) == []
