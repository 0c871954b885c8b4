"""The documentation site builds with warnings as errors, and every page of it works in a
browser: served on 127.0.0.1 (a free port, the server stopped by its PID) and loaded in
headless Chromium (Debian's package, driven by Playwright), a page fails on a console error,
a request that fails, an image that does not load, or an internal link to a page or an anchor
that does not exist. The home page's screenshot is written to docs/preview.png, the site's
preview.
"""

from __future__ import annotations

import functools
import html.parser
import os
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest
from helpers import need

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
#: As the machine's probe starts it: no sandbox as root, no connections of its own.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built from docs/ by ``mkdocs build --strict`` (a warning fails it)."""
    need("mkdocs", "docs")
    need("mkdocstrings", "docs")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert not warnings, warnings
    print(f"site built in {time.monotonic() - start:.1f} s")
    return str(out)


def _pages(site: str) -> list[str]:
    """Every page of the site, as paths relative to its root ("" for the home page)."""
    pages = []
    for folder, _, files in os.walk(site):
        if "index.html" in files:
            rel = os.path.relpath(folder, site)
            pages.append("" if rel == "." else rel + "/")
    return sorted(pages)


def test_site_has_a_page_for_every_markdown_file(site):
    pages = set(_pages(site))
    for name in os.listdir(os.path.join(ROOT, "docs")):
        if name.endswith(".md"):
            page = "" if name == "index.md" else name[:-3] + "/"
            assert page in pages, f"docs/{name} is not in the site: add it to mkdocs.yml's nav"


def test_cli_reference_is_the_parser_s_own_help(site):
    from ofindex.cli.parser import build_parser

    with open(os.path.join(site, "cli", "index.html"), encoding="utf-8") as f:
        page = f.read()
    parser = build_parser()
    for action in parser._actions:
        for name, sub in (getattr(action, "choices", None) or {}).items():
            if hasattr(sub, "format_help"):
                assert f"ofindex {name}" in page
                for option in sub._option_string_actions:
                    assert option in page, (name, option)


class _Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.ids.update(value for key, value in attrs if key in ("id", "name") and value)


@functools.cache
def _ids_of(site: str, page: str) -> set[str]:
    """The ids and names of a built page's elements (parsed once per page: the API
    reference's table of contents links to hundreds of its own anchors)."""
    parser = _Ids()
    with open(os.path.join(site, page, "index.html"), encoding="utf-8") as f:
        parser.feed(f.read())
    return parser.ids


@pytest.fixture(scope="module")
def served(site):
    """``python -m http.server`` on a free port of 127.0.0.1, stopped by its PID."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                             "127.0.0.1", "--directory", site],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "no server"
                time.sleep(0.05)
        yield url
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@pytest.mark.slow
def test_every_page_loads_in_chromium_without_errors(site, served):
    need("playwright", "docs")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed: apt-get install chromium "
                    "(bash tools/run-tests.sh installs it)")
    from playwright.sync_api import sync_playwright

    pages = _pages(site)
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            current = [""]
            tab.on("console", lambda m: m.type == "error" and problems.append(
                f"{current[0]}: console error: {m.text}"))
            tab.on("pageerror", lambda e: problems.append(f"{current[0]}: {e}"))
            tab.on("requestfailed", lambda r: problems.append(
                f"{current[0]}: request failed: {r.url} ({r.failure})"))
            tab.on("response", lambda r: r.status >= 400 and problems.append(
                f"{current[0]}: {r.status} for {r.url}"))
            for page in pages:
                current[0] = page or "home"
                # every request of the page finished (the search index's web worker loads
                # after "load": leaving the page earlier aborts it, a false failure)
                tab.goto(served + page, wait_until="networkidle")
                broken = tab.evaluate("""() => Array.from(document.images)
                    .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)""")
                problems += [f"{current[0]}: image does not load: {src}" for src in broken]
                links = tab.evaluate("() => Array.from(document.querySelectorAll('a[href]'))"
                                     ".map(a => a.href)")
                problems += _broken_links(site, served, page, links)
                if page == "":
                    tab.screenshot(path=os.path.join(ROOT, "docs", "preview.png"))
        finally:
            browser.close()
    assert not problems, "\n".join(problems[:50])
    assert len(pages) >= 12


def _broken_links(site: str, served: str, page: str, links: list[str]) -> list[str]:
    """The internal links of ``page`` that lead to no page, file or anchor of the site."""
    found = []
    for link in links:
        if not link.startswith(served):
            continue  # another site: not checked (the machine has no internet)
        parts = urllib.parse.urlsplit(link)
        target = urllib.parse.unquote(parts.path[len(urllib.parse.urlsplit(served).path):])
        path = os.path.join(site, target)
        if target == "" or target.endswith("/"):
            if not os.path.exists(os.path.join(path, "index.html")):
                found.append(f"{page or 'home'}: link to a missing page: {link}")
                continue
            if parts.fragment and parts.fragment not in _ids_of(site, target):
                found.append(f"{page or 'home'}: link to a missing anchor: {link}")
        elif not os.path.isfile(path):
            found.append(f"{page or 'home'}: link to a missing file: {link}")
    return found

