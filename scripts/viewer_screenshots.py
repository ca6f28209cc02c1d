"""Write the screenshots of docs/tutorials/read-what-your-model-did.md: the run viewer of the test suite's small run
(tests/viewer_run.py, written from scored completions) in headless Chromium, as the browser tests open it.

    PYTHONPATH=. .venv/bin/python scripts/viewer_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from grpo_kit.runs.view import write_view  # noqa: E402
from tests import browser  # noqa: E402
from tests.viewer_run import write_run  # noqa: E402

IMAGES = ROOT / "docs" / "tutorials" / "img"

with tempfile.TemporaryDirectory() as tmp:
    page = write_view([write_run(Path(tmp) / "gsm8k-a100")])
    driver = browser.chromium()
    try:
        driver.set_window_size(1280, 900)
        browser.open_page(driver, page)
        driver.find_element("id", "tab-questions").click()
        Select(driver.find_element("id", "flip")).select_by_value("flipped")
        driver.save_screenshot(str(IMAGES / "viewer-questions.png"))
        driver.find_element("id", "tab-training").click()
        WebDriverWait(driver, 30).until(lambda d: d.find_elements("css selector", "#groups .controls"))
        driver.find_element("css selector", "#groups .controls button:nth-child(3)").click()  # step 2
        driver.save_screenshot(str(IMAGES / "viewer-training.png"))
    finally:
        driver.quit()
print(f"wrote {IMAGES}/viewer-questions.png and viewer-training.png")
