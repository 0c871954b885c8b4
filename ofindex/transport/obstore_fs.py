"""An fsspec async filesystem on obstore (Rust's ``object_store``) for S3 and GCS, chosen with
``storage_options={"backend": "obstore", ...}`` (:func:`.clients.backend_of`); the other
options are obstore's own (``from_url``'s configuration: ``endpoint``, ``access_key_id``,
``client_options`` …). Web servers stay with our HTTP client, whose multi-range requests made
random batches 3 times faster than obstore's one request per range (docs/design.md).

It offers what the storages call through fsspec's documented async API (``_info``,
``_cat_file``, ``_pipe_file`` with ``mode="create"``, ``_rm_file``, ``_cp_file``, ``_ls``), so
every request still runs under our policy (:mod:`.policy`): obstore's own retries are off
(``max_retries=0``), and its failures, which carry no status or cause a policy can read (one
``GenericError`` whose text holds the status and the error kind), become the errors
:mod:`.failures` classifies.

obstore's Rust runtime does not survive a ``fork`` (a child forked after the parent made a
request hangs on its first: obstore is not fork-safe, tokio's threads are gone). A process
forked after this one used obstore refuses to use it (:func:`check_not_forked`) instead of
hanging: use the ``spawn`` or ``forkserver`` start method, or the default backend.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from typing import Any

from fsspec.asyn import AsyncFileSystem

from ..errors import InvalidURLError, StorageError, hint
from .failures import RequestFailure

#: Our protocols and obstore's scheme for each.
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs"}
#: The process that first used obstore (``None``: none has yet).
_USED_BY: list[int | None] = [None]
_STATUS = re.compile(r"status code: (\d{3})")
_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_ENDPOINT = re.compile(r"ConnectError\(\s*\"[^\"]*\",\s*([^\s,]+):(\d+),")
_OPTIONS_HINT = hint("storage_options={'backend': 'fsspec'}", "-s backend=fsspec")
_ALLOW_HTTP_HINT = hint("storage_options={..., 'client_options': {'allow_http': True}}",
                        """-s 'client_options={"allow_http": true}'""")


def check_not_forked() -> None:
    """Note that this process uses obstore, or raise if it was forked from one that did.

    Raises:
        StorageError: A parent used obstore before this process was forked from it.
    """
    used_by = _USED_BY[0]
    if used_by is None:
        _USED_BY[0] = os.getpid()
    elif used_by != os.getpid():
        raise StorageError(
            "obstore cannot be used in a process forked from one that used it (its runtime's "
            "threads do not survive a fork: every request would hang); start worker "
            "processes with the 'spawn' or 'forkserver' method (DataLoader's "
            "multiprocessing_context=), or read through the default backend with "
            f"{_OPTIONS_HINT}")


def failure_of(exc: BaseException) -> BaseException:
    """An obstore error as the error :mod:`.failures` reads (``exc`` when it is one already):
    an answer's status as a :class:`.RequestFailure`, a refused connection, a host that does
    not resolve, a timeout and a dropped connection as the built-in errors for them, an
    object that exists as ``FileExistsError``, a refusal as ``PermissionError``."""
    name = type(exc).__name__
    if name in ("AlreadyExistsError", "PreconditionError"):
        return FileExistsError(str(exc).split("\n", 1)[0])
    if name in ("PermissionDeniedError", "UnauthenticatedError"):
        return PermissionError(str(exc).split("\n", 1)[0])
    if isinstance(exc, OSError) or type(exc).__module__.split(".")[0] != "obstore":
        return exc
    text = str(exc)
    first = text.split("\n", 1)[0]
    if "builder error" in text:  # a request it will not make: the same every time
        return InvalidURLError(
            f"{first}: obstore will not send this request (a plain http:// endpoint needs "
            f"{_ALLOW_HTTP_HINT})")
    status = _STATUS.search(text)
    if status:
        return RequestFailure(first, int(status.group(1)))
    if "ConnectionRefused" in text:
        refused = ConnectionRefusedError(first)
        endpoint = _ENDPOINT.search(text)
        if endpoint:  # the attributes failures.nothing_listens names the address by
            vars(refused).update(host=endpoint.group(1), port=int(endpoint.group(2)))
        return refused
    if "dns error" in text or "failed to lookup address" in text:
        return socket.gaierror(socket.EAI_NONAME, first)
    kind = _KIND.search(text)
    if kind and kind.group(1) == "Timeout":
        return TimeoutError(first)
    if kind:  # Connect, Request, Interrupted, Decode: the connection failed or was cut
        return ConnectionError(first)
    return exc


class ObstoreFileSystem(AsyncFileSystem):  # type: ignore[misc]
    """fsspec's async API on obstore for one protocol and its options.

    Args:
        protocol: ``s3`` or ``gs`` (``gcs``).
        options: obstore's configuration for ``obstore.store.from_url`` (per bucket);
            ``retry_config`` is forced to no retries.
        **kwargs: fsspec's options (``loop``, ``asynchronous`` …).
    """

    protocol = ("obstore",)

    def __init__(self, protocol: str, options: Mapping[str, Any], **kwargs: Any) -> None:
        kwargs.pop("skip_instance_cache", None)
        super().__init__(**kwargs)
        self.scheme = SCHEMES[protocol]
        self.options = {**options, "retry_config": {"max_retries": 0}}
        self.stores: dict[str, Any] = {}

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return str(path).split("://", 1)[-1].rstrip("/")

    def split(self, path: str) -> tuple[Any, str]:
        """The obstore store of ``path``'s bucket and the key in it."""
        check_not_forked()
        bucket, _, key = self._strip_protocol(path).partition("/")
        store = self.stores.get(bucket)
        if store is None:
            from obstore.store import from_url

            store = self.stores[bucket] = from_url(f"{self.scheme}://{bucket}", **self.options)
        return store, key

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        import obstore

        store, key = self.split(path)
        try:
            meta = await obstore.head_async(store, key)
        except FileNotFoundError:
            if not await self._has_children(path):
                raise
            return {"name": self._strip_protocol(path), "size": 0, "type": "directory"}
        except Exception as exc:
            raise failure_of(exc) from exc
        return self._entry(self._strip_protocol(path), meta)

    def _entry(self, name: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        """What fsspec's filesystem of the protocol reports of an object (the same version
        keys: ``ETag``, and GCS's ``generation``)."""
        entry = {"name": name, "size": meta["size"], "type": "file", "ETag": meta["e_tag"],
                 "LastModified": meta["last_modified"]}
        if self.scheme == "gs" and meta.get("version"):
            entry["generation"] = meta["version"]
        return entry

    async def _has_children(self, path: str) -> bool:
        """Whether objects lie under ``path/`` (a directory of the bucket)."""
        import obstore

        store, key = self.split(path)
        try:
            found = await obstore.list_with_delimiter_async(store, key or None)
        except Exception as exc:
            raise failure_of(exc) from exc
        return bool(found["objects"] or found["common_prefixes"])

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None,
                        **kwargs: Any) -> bytes:
        import obstore

        store, key = self.split(path)
        try:
            if start is None and end is None:
                got = await (await obstore.get_async(store, key)).bytes_async()
            elif start is not None and end is not None and end > start:
                got = await obstore.get_range_async(store, key, start=start, end=end)
            elif start is not None and end is not None:
                return b""
            else:
                raise ValueError(f"{path}: give both start and end, or neither")
        except Exception as exc:
            raise failure_of(exc) from exc
        return bytes(got)

    async def _pipe_file(self, path: str, value: bytes, mode: str = "overwrite",
                         **kwargs: Any) -> None:
        import obstore

        store, key = self.split(path)
        try:
            await obstore.put_async(store, key, value,
                                    mode="create" if mode == "create" else "overwrite")
        except Exception as exc:
            raise failure_of(exc) from exc

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        import obstore

        store, key = self.split(path)
        try:
            await obstore.delete_async(store, key)
        except Exception as exc:
            raise failure_of(exc) from exc

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        import obstore

        store, key = self.split(path1)
        other, target = self.split(path2)
        if other is not store:
            raise ValueError(f"{path1} -> {path2}: obstore copies within one bucket only")
        try:
            await obstore.copy_async(store, key, target)
        except Exception as exc:
            raise failure_of(exc) from exc

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        import obstore

        name = self._strip_protocol(path)
        bucket = name.split("/", 1)[0]
        store, key = self.split(name)
        try:
            found = await obstore.list_with_delimiter_async(store, key or None)
        except Exception as exc:
            raise failure_of(exc) from exc
        entries = [self._entry(f"{bucket}/{meta['path']}", meta) for meta in found["objects"]]
        entries += [{"name": f"{bucket}/{prefix.rstrip('/')}", "size": 0, "type": "directory"}
                    for prefix in found["common_prefixes"]]
        if not entries and key:  # a file lists as itself, as fsspec's filesystems do
            entries = [await self._info(name)]
        return entries if detail else [e["name"] for e in entries]

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if mode != "wb":
            raise ValueError(f"{path}: the obstore backend opens files for writing only")
        import obstore

        store, key = self.split(path)
        return obstore.open_writer(store, key)
