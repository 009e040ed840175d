"""Open opgate HTML reports in a real headless Chromium (Selenium): console errors, rendered charts,
where the first failing check sits, and screenshots. Used by the tests and scripts/report_screenshots.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from contextlib import contextmanager

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)


def browser_missing() -> str | None:
    """Why a headless browser cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'opgate[reports]')"
    if not any(shutil.which(name) for name in CHROMIUM):
        return "no chromium binary (apt-get install -y chromium chromium-driver)"
    if not any(shutil.which(name) for name in DRIVER):
        return "no chromedriver (apt-get install -y chromium-driver)"
    return None


@dataclass(frozen=True)
class PageFacts:
    console: list[dict[str, Any]]
    charts: list[dict[str, Any]]  # id, drawn elements, width, height
    first_problem_top: float | None  # px from the top of the page, scroll 0
    viewport_height: float


@contextmanager
def headless_chromium(width: int = 1280, height: int = 1000) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions",
                "--hide-scrollbars", f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    binary = next((shutil.which(name) for name in CHROMIUM if shutil.which(name)), None)
    if binary:
        options.binary_location = binary
    driver_path = next((shutil.which(name) for name in DRIVER if shutil.which(name)), None)
    # Chromium's profile and its temporary folders (org.chromium.Chromium.*, left in /tmp after every run otherwise)
    # go into one folder of ours, removed when the browser has quit.
    with tempfile.TemporaryDirectory(prefix="opgate-chromium-") as scratch:
        options.add_argument(f"--user-data-dir={Path(scratch) / 'profile'}")
        service = Service(driver_path, env={**os.environ, "TMPDIR": scratch})
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(60)
        try:
            yield driver
        finally:
            driver.quit()


_FACTS_JS = """
const charts = Array.from(document.querySelectorAll('svg.chart')).map(s => {
  const r = s.getBoundingClientRect();
  return {id: s.id, drawn: s.querySelectorAll('circle,rect,path,polyline,line').length,
          width: r.width, height: r.height};
});
const p = document.querySelector('.problem');
return {charts: charts, top: p ? p.getBoundingClientRect().top : null, vh: window.innerHeight};
"""


def page_facts(driver: Any, html: Path) -> PageFacts:
    driver.get(Path(html).resolve().as_uri())
    driver.execute_script("window.scrollTo(0, 0)")
    facts = driver.execute_script(_FACTS_JS)
    return PageFacts(console=list(driver.get_log("browser")), charts=facts["charts"],
                     first_problem_top=facts["top"], viewport_height=float(facts["vh"]))


def screenshot(driver: Any, html: Path, png: Path) -> None:
    driver.get(Path(html).resolve().as_uri())
    driver.execute_script("window.scrollTo(0, 0)")
    png.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(png))
