"""The drawing page of lenet-serve in a real browser: headless Chromium (Debian's chromium and
chromium-driver, which .ci/run installs) driven by Selenium draws a 7 with pointer events,
and the page must show 7 with its bar chart and the 28x28 image the network received."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'lenet[serve]')")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if os.environ.get("LENET_EXPECT_BROWSER") and not (CHROMIUM and CHROMEDRIVER):   # CI must not skip it
    raise RuntimeError("LENET_EXPECT_BROWSER is set but chromium or chromedriver is missing")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="no chromium + chromedriver (apt install chromium chromium-driver)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lenet.serve", "--port", str(port), "--device", "cpu",
                             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/healthz", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"lenet-serve did not start: {proc.stderr.read()}")
            time.sleep(0.2)
    yield url
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=900,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _draw(driver, canvas, strokes):
    """Strokes (lists of points in the canvas's 0..1 coordinates) drawn with a pen pointer."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.interaction import POINTER_PEN
    from selenium.webdriver.common.actions.pointer_input import PointerInput
    w, h = canvas.size["width"], canvas.size["height"]
    for stroke in strokes:
        actions = ActionBuilder(driver, mouse=PointerInput(POINTER_PEN, "pen"))
        pen = actions.pointer_action
        # Offsets are from the element's centre.
        x0, y0 = stroke[0]
        pen.move_to(canvas, int((x0 - 0.5) * w), int((y0 - 0.5) * h)).pointer_down()
        for (xa, ya), (xb, yb) in zip(stroke, stroke[1:]):
            for k in range(1, 9):   # small steps, as a hand moves
                t = k / 8
                pen.move_to(canvas, int((xa + (xb - xa) * t - 0.5) * w), int((ya + (yb - ya) * t - 0.5) * h))
        pen.pointer_up()
        actions.perform()


def test_drawing_a_seven_shows_seven(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(server + "/")
    canvas = browser.find_element(By.ID, "pad")
    _draw(browser, canvas, [[(0.25, 0.2), (0.75, 0.2), (0.45, 0.85)]])   # a 7: the bar, then the stem
    WebDriverWait(browser, 20).until(ec.text_to_be_present_in_element((By.ID, "answer"), "7"))
    assert browser.find_element(By.ID, "answer").text == "7"
    assert "win" in browser.find_element(By.ID, "bar7").get_attribute("class")
    width = browser.find_element(By.CSS_SELECTOR, "#bar7 .fill").value_of_css_property("width")
    assert float(width.rstrip("px")) > 0
    assert browser.find_element(By.ID, "seen").get_attribute("src").startswith("data:image/png;base64,")
    assert "ms" in browser.find_element(By.ID, "latency").text
    shot = Path(os.environ.get("LENET_SCREENSHOT_DIR", tmp_path)) / "serve-page.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 1000
