"""SaltGUI (the public erwindon/SaltGUI web app, unmodified, from the shared vendor
copy), served by raetsalt-api with rest_cherrypy's ``app``/``static`` options and driven
in headless Chromium through Selenium: log in, the minions and their grains, a
``test.ping`` from the manual-run box, that job's result, events as they arrive.

Each step keeps a screenshot under the test's tmp dir (``saltgui-NN-step.png``).
Needs Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs them when
it runs as root); skipped without them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.helpers import FRED, SALTGUI, Site, started_site
from raetsalt.config import load_node_config
from raetsalt.event import SaltEvent

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("chromedriver", path="/usr/bin") is None
                       or not Path("/usr/bin/chromium").exists(),
                       reason="needs Debian's chromium and chromium-driver"),
    pytest.mark.skipif(not (SALTGUI / "index.html").exists(), reason="no SaltGUI copy"),
]

WAIT = 60.0
GUI = f"""  app: {SALTGUI / 'index.html'}
  static: {SALTGUI / 'static'}
  static_path: /static
"""


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with started_site(2, GUI) as up:
        yield up


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options,
                              service=Service(executable_path="/usr/bin/chromedriver"))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def test_saltgui_end_to_end(site: Site, browser: object, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver: object = browser
    wait = WebDriverWait(driver, WAIT)
    shots: list[Path] = []

    def shot(name: str) -> None:
        path = tmp_path / f"saltgui-{len(shots) + 1:02d}-{name}.png"
        assert driver.save_screenshot(str(path))  # type: ignore[attr-defined]
        shots.append(path)

    def text_in(css: str, text: str) -> None:
        try:
            wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))
        except Exception:
            shot("failed-waiting-for-" + text.replace("/", "_"))
            raise

    # 1. the login page (SaltGUI routes by the URL's fragment: /?query#page)
    driver.get(f"{site.url}/#login")  # type: ignore[attr-defined]
    wait.until(ec.visibility_of_element_located((By.ID, "username")))
    shot("login")
    driver.find_element(By.ID, "username").send_keys(FRED[0])  # type: ignore[attr-defined]
    driver.find_element(By.ID, "password").send_keys(FRED[1])  # type: ignore[attr-defined]
    eauth = driver.find_element(By.CSS_SELECTOR, "#page-login select")  # type: ignore[attr-defined]
    Select(eauth).select_by_value("file")
    driver.find_element(By.ID, "login-button").click()  # type: ignore[attr-defined]

    # 2. the minions, with grains from grains.items
    wait.until(lambda d: "#login" not in d.current_url)
    driver.get(f"{site.url}/#minions")  # type: ignore[attr-defined]
    text_in("#page-minions", "minion1")
    text_in("#page-minions", "minion2")
    shot("minions")

    # 3. one minion's grains
    driver.get(f"{site.url}/?minionid=minion1#grains-minion")  # type: ignore[attr-defined]
    text_in("#page-grains-minion", "web1")
    shot("grains")

    # 4. test.ping from the manual-run box
    driver.find_element(By.ID, "button-manual-run").click()  # type: ignore[attr-defined]
    wait.until(ec.visibility_of_element_located((By.ID, "target")))
    driver.find_element(By.ID, "target").send_keys("*")  # type: ignore[attr-defined]
    driver.find_element(By.ID, "command").send_keys("test.ping")  # type: ignore[attr-defined]
    driver.find_element(By.ID, "run-command").click()  # type: ignore[attr-defined]
    text_in("#popup-output", "minion2")
    output = driver.find_element(By.ID, "popup-output").text  # type: ignore[attr-defined]
    assert "minion1" in output and "true" in output
    shot("test-ping")
    driver.find_element(By.ID, "cmd-close-button").click()  # type: ignore[attr-defined]

    # 5. that job's result, from the job list the API gives
    token = site.login()
    status, _h, body = site.request("GET", "/jobs", headers={"X-Auth-Token": token})
    assert status == 200
    jobs = json.loads(body)["return"][0]
    jid = max(j for j, job in jobs.items() if job["Function"] == "test.ping")
    driver.get(f"{site.url}/?id={jid}#job")  # type: ignore[attr-defined]
    text_in("#page-job", "minion1")
    text_in("#page-job", "minion2")
    shot("job")

    # 6. events arrive on the events page (SSE with the login cookie)
    driver.get(f"{site.url}/?e=1#events")  # type: ignore[attr-defined]
    text_in("#page-events", "Events")
    play = [b for b in driver.find_elements(  # type: ignore[attr-defined]
        By.CSS_SELECTOR, "#page-events span.small-button") if b.is_displayed()
        and b.text.strip() == "\u2bc8"]
    assert play, "no play button on the events page"
    play[0].click()  # the page shows events only while "playing"
    bus = SaltEvent("master", load_node_config(site.master_conf, "master")["sock_dir"])
    try:
        # fired until the page shows one: the page's EventSource may connect after
        # the first (the stream has no replay)
        for n in range(60):
            assert bus.fire_event({"from": "the test", "n": n}, "api/gui/hello"), (
                "\n".join(line for line in site.api.daemon.drain() if "events" in line))
            try:
                WebDriverWait(driver, 0.5).until(ec.text_to_be_present_in_element(
                    (By.CSS_SELECTOR, "#page-events"), "api/gui/hello"))
                break
            except Exception:  # noqa: BLE001 - selenium's TimeoutException: fire again
                continue
    finally:
        bus.destroy()
    text_in("#page-events", "api/gui/hello")
    shot("events")
    assert all(p.stat().st_size > 1000 for p in shots)
