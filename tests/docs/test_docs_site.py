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
import re
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest

from tests.kit import paths
from tests.kit.helpers import need, require

ROOT = paths.ROOT
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


#: The modules whose ``__all__`` a user imports from; every module of ``ofindex.integrations``
#: not starting with an underscore is one too (found by listing the package).
PUBLIC_MODULES = ["ofindex", "ofindex.decode", "ofindex.decode.images", "ofindex.encode",
                  "ofindex.write", "ofindex.convert", "ofindex.schema", "ofindex.shuffle",
                  "ofindex.planning", "ofindex.planning.splits", "ofindex.tfds",
                  "ofindex.write.jobs", "ofindex.cache.chain", "ofindex.cache.data",
                  "ofindex.cache.machine"]
#: Sections of the API reference in the order a user needs them: an id of each, in order.
API_ORDER = ["ofindex.open", "ofindex.build_index", "ofindex.Dataset", "ofindex.Writer",
             "ofindex.ShardedWriter", "ofindex.decode.decode_example",
             "ofindex.shuffle.GlobalShuffleSampler", "ofindex.integrations.torch.TorchDataset",
             "ofindex.integrations.tf.TFBatches", "ofindex.errors.OfindexError"]
#: Markup the renderer did not understand: a Sphinx role (``:func:`` before its code), a
#: doctest directive, a reST ``::`` ending a paragraph.
RAW_MARKUP = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|ref|term|doc):"
                        r"|doctest:|::\s*$", re.M)
#: A signature default that is a constant's bare name (``sample=SAMPLE``), not its value.
NAMED_DEFAULT = re.compile(r"=\s*([A-Z][A-Z0-9_]+)\b(?!\.)")


@functools.cache
def _package():
    """The ofindex package as griffe reads its sources (nothing imported)."""
    need("griffe", "docs")
    import griffe

    return griffe.load("ofindex", search_paths=[ROOT], resolve_aliases=True,
                       resolve_external=False)


def public_names() -> dict[str, str]:
    """``{"module.name": path of the object it is}`` for every public name."""
    package = _package()
    integrations = sorted(f"ofindex.integrations.{name[:-3]}" for name in os.listdir(
        os.path.join(ROOT, "ofindex", "integrations"))
        if name.endswith(".py") and not name.startswith("_"))
    out = {}
    for module_path in [*PUBLIC_MODULES, *integrations]:
        module = package.get_member(module_path.removeprefix("ofindex.")) \
            if module_path != "ofindex" else package
        assert module.exports, f"{module_path} has no __all__"
        for name in map(str, module.exports):
            out[f"{module_path}.{name}"] = _target(module[name])
    return out


def _target(obj) -> str:
    return obj.final_target.path if obj.is_alias else obj.path


def _documented(ids: set[str]) -> set[str]:
    """The paths of the objects that the page's ids document."""
    import griffe

    package = _package()
    out = set()
    for anchor in ids:
        if not anchor.startswith("ofindex"):
            continue
        try:
            obj = package if anchor == "ofindex" else package.get_member(
                anchor.removeprefix("ofindex."))
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        out.add(_target(obj))
    return out


def api_page_problems(page: str, public: dict[str, str]) -> list[str]:
    """What is wrong with the built API reference page ``page`` (its HTML): raw markup in
    its text outside code blocks, a public name it does not document, sections out of
    order, a default shown as a constant's name."""
    article = page[page.index("<article"):page.index("</article>")]
    prose = re.sub(r"<pre\b.*?</pre>", "", article, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", prose))
    problems = [f"raw markup: {text[max(0, m.start() - 60):m.end() + 40]!r}"
                for m in RAW_MARKUP.finditer(text)]
    problems += ["a >>> example as a blockquote" for _ in re.finditer("<blockquote", article)]
    parser = _Ids()
    parser.feed(article)
    documented = _documented(parser.ids)
    problems += [f"{name} is not documented" for name, path in sorted(public.items())
                 if path not in documented]
    where = [article.find(f'id="{anchor}"') for anchor in API_ORDER]
    if -1 in where or where != sorted(where):
        problems.append(f"sections out of order: {dict(zip(API_ORDER, where, strict=True))}")
    for signature in re.findall(r'<div class="doc-signature.*?</div>', article, re.S):
        code = html.unescape(re.sub(r"<[^>]+>", "", signature))
        problems += [f"default named, not shown: {m.group(0)!r} in {code[:60]!r}"
                     for m in NAMED_DEFAULT.finditer(code)]
    return problems


def test_api_reference_documents_every_public_name_in_clean_markdown(site):
    """The API page renders the docstrings' roles, examples and literal blocks (no raw
    ``:func:``, no ``# doctest:``, no ``>>>`` blockquotes), documents every name of every
    public module's ``__all__`` (every integration's too), in the order a user needs them,
    with defaults as values."""
    with open(os.path.join(site, "api", "index.html"), encoding="utf-8") as f:
        page = f.read()
    public = public_names()
    assert len(public) > 140 and "ofindex.integrations.keras.KerasBatches" in public
    problems = api_page_problems(page, public)
    assert not problems, "\n".join(problems[:40])


def test_the_api_checker_catches_raw_markup_and_missing_names():
    page = ('<article><h3 id="ofindex.open">open</h3><div class="doc-signature x"><pre>'
            "<code>infer_spec(ds, sample=SAMPLE)</code></pre></div>"
            "<p>See :func:<code>ofindex.build_index</code>.</p><blockquote>&gt;&gt;&gt; x"
            "</blockquote>\n<p>Layout::</p>\n<p>x  # doctest: +SKIP</p></article>")
    problems = api_page_problems(page, {"ofindex.open": "ofindex.opening.open",
                                        "ofindex.build_index": "ofindex.index.builder.x"})
    assert [p.split(":")[0] for p in problems] == [
        "raw markup", "raw markup", "raw markup", "a >>> example as a blockquote",
        "ofindex.build_index is not documented", "sections out of order",
        "default named, not shown"], problems


def test_docstrings_become_markdown_the_site_renders(monkeypatch):
    """tools/docs_griffe.py (the site's griffe extension): roles resolved from the
    docstring's scope (wrapped across lines too), ``>>>`` examples and ``::`` blocks fenced,
    doctest directives dropped."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import docs_griffe

    scope = _package().get_member("integrations.tf.TFBatches")
    text = ("Iterate :meth:`dataset`, see :class:`~ofindex.shuffle.\n    GlobalShuffleSampler`"
            " and :func:`nowhere`; :ref:`kept`.")
    assert docs_griffe.convert_roles(text, scope) == (
        'Iterate <autoref identifier="ofindex.integrations.tf.TFBatches.dataset" optional>'
        "<code>dataset</code></autoref>, see <autoref identifier=\"ofindex.shuffle."
        'GlobalShuffleSampler" optional><code>GlobalShuffleSampler</code></autoref> and '
        '<autoref identifier="nowhere" optional><code>nowhere</code></autoref>; :ref:`kept`.')
    doc = ("Write.\n\n>>> with Writer(p) as w:   # doctest: +SKIP\n...     w.write(b'x')\n"
           "... # doctest: +SKIP\n\nLayout::\n\n    0  8s  magic\n    8  H   version\n\n"
           "Code::\n\n    x = 1\n\nEnd.")
    assert docs_griffe.convert_literal_blocks(docs_griffe.convert_doctests(doc)) == (
        "Write.\n\n```pycon\n>>> with Writer(p) as w:\n...     w.write(b'x')\n```\n\n"
        "Layout:\n\n```text\n0  8s  magic\n8  H   version\n```\n\n"
        "Code:\n\n```python\nx = 1\n```\n\nEnd.")


def test_landing_page_lists_every_page_and_an_install_line():
    """The home page's "Where to go next" links every other page of the site (mkdocs.yml's
    nav), and the page shows how to install."""
    import yaml

    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = [next(iter(item.values())) for item in yaml.safe_load(f)["nav"]]
    with open(os.path.join(ROOT, "docs", "index.md"), encoding="utf-8") as f:
        home = f.read()
    next_steps = home.split("## Where to go next", 1)[1]
    linked = re.findall(r"\]\(([\w-]+\.md)\)", next_steps)
    assert sorted(set(linked)) == sorted(p for p in nav if p != "index.md")
    assert re.search(r"```bash\n[^`]*pip install[^`]*```", home)


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
    require(os.path.exists(CHROMIUM), "chromium",
            "apt-get install chromium (bash tools/run-tests.sh installs it)")
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
            pending: set = set()  # the page's requests not finished yet
            tab.on("request", lambda r: pending.add(r))
            tab.on("requestfinished", lambda r: pending.discard(r))
            tab.on("requestfailed", lambda r: (pending.discard(r), problems.append(
                f"{current[0]}: request failed: {r.url} ({r.failure})")))
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
                if page == "api/":
                    problems += _api_page_as_shown(tab)
                if page == "":
                    tab.screenshot(path=os.path.join(ROOT, "docs", "preview.png"))
                # what the page still loads (a favicon asked for late) finishes before the
                # next page: leaving earlier aborts it, a failure of the test, not the site
                deadline = time.monotonic() + 10
                while pending and time.monotonic() < deadline:
                    tab.wait_for_timeout(50)
        finally:
            browser.close()
    assert not problems, "\n".join(problems[:50])
    assert len(pages) >= 12


def _api_page_as_shown(tab) -> list[str]:
    """What the browser shows of the API reference: no raw markup in its text (code blocks
    aside), its ``>>>`` examples as code blocks, its sections in the order of API_ORDER."""
    text = tab.evaluate("""() => { const article = document.querySelector('article')
        .cloneNode(true); article.querySelectorAll('pre').forEach(p => p.remove());
        return article.innerText; }""")
    found = [f"api: raw markup shown: {text[max(0, m.start() - 60):m.end() + 40]!r}"
             for m in RAW_MARKUP.finditer(text)]
    if ">>>" in text:
        found.append("api: a >>> example shown outside a code block")
    examples = tab.evaluate("""() => Array.from(document.querySelectorAll('article pre'))
        .filter(p => p.innerText.includes('>>>')).length""")
    if examples < 5:  # Writer, ShardedWriter, convert, encode_example, infer_spec
        found.append(f"api: {examples} examples shown as code blocks, not 5")
    ids = tab.evaluate("() => Array.from(document.querySelectorAll('article [id]'))"
                       ".map(e => e.id)")
    where = [ids.index(anchor) if anchor in ids else -1 for anchor in API_ORDER]
    if -1 in where or where != sorted(where):
        found.append(f"api: sections out of order: {dict(zip(API_ORDER, where, strict=True))}")
    return found


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

