"""The chat page at GET / in a real browser: Debian's chromium, headless, driven by Selenium
through chromium-driver (both installed by scripts/setup.sh; no driver download).

A live `cinder serve` on the default model (SmolLM2-135M-Instruct) and a loopback port.
Checked as a user would: a message streams a reply in (its text grows while the request
runs) with its stats line; Stop aborts the request and the server's /metrics show it
cancelled and its KV blocks free; clicking a token shows the candidates of that step;
a reload keeps the conversation (localStorage); model or user text containing <script>
or an onerror image is shown as text and never runs. With several models (--models-dir)
the header's picker lists them from /v1/models, a message goes to the model picked (the
server's per-model metrics count it), and a corrupt file's error shows in the reply.
Each test saves a screenshot under build/screenshots/.
"""
import json
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.common.exceptions import StaleElementReferenceException

from selenium.webdriver.support.ui import Select

from test_serve import ROOT, Server, binaries, smol
from test_serve_models import QWEN, SMOL, MultiServer, models_dir

SHOTS = ROOT / "build" / "screenshots"


@pytest.fixture(scope="module")
def server():
    s = Server(binaries()[0], smol(), "--parallel", "2", "--ctx", "1024")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    o = Options()
    o.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,860"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def wait(pred, timeout=60, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:  # the page re-renders a streaming reply on every chunk
            v = pred()
        except StaleElementReferenceException:
            v = None
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def shot(browser, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / f"{name}.png"))


def fresh(browser, server):
    browser.get(server.url + "/")
    browser.execute_script("localStorage.clear()")
    browser.get(server.url + "/")
    wait(lambda: "context" in browser.find_element(By.ID, "model").text, what="the model line")


def send(browser, text):
    box = browser.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def replies(browser):
    return browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")


def set_param(browser, pid, value):
    el = browser.find_element(By.ID, pid)
    el.clear()
    el.send_keys(str(value))


def test_reply_streams_in_with_stats(server, browser):
    fresh(browser, server)
    set_param(browser, "temperature", 0)
    set_param(browser, "max_tokens", 120)
    send(browser, "Write two sentences about the sea.")
    lengths = set()

    def done():
        r = browser.find_elements(By.ID, "streaming")
        if r:
            lengths.add(len(r[0].find_element(By.CLASS_NAME, "body").text))
            return False
        st = replies(browser)
        return st and "tokens" in st[-1].find_element(By.CLASS_NAME, "stats").text

    wait(done, what="the reply to finish")
    shot(browser, "chat_reply")
    last = replies(browser)[-1]
    assert len(last.find_element(By.CLASS_NAME, "body").text) > 10
    assert len(lengths) >= 2, f"the reply did not grow while streaming: {lengths}"
    stats = last.find_element(By.CLASS_NAME, "stats").text
    assert "time to first token" in stats and "tok/s" in stats and "finish" in stats


def test_stop_cancels_on_the_server(server, browser):
    fresh(browser, server)
    before = server.metrics()
    set_param(browser, "temperature", 1)
    set_param(browser, "max_tokens", 900)
    # a fixed seed: with a random one the story can end in a few words, before there is
    # anything to stop (seen once in the full suite); this one runs to max_tokens
    set_param(browser, "seed", 42)
    send(browser, "Tell me a very long story about a lighthouse keeper.")
    wait(lambda: browser.find_elements(By.ID, "streaming") and
         len(browser.find_element(By.ID, "streaming").find_element(By.CLASS_NAME, "body").text) > 20,
         what="some streamed text")
    browser.find_element(By.ID, "stop").click()
    wait(lambda: "stopped" in replies(browser)[-1].find_element(By.CLASS_NAME, "stats").text, what="stopped")
    shot(browser, "chat_stopped")
    cancelled = lambda m: [v for lab, v in m["cinder:request_success_total"] if lab["finished_reason"] == "cancelled"][0]
    wait(lambda: cancelled(server.metrics()) >= cancelled(before) + 1, timeout=10, what="the server's cancel")
    m = server.metrics()
    assert m["cinder:client_disconnects_total"][0][1] >= before["cinder:client_disconnects_total"][0][1] + 1
    wait(lambda: server.metrics()["cinder:kv_blocks_used"][0][1] == 0, timeout=10, what="KV blocks freed")


def test_why_this_token_and_reload(server, browser):
    fresh(browser, server)
    set_param(browser, "temperature", 0.7)
    set_param(browser, "top_k", 2)
    set_param(browser, "max_tokens", 24)
    send(browser, "Name a color.")
    wait(lambda: replies(browser) and "tokens" in replies(browser)[-1].find_element(By.CLASS_NAME, "stats").text,
         what="the reply")
    toks = replies(browser)[-1].find_elements(By.CLASS_NAME, "tok")
    assert toks, "the reply has no clickable tokens"
    toks[0].click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#why table tr")
    assert len(rows) == 5
    probs = [float(r.find_elements(By.TAG_NAME, "td")[1].text) for r in rows]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001
    # top-k 2: the 3rd to 5th candidates are struck out
    assert [("out" in r.get_attribute("class")) for r in rows][2:] == [True, True, True]
    assert any("chosen" in r.get_attribute("class") for r in rows)
    shot(browser, "chat_why")
    text = replies(browser)[-1].find_element(By.CLASS_NAME, "body").text
    browser.refresh()
    wait(lambda: replies(browser), what="the conversation after reload")
    assert replies(browser)[-1].find_element(By.CLASS_NAME, "body").text == text
    assert "Name a color." in browser.find_element(By.CSS_SELECTOR, ".msg.user").text
    assert browser.find_element(By.ID, "top_k").get_attribute("value") == "2"


def test_script_in_output_is_text(server, browser):
    fresh(browser, server)
    evil = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> and ```<b>code</b>```"
    conv = {"messages": [{"role": "user", "content": evil},
                         {"role": "assistant", "content": evil, "tokens": [], "finish": "stop"}], "params": {}}
    browser.execute_script("localStorage.setItem('cinder-chat-v1', arguments[0])", json.dumps(conv))
    browser.refresh()
    wait(lambda: replies(browser), what="the stored conversation")
    time.sleep(0.3)
    assert browser.execute_script("return window.pwned === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, ".msg img, .msg script, .msg b")
    body = replies(browser)[-1].find_element(By.CLASS_NAME, "body")
    assert "<script>window.pwned = 1</script>" in body.text
    assert body.find_element(By.CSS_SELECTOR, "pre code").text == "<b>code</b>"
    shot(browser, "chat_script_as_text")


def test_model_picker_with_several_models(browser, tmp_path):
    s = MultiServer(binaries()[0], models_dir(tmp_path))
    try:
        browser.get(s.url + "/")
        browser.execute_script("localStorage.clear()")
        browser.get(s.url + "/")
        pick = wait(lambda: browser.find_element(By.ID, "picker").is_displayed() and
                    browser.find_element(By.ID, "picker"), what="the model picker")
        options = [o.get_attribute("value") for o in Select(pick).options]
        assert sorted(options) == sorted([SMOL, QWEN, "broken"])  # aliases are not repeated
        assert "loads on its first message" in browser.find_element(By.ID, "model").text
        set_param(browser, "temperature", 0)
        set_param(browser, "max_tokens", 8)

        def ask(model, text):
            Select(browser.find_element(By.ID, "picker")).select_by_value(model)
            n = len(replies(browser))
            send(browser, text)
            return wait(lambda: len(replies(browser)) > n and not browser.find_elements(By.ID, "streaming") and
                        replies(browser)[-1].find_element(By.CLASS_NAME, "stats").text, what=f"a reply from {model}")

        assert ask(QWEN, "Say hi.").startswith(QWEN)
        wait(lambda: f"{QWEN} · context" in browser.find_element(By.ID, "model").text, what="QWEN shown loaded")
        shot(browser, "chat_picker_qwen")
        assert ask(SMOL, "Say hi again.").startswith(SMOL)
        reqs = {lab["model_name"]: v for lab, v in s.metrics()["cinder:http_requests_total"]
                if lab["endpoint"] == "/v1/chat/completions" and lab["status"] == "200"}
        assert reqs == {QWEN: 1.0, SMOL: 1.0}
        # the second request carried the whole conversation to the other model
        err = ask("broken", "And you?")
        assert "could not be loaded" in err and "err" in replies(browser)[-1].find_element(
            By.CLASS_NAME, "stats").get_attribute("class")
        shot(browser, "chat_picker_broken")
        # the pick survives a reload
        Select(browser.find_element(By.ID, "picker")).select_by_value(QWEN)
        browser.refresh()
        wait(lambda: Select(browser.find_element(By.ID, "picker")).first_selected_option.get_attribute("value") == QWEN,
             what="the pick after reload")
    finally:
        s.stop()
