"""The storages a test runs against (local disk, ``memory://``, nginx, moto S3, fake GCS,
Azurite), each a :class:`Backend`; the ``backend`` fixtures of tests/conftest.py make them."""

from __future__ import annotations

import os
import shutil
import uuid

from tests.kit import servers


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


#: The bucket stores: their fsspec module, the extra that installs it, the server fixture,
#: the client options for that server, the filesystem class and the URL scheme.
BUCKET_STORES = {
    "s3": ("s3fs", "s3", "moto_server", servers.s3_options, "S3FileSystem", "s3"),
    "gcs": ("gcsfs", "gcs", "gcs_server", servers.gcs_options, "GCSFileSystem", "gs"),
    "azure": ("adlfs", "azure", "azurite_server", servers.azure_options,
              "AzureBlobFileSystem", "abfs"),
}


def make_backend(name: str, request, tmp_path_factory) -> Backend:
    """The storage ``name`` names (``local``, ``memory``, ``http``, ``s3``, ``gcs``, ``azure``,
    or ``<store>+obstore``), its server started through the session's fixtures."""
    store, _, via = name.partition("+")
    if via == "obstore":
        from tests.kit.helpers import need

        need("obstore", "obstore")
        made = make_backend(store, request, tmp_path_factory)
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
    if name in BUCKET_STORES:
        module, extra, fixture, options_of, filesystem, scheme = BUCKET_STORES[name]
        library = need(module, extra)
        srv = request.getfixturevalue(fixture)
        opts = options_of(srv.url)
        fs = getattr(library, filesystem)(skip_instance_cache=True, **opts)
        return Backend(name, f"{scheme}://{servers.BUCKET}", opts, fs=fs, server=srv)
    raise ValueError(name)
