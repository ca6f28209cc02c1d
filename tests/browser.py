"""Headless Chromium from Debian's packages (``apt-get install chromium chromium-driver``; ``make test`` installs it
where missing), driven by Selenium through Debian's chromedriver: no browser is ever downloaded."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: Offline and quiet: no update checks, no sync, no first-run pages, no GPU (CI machines have none).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000")


def missing() -> str | None:
    """Why the browser cannot run here (``None`` when it can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file() and not shutil.which(Path(path).name):
            return f"{path} is missing: apt-get install -y chromium chromium-driver (make test installs them)"
    return None


def chromium() -> Any:
    """A Selenium driver of headless Chromium that records the console (``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER, env={**os.environ}))


def open_page(driver: Any, path: str | Path, timeout: float = 30.0, mark: str = "viewReadyMs") -> float:
    """Open ``path`` and wait until the viewer has drawn it; returns the page's own time to interactive (ms from the
    start of navigation, ``performance.now()`` when its script finished the first drawing)."""
    driver.get(Path(path).resolve().as_uri())
    return wait_for(driver, mark, timeout)


def wait_for(driver: Any, mark: str, timeout: float = 30.0) -> float:
    """Wait until the page sets ``window[mark]`` (``viewReadyMs``: drawn; ``viewGroupsMs``: training groups
    inflated); returns it (ms from the start of navigation)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready = driver.execute_script(f"return window.{mark}")
        if ready:
            return float(ready)
        time.sleep(0.02)
    raise TimeoutError(f"the viewer did not set {mark} in {timeout} s: {driver.get_log('browser')}")
