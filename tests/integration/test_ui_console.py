"""The web console in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium) against
a live broker: every page loads with the cluster's content, the charts fill, missing topics and groups are 404
pages, the browser console shows no errors, and writes happen only when allowed. Screenshots go to
``build/test-artifacts/ui/``."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from werkzeug.serving import make_server

from strom.admin import AdminClient, NewTopic
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer import KafkaConsumer
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess
from strom.ui.app import create_app
from strom.ui.cluster_view import ClusterView

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class Console:
    """The console app on a free loopback port, served from a thread."""

    def __init__(self, bootstrap: str, allow_writes: bool) -> None:
        self.view = ClusterView(bootstrap, sample_interval_s=0.5, cache_ttl_s=0.0)
        self.server = make_server("127.0.0.1", 0, create_app(self.view, allow_writes=allow_writes), threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> Console:
        self.view.start_sampling()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.view.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker with: ``orders`` (2 partitions, JSON, text and binary values) read completely by group
    ``g-orders``, and ``lagged`` (500 records) where group ``g-lag`` committed 200: lag 300."""
    broker = BrokerProcess(data_dir=tmp_path_factory.mktemp("ui") / "data",
                           overrides={"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    bootstrap = broker.bootstrap
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic("orders", 2, 1), NewTopic("lagged", 1, 1)]).all().result(30)
        with KafkaProducer({"bootstrap.servers": bootstrap}, key_serializer="bytes",
                           value_serializer="bytes") as producer:
            for i in range(40):
                producer.send("orders", key=b"order-%d" % i, value=b'{"id": %d, "item": "tea"}' % i,
                              partition=i % 2)
            producer.send("orders", key=None, value=b"plain text line", partition=0)
            producer.send("orders", key=b"bin", value=bytes([0, 1, 2, 254, 255]), partition=0)
            for i in range(500):
                producer.send("lagged", value=b"r%d" % i)
            producer.flush(30)
        admin.alter_consumer_group_offsets("g-lag", {TopicPartition("lagged", 0): OffsetAndMetadata(200)}).all() \
            .result(30)
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "g-orders"}, key_deserializer="bytes",
                             value_deserializer="bytes", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(["orders"])
    seen, deadline = 0, time.monotonic() + 30
    while seen < 42:
        assert time.monotonic() < deadline
        seen += consumer.poll(0.5).count()
    consumer.commit_sync()
    consumer.close()
    yield bootstrap
    broker.stop()
    broker.cleanup()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def visit(driver: webdriver.Chrome, url: str, shot: str) -> str:
    driver.get(url)
    driver.save_screenshot(str(ARTIFACTS / f"{shot}.png"))
    return driver.find_element(By.TAG_NAME, "main").text


def console_errors(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def cells(driver: webdriver.Chrome, table_id: str) -> list[list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"table#{table_id} tbody tr")
    return [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]


def wait_until(condition: Any, timeout: float = 30.0) -> Any:
    """Poll ``condition``; an element read while the page is being replaced (a form post navigating) counts as
    "not yet" rather than an error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except (StaleElementReferenceException, NoSuchElementException):
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_every_page_against_a_live_broker(cluster: str, browser: webdriver.Chrome) -> None:
    with Console(cluster, allow_writes=False) as console:
        text = visit(browser, console.url + "/", "overview")
        assert browser.find_element(By.ID, "broker-count").text == "1"
        assert browser.find_element(By.ID, "topic-count").text == "2"
        assert browser.find_element(By.ID, "health").text.endswith("healthy")
        assert "Cluster overview" in text
        partitions_total = browser.find_element(By.ID, "partition-count").text  # __consumer_offsets included

        visit(browser, console.url + "/brokers", "brokers")
        (broker_row,) = cells(browser, "brokers")
        assert broker_row[1] == "127.0.0.1" and broker_row[4] == "yes" and broker_row[5] == partitions_total

        visit(browser, console.url + "/topics", "topics")
        topics = {row[0]: row for row in cells(browser, "topics")}
        assert set(topics) == {"orders", "lagged"}  # internal topics hidden unless asked
        assert topics["orders"][1:4] == ["2", "1", "42"] and topics["lagged"][3] == "500"

        visit(browser, console.url + "/topics/orders", "topic-orders")
        partitions = cells(browser, "partitions")
        assert [(p[0], p[1], p[2], p[3], p[5]) for p in partitions] == [
            ("0", "1", "1", "1", "22"), ("1", "1", "1", "1", "20")]
        # each partition's size on disk (DescribeLogDirs), as the files in the broker's log dir have it
        with AdminClient({"bootstrap.servers": cluster}) as admin:
            (log_dir,) = admin.describe_log_dirs([1]).all().result(30)[1]
        on_disk = [sum(f.stat().st_size for f in Path(log_dir, f"orders-{p}").glob("*.log")) for p in (0, 1)]
        assert min(on_disk) > 0 and [int(p[7].replace(",", "")) for p in partitions] == on_disk
        assert int(browser.find_element(By.ID, "size").text.replace(",", "")) == sum(on_disk)
        wait_until(lambda: int(browser.find_element(By.CSS_SELECTOR, "canvas[data-series]")
                               .get_attribute("data-points") or 0) > 0)
        browser.save_screenshot(str(ARTIFACTS / "topic-orders-chart.png"))

        visit(browser, console.url + "/topics/orders/messages?partition=0&limit=5", "messages-orders-0")
        newest = cells(browser, "messages")
        assert [m[0] for m in newest] == ["21", "20", "19", "18", "17"]  # newest first
        assert newest[0][3].startswith("hex") and "00 01 02 fe ff" in newest[0][3]
        assert newest[1][2].startswith("null") and newest[1][3] == "text\nplain text line"
        assert newest[2][3].startswith("json") and '"item": "tea"' in newest[2][3]

        visit(browser, console.url + "/groups", "groups")
        groups = {row[0]: row for row in cells(browser, "groups")}
        assert groups["g-lag"][4] == "300" and groups["g-orders"][4] == "0"
        assert groups["g-orders"][1] == "Empty"

        visit(browser, console.url + "/groups/g-lag", "group-g-lag")
        assert browser.find_element(By.ID, "total-lag").text == "300"
        assert cells(browser, "lag") == [["lagged", "0", "200", "500", "300", ""]]
        wait_until(lambda: all(int(c.get_attribute("data-points") or 0) > 0
                               for c in browser.find_elements(By.CSS_SELECTOR, "canvas[data-series]")))
        browser.save_screenshot(str(ARTIFACTS / "group-g-lag-charts.png"))
        assert not browser.find_elements(By.ID, "reset-offsets")  # read-only: no write forms
        assert console_errors(browser) == []  # no script or resource errors on any page so far

        for path, shot in (("/topics/no-such-topic", "missing-topic"), ("/groups/no-such-group", "missing-group"),
                           ("/topics/orders/messages?partition=7", "missing-partition")):
            visit(browser, console.url + path, shot)
            assert browser.find_element(By.ID, "error-status").text.startswith("404")
            assert "Traceback" not in browser.page_source
            # the only error is the document's own 404 status; its scripts and styles load fine
            errors = console_errors(browser)
            assert len(errors) == 1 and "status of 404" in errors[0]["message"], errors

        # the same lag, scraped: kafka_exporter's series on the console's /metrics
        def lag_series() -> float | None:
            with urllib.request.urlopen(console.url + "/metrics", timeout=10) as resp:
                for family in text_string_to_metric_families(resp.read().decode()):
                    for s in family.samples:
                        if s.name == "kafka_consumergroup_lag" and s.labels == {
                                "consumergroup": "g-lag", "topic": "lagged", "partition": "0"}:
                            return s.value
            return None

        assert wait_until(lag_series) == 300


def post(url: str, fields: dict[str, str]) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_writes_need_allow_writes_and_confirmation(cluster: str, browser: webdriver.Chrome) -> None:
    with Console(cluster, allow_writes=False) as console:
        status, body = post(console.url + "/topics", {"name": "forbidden", "partitions": "1"})
        assert status == 403 and "read-only" in body
    with Console(cluster, allow_writes=True) as console:
        visit(browser, console.url + "/topics", "topics-writable")
        form = browser.find_element(By.ID, "create-topic")
        form.find_element(By.NAME, "name").send_keys("made-in-browser")
        form.find_element(By.NAME, "partitions").clear()
        form.find_element(By.NAME, "partitions").send_keys("3")
        form.find_element(By.TAG_NAME, "button").click()
        browser.switch_to.alert.accept()
        wait_until(lambda: browser.find_elements(By.ID, "topic-name"))
        browser.save_screenshot(str(ARTIFACTS / "topic-created.png"))
        assert browser.find_element(By.ID, "topic-name").text == "made-in-browser"
        assert len(cells(browser, "partitions")) == 3

        status, body = post(console.url + "/topics/made-in-browser/delete", {"confirm": "wrong"})
        assert status == 400 and "confirm" in body
        status, body = post(console.url + "/topics", {"name": "bad", "partitions": "zero"})
        assert status == 400 and "whole number" in body
        status, body = post(console.url + "/topics", {"name": "made-in-browser", "partitions": "1"})
        assert status == 400 and "TopicAlreadyExists" in body

        visit(browser, console.url + "/topics/made-in-browser", "topic-before-delete")
        form = browser.find_element(By.ID, "delete-topic")
        form.find_element(By.NAME, "confirm").send_keys("made-in-browser")
        form.find_element(By.TAG_NAME, "button").click()
        wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "table#topics"))
        assert "made-in-browser" not in [row[0] for row in cells(browser, "topics")]

        visit(browser, console.url + "/groups/g-lag", "group-reset-form")
        form = browser.find_element(By.ID, "reset-offsets")
        form.find_element(By.NAME, "to").send_keys("earliest")
        form.find_element(By.NAME, "confirm").send_keys("g-lag")
        form.find_element(By.TAG_NAME, "button").click()
        wait_until(lambda: browser.find_element(By.ID, "total-lag").text == "500")
        browser.save_screenshot(str(ARTIFACTS / "group-after-reset.png"))
        assert console_errors(browser) == []
        # put the lag back for other tests in this module
        assert post(console.url + "/groups/g-lag/reset", {"to": "offset", "offset": "200", "confirm": "g-lag"})[0] \
            == 200


def test_strom_ui_command_serves_and_stops_on_sigterm(cluster: str) -> None:
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "strom.cli.main", "ui", "--bootstrap-server", cluster, "--port",
                             "0", "--sample-interval", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("strom console on http://127.0.0.1:") and "(read-only)" in line, line
        url = line.split()[3]
        def lag_shown() -> bool:  # pages serve the sampler's snapshot: the lag appears within a sample or two
            with urllib.request.urlopen(url + "groups/g-lag", timeout=30) as resp:
                return resp.status == 200 and 'id="total-lag">300<' in resp.read().decode()

        deadline = time.monotonic() + 30
        while not lag_shown():
            assert time.monotonic() < deadline, "the console never showed the group's lag of 300"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_sample_that_began_before_a_deletion_does_not_bring_the_topic_back(cluster: str) -> None:
    """The sampler lists topics, a user deletes one, the sampler stores its (now stale) list: the deleted topic
    must not reappear on the next page load (seen in a run: the topics page showed a topic just deleted)."""
    view = ClusterView(cluster, sample_interval_s=0, cache_ttl_s=600)
    try:
        view.create_topic("short-lived", 1, 1)
        load = view._load_topics

        def load_then_a_user_deletes(names: Any) -> Any:
            rows = load(names)
            if "short-lived" in [r.name for r in rows]:
                view.delete_topic("short-lived")  # lands after the sample read the cluster, before it stored
            return rows

        view._load_topics = load_then_a_user_deletes  # type: ignore[method-assign]
        view.sample_once()
        view._load_topics = load  # type: ignore[method-assign]
        assert "short-lived" not in [t.name for t in view.topics()]
        assert "short-lived" not in view.topic_names()
    finally:
        view.close()
