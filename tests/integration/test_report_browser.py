"""``capplan report`` in a real browser (issue 51): Debian's headless Chromium opens the page
of the default plan and of a 2-system, 2-vendor fleet with CPU levels, from disk, through the
DevTools protocol (tests/integration/browser.py). The page must load with no console message,
no log entry (a Content-Security-Policy refusal is one) and no request but its own file; its
screenshot (kept in the test's tmp folder as an artefact) must show the coverage grid's
colours above the schedule's, not a blank page. A hostile package name with a script tag in
it shows as text and runs nothing. The harness itself is checked first: a page that fetches
and logs is seen doing both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Cli
from tests.integration.browser import Browser, Visit, chromium, read_png
from tests.integration.test_report_cli import hostile_folder

from capplan.core.report.data import LEVELS
from capplan.core.report.html import STAGE_COLOURS

FLEET = """\
[fleet]
gpus = ["A100", "L4", "GH200", "MI300X"]
cpus = ["x86-64-v3", "sapphirerapids"]
[packages.torch]
[packages.gromacs]
[packages.numpy]
[policy]
systems = ["x86_64-linux", "aarch64-linux"]
share = "compatible"
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = chromium()
    if binary is None:
        pytest.skip("Chromium not found (apt-get install chromium; scripts/setup --dev)")
    try:
        started = Browser(binary, tmp_path_factory.mktemp("profile"))
        started.call("Browser.getVersion")
    except (OSError, RuntimeError, TimeoutError) as error:
        pytest.skip(f"Chromium cannot start here: {error}")
    with started:
        yield started


def _rgb(colour: str) -> bytes:
    return bytes.fromhex(colour.removeprefix("#"))


def _rows_with(rows: list[bytes], colour: str) -> list[int]:
    """The screenshot rows holding at least 10 pixels of ``colour`` exactly."""
    want = _rgb(colour)
    out = []
    for y, row in enumerate(rows):
        hits = 0
        at = row.find(want)
        while at >= 0 and hits < 10:
            if at % 3 == 0:
                hits += 1
            at = row.find(want, at + 1)
        if hits >= 10:
            out.append(y)
    return out


def _clean(visit: Visit) -> None:
    assert visit.console == [], visit.console
    assert visit.log == [], visit.log
    assert visit.requests == [], visit.requests


def _report(run: Cli, folder: Path, name: str, env: dict[str, str] | None = None) -> Path:
    out = folder / name
    result = run("report", "--output", str(out), env=env)
    assert result.exit_code == 0, result.stderr
    return out


def _check_picture(visit: Visit, keep: Path, levels: list[str]) -> None:
    keep.write_bytes(visit.png)  # the artefact: pytest's tmp folder keeps it
    _, _, rows = read_png(visit.png)
    white = _rgb("#ffffff")
    painted = sum(1 for row in rows if row.replace(white, b"") != b"")
    assert painted > len(rows) // 3, f"mostly blank: {painted} of {len(rows)} rows painted"
    first_grid = []
    for level in levels:
        found = _rows_with(rows, LEVELS[level].colour)
        assert len(found) >= 10, f"no {level} cells ({LEVELS[level].colour}) in {keep}"
        first_grid.append(found[0])
    # The schedule's bars (stage 1's colour) lie below the coverage grid.
    bars = _rows_with(rows, STAGE_COLOURS[1])
    assert bars and bars[0] > max(first_grid), (bars[:1], first_grid)


def test_the_harness_sees_a_fetch_and_a_console_message(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><p>x</p><img src="http://example.invalid/a.png">'
        '<script>console.error("ran")</script>'
    )
    visit = browser.visit(page)
    assert visit.requests == ["http://example.invalid/a.png"]
    assert visit.console == ["error: ran"]


def test_the_default_plan_report_opens_offline_and_draws(
    browser: Browser, capplan_cli: Cli, tmp_path: Path
) -> None:
    page = _report(capplan_cli, tmp_path, "default.html")
    visit = browser.visit(page)
    _clean(visit)
    _check_picture(visit, tmp_path / "default.png", ["native", "unserved"])


def test_a_two_system_two_vendor_fleet_with_cpu_levels(
    browser: Browser, capplan_in: Cli, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    page = _report(capplan_in, tmp_path, "fleet.html")
    text = page.read_text()
    for name in ("torch-gfx942", "torch-sm90-aarch64", "gromacs-sapphirerapids", "x86-64-v3"):
        assert name in text
    visit = browser.visit(page)
    _clean(visit)
    # L4 (8.9) runs A100's sm_80 build: a same-major cell beside the native ones.
    _check_picture(visit, tmp_path / "fleet.png", ["native", "compatible", "none"])


def test_a_script_tag_in_a_name_shows_as_text_and_runs_nothing(
    browser: Browser, capplan_in: Cli, tmp_path: Path
) -> None:
    env = hostile_folder(tmp_path)
    page = _report(capplan_in, tmp_path, "hostile.html", env=env)
    text = page.read_text()
    assert "<script" not in text and "\u202e" not in text
    assert "evil&lt;script&gt;console.error(&quot;ran&quot;)&lt;/script&gt;\\u202e" in text
    visit = browser.visit(page)
    _clean(visit)  # nothing ran: no console message, no CSP refusal, no request
