"""report.html in a real browser: headless Chromium (Debian's, driven by playwright) opens
the report of a passing and of a failing pipeline, the session's shared quickstart and
planted-fault runs. No console error, the verdict inside the first 1280x900 viewport, every
chart drawn; a screenshot of each is kept (``$AMPTOOL_TEST_ARTIFACTS``, else
tests/artifacts/)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # reads the shared pipelines, which train and export

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 900}
ARTIFACTS = Path(os.environ.get("AMPTOOL_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[1] / "artifacts")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install playwright)")
    if not CHROMIUM.is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as play:
        chromium = play.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def reports(doc_run, shared) -> dict:
    """Verdict -> report.html of the quickstart (passes) and the planted fault (fails)."""
    from docruns import DOC_RUNS, cli_run

    trap = cli_run(shared, DOC_RUNS["trap"])
    assert trap.exit_code == 1, trap.output[-3000:]
    return {"pass": doc_run("quickstart").cwd / "runs" / "pipeline" / "report.html",
            "fail": trap.cwd / "runs" / "ci-trap" / "report.html"}


@pytest.mark.parametrize("verdict", ["pass", "fail"])
def test_the_report_reads_in_a_browser(browser, reports, verdict):
    page = browser.new_page(viewport=VIEWPORT)
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda req: None if req.url.startswith(("file:", "data:", "about:"))
            else errors.append(f"fetched {req.url}"))
    try:
        page.goto(reports[verdict].resolve().as_uri())
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"report-{verdict}.png"))
        page.screenshot(path=str(ARTIFACTS / f"report-{verdict}-full.png"), full_page=True)
        banner = page.locator("#verdict")
        box = banner.bounding_box()
        assert banner.is_visible() and box is not None
        assert box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], box
        assert banner.inner_text().split()[0] == verdict.upper()
        charts = page.locator("figure.chart svg")
        assert charts.count() >= 3  # loss, loss scale, validation
        for i in range(charts.count()):
            svg = charts.nth(i)
            drawn = svg.bounding_box()
            assert drawn and drawn["width"] > 100 and drawn["height"] > 50, i
            assert svg.locator("polyline, circle, path, rect:not(.plot)").count() >= 1, i
        if verdict == "fail":
            assert page.locator('figure[data-chart^="per-layer"] line.mark').count() >= 1
        assert errors == []
    finally:
        page.close()
