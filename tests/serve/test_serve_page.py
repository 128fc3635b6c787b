"""The drawing page of lenet-serve in a real browser: headless Chromium (Debian's chromium and
chromium-driver, which .ci/run installs) driven by Selenium, in a phone's viewport (412x915, as a
mobile device) and a desktop window. Before anything is drawn the page must be clean: no answer,
empty bars and an empty frame where the network's image goes, no broken image or alt text. Drawing
a 7 with pen pointer events must show 7 with its bar chart and the 28x28 image the network
received; Clear must bring the empty page back. Screenshots of each state go to
$LENET_SCREENSHOT_DIR (docs/serve-page.png is the desktop one after drawing)."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest
from serve_process import LenetServe

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'lenet[serve]')")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER), reason="no chromium + chromedriver (apt install chromium chromium-driver)"
)


@pytest.fixture(scope="module")
def server():
    with LenetServe() as s:
        yield s.url


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=900,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


# name: (width, height, mobile). The phone is the issue's: Chromium at 412x915.
VIEWPORTS = {"phone": (412, 915, True), "desktop": (900, 800, False)}


@pytest.fixture(params=list(VIEWPORTS))
def page(server, browser, request):
    """The page loaded in the viewport `request.param`; yields (driver, viewport name)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    width, height, mobile = VIEWPORTS[request.param]
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )
    browser.get(server + "/")
    # The model's name comes from GET /v1/model once the page's script has run.
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "model").text)
    yield browser, request.param
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _screenshot(driver, path: Path) -> None:
    """The whole page, beyond the viewport too (on the phone the answer card is below the pad)."""
    size = driver.execute_script("const e = document.documentElement; return [e.scrollWidth, e.scrollHeight]")
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    assert path.stat().st_size > 1000


def _shot_path(tmp_path, name: str) -> Path:
    return Path(os.environ.get("LENET_SCREENSHOT_DIR", tmp_path)) / name


# Images laid out on the page that show no picture: a browser draws them as a broken-image icon
# with their alt text.
_BROKEN_IMAGES = """return [...document.images]
    .filter(i => i.getClientRects().length > 0 && !(i.complete && i.naturalWidth > 0))
    .map(i => i.id + ': ' + i.alt);"""


def assert_empty_state(driver):
    from selenium.webdriver.common.by import By

    assert driver.execute_script(_BROKEN_IMAGES) == [], "a broken image shows on the empty page"
    assert not driver.find_element(By.ID, "seen").is_displayed()
    frame = driver.find_element(By.CSS_SELECTOR, ".seen .frame")
    assert frame.is_displayed() and frame.size == {"width": 84, "height": 84}, frame.size
    assert driver.find_element(By.ID, "answer").text == "–"
    for field in ("confidence", "latency", "status"):
        assert driver.find_element(By.ID, field).text == "", field
    assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#bars .p")] == ["0%"] * 10
    assert driver.find_elements(By.CSS_SELECTOR, "#bars .bar.win") == []


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
            for k in range(1, 9):  # small steps, as a hand moves
                t = k / 8
                pen.move_to(canvas, int((xa + (xb - xa) * t - 0.5) * w), int((ya + (yb - ya) * t - 0.5) * h))
        pen.pointer_up()
        actions.perform()


def test_the_empty_page_is_clean(page, tmp_path):
    driver, viewport = page
    assert driver.execute_script("return window.innerWidth") == VIEWPORTS[viewport][0]
    assert_empty_state(driver)
    _screenshot(driver, _shot_path(tmp_path, f"serve-page-empty-{viewport}.png"))


def test_drawing_a_seven_shows_seven_and_clear_empties_the_page(page, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver, viewport = page
    canvas = driver.find_element(By.ID, "pad")
    _draw(driver, canvas, [[(0.25, 0.2), (0.75, 0.2), (0.45, 0.85)]])  # a 7: the bar, then the stem
    WebDriverWait(driver, 20).until(ec.text_to_be_present_in_element((By.ID, "answer"), "7"))
    assert driver.find_element(By.ID, "answer").text == "7"
    assert "win" in driver.find_element(By.ID, "bar7").get_attribute("class")
    width = driver.find_element(By.CSS_SELECTOR, "#bar7 .fill").value_of_css_property("width")
    assert float(width.rstrip("px")) > 0
    seen = driver.find_element(By.ID, "seen")
    assert seen.get_attribute("src").startswith("data:image/png;base64,")
    WebDriverWait(driver, 10).until(lambda d: d.execute_script(_BROKEN_IMAGES) == [])  # decoded and shown
    assert seen.is_displayed() and seen.size == {"width": 84, "height": 84}, seen.size
    assert "ms" in driver.find_element(By.ID, "latency").text
    name = "serve-page.png" if viewport == "desktop" else f"serve-page-{viewport}.png"  # the first: docs/
    _screenshot(driver, _shot_path(tmp_path, name))
    driver.find_element(By.ID, "clear").click()
    assert_empty_state(driver)
