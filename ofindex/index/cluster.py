"""Index builds on any ``concurrent.futures.Executor``: a local pool, a Dask or Ray cluster.

Each task indexes one file where the executor runs it (:meth:`.job.FileJob.run`) and
returns its small :class:`BuildResult`; the caller gathers the results and writes the manifest.
Dask and Ray are optional: ``pip install 'ofindex[dask]'`` / ``'ofindex[ray]'``.

* Dask: ``dask.distributed.Client(address).get_executor()``, or :func:`dask_executor`.
* Ray: :class:`RayExecutor` (Ray has no ``concurrent.futures`` executor of its own; this one
  runs each call as a Ray task and hands back the task's ``concurrent.futures.Future``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import pickle
import queue
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..errors import ClusterError, MissingDependencyError
from ..storage import Storage
from .build_file import BuildResult
from .job import FileJob


class FileProgress:
    """Files and bytes done across a cluster: a tqdm bar of files, bytes in its postfix."""

    def __init__(self, total_files: int, enabled: bool) -> None:
        self.bar: Any = None
        self.bytes = 0
        self.skipped = 0
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_files, unit="file", desc="indexing")

    def done(self, result: BuildResult) -> None:
        """Count one finished file."""
        self.bytes += result.size
        self.skipped += result.skipped
        if self.bar is not None:
            self.bar.set_postfix(bytes=_human(self.bytes), skipped=self.skipped, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


#: Storages already made in this worker process, by pickled state: each task arrives with
#: its own unpickled copy, and a remote one would open a new client (a second or so) per file.
_STORAGES: dict[bytes, Storage] = {}


def _interned(storage: Storage) -> Storage:
    key = pickle.dumps(storage)
    return _STORAGES.setdefault(key, storage)


def run_job(job: FileJob, resume: bool) -> BuildResult:
    """One task: :meth:`FileJob.run` with this worker's storages (what a worker runs)."""
    job = dataclasses.replace(job, storage=_interned(job.storage),
                              index_storage=_interned(job.index_storage))
    return job.run(resume)


#: Tasks submitted ahead of the first whose result is not delivered yet: the driver holds at
#: most this many futures and out-of-order results, whatever the number of files (a million
#: futures at once take GBs of the driver's and the scheduler's memory).
IN_FLIGHT = 4096


def _arrived(arrived: queue.SimpleQueue[tuple[int, cf.Future[BuildResult]]], k: int,
             future: cf.Future[BuildResult]) -> None:
    arrived.put((k, future))


def run_on_executor(executor: cf.Executor, jobs: list[FileJob], resume: bool,
                    progress: FileProgress,
                    deliver: Callable[[BuildResult], None] | None = None) -> list[BuildResult]:
    """Run one :func:`run_job` task per job on ``executor``, at most :data:`IN_FLIGHT` at
    once, and hand each result on in job order as soon as it and those before it are in.

    On the first failure (or Ctrl-C) the tasks not started yet are cancelled and the error
    is raised; the executor itself belongs to the caller and is left running.

    Args:
        executor: Any ``concurrent.futures.Executor``.
        jobs: The build jobs.
        resume: Skip files whose sidecar is fresh.
        progress: Counts finished files and bytes.
        deliver: Called with each result in job order (a manifest writer, a compact table);
            ``None`` collects them.

    Returns:
        One :class:`BuildResult` per job, or ``[]`` with ``deliver``.
    """
    collected: list[BuildResult] = []
    take = collected.append if deliver is None else deliver
    arrived: queue.SimpleQueue[tuple[int, cf.Future[BuildResult]]] = queue.SimpleQueue()
    waiting: dict[int, cf.Future[BuildResult]] = {}
    finished: dict[int, BuildResult] = {}
    submitted = delivered = 0
    try:
        while delivered < len(jobs):
            while submitted < min(len(jobs), delivered + IN_FLIGHT):
                future = executor.submit(run_job, jobs[submitted], resume)
                waiting[submitted] = future
                future.add_done_callback(functools.partial(_arrived, arrived, submitted))
                submitted += 1
            k, future = arrived.get()
            del waiting[k]
            finished[k] = future.result()
            progress.done(finished[k])
            while delivered in finished:
                take(finished.pop(delivered))
                delivered += 1
    except BaseException:
        for future in waiting.values():
            future.cancel()
        raise
    return collected


#: Seconds a cluster's address has to accept a TCP connection before a build gives up (it
#: takes milliseconds on a network; Ray's client waits for a dead address for minutes,
#: Dask's for 30 s).
CONNECT_SECONDS = 10.0
#: The port each kind of address means when it names none.
_DEFAULT_PORTS = {"tcp": 8786, "tls": 8786, "ray": 10001, "": 6379}


def _endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a cluster address (``tcp://h:8786``, ``ray://h:10001``, ``h:6379``),
    or ``None`` for one that names no TCP endpoint (``auto``, ``local``, ``inproc://`` …)."""
    scheme, sep, _ = address.partition("://")
    scheme = scheme.lower() if sep else ""
    if scheme not in _DEFAULT_PORTS or (not sep and address in ("auto", "local")):
        return None
    try:
        parts = urlsplit(address if sep else f"//{address}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname, port if port is not None else _DEFAULT_PORTS[scheme]


def check_reachable(address: str, what: str) -> None:
    """Fail at once when nothing listens at a cluster's address (its clients would wait
    for minutes: ``build --ray`` to a dead address hung).

    Args:
        address: The address given (``tcp://host:8786``, ``ray://host:10001``, ``host:6379``).
        what: The cluster's kind, for the message (``"Dask scheduler"``).

    Raises:
        ClusterError: The host name does not resolve, the connection is refused, or no
            answer came within :data:`CONNECT_SECONDS`.
    """
    endpoint = _endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    where = f"{what} {address}"
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS):
            return
    except socket.gaierror as exc:
        raise ClusterError(f"{where}: could not resolve host {host!r} ({exc.strerror}); check "
                           "the address") from None
    except ConnectionRefusedError:
        raise ClusterError(f"{where}: nothing listens at {host}:{port} (connection refused); "
                           "check the address and that the cluster is running") from None
    except OSError as exc:
        raise ClusterError(f"{where}: no connection to {host}:{port} within "
                           f"{CONNECT_SECONDS:g} s ({_said(exc)}); check the address and the "
                           "network") from None


def _said(exc: BaseException) -> str:
    """What a client library's error says, in a few words (its first sentence, without the
    exception's class name)."""
    text = str(exc).strip() or "no answer"
    return text.splitlines()[0].split(". ")[0][:200]


class DaskExecutor(cf.Executor):
    """The ``concurrent.futures`` executor of a Dask cluster; :meth:`shutdown` also closes
    the client it opened.

    Args:
        address: The scheduler, e.g. ``"tcp://10.0.0.1:8786"``.

    Raises:
        MissingDependencyError: ``dask.distributed`` is not installed (an ``ImportError``
            naming ``pip install 'ofindex[dask]'``).
        ClusterError: Nothing answers at ``address`` (within :data:`CONNECT_SECONDS`).
    """

    def __init__(self, address: str) -> None:
        try:
            from dask.distributed import Client
        except ImportError as exc:
            raise MissingDependencyError("building on a Dask cluster needs dask.distributed: "
                                         "pip install 'ofindex[dask]'") from exc
        check_reachable(address, "Dask scheduler")
        try:
            self.client = Client(address, timeout=CONNECT_SECONDS)  # type: ignore[no-untyped-call]
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"Dask scheduler {address}: {_said(exc)}; check the address and "
                               "that the scheduler is running") from exc
        self._executor: cf.Executor = self.client.get_executor()  # type: ignore[no-untyped-call]

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on the cluster; returns its future."""
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop submitting and close the client (the cluster keeps running)."""
        self._executor.shutdown(wait=wait)
        self.client.close()  # type: ignore[no-untyped-call]


class RayExecutor(cf.Executor):
    """A ``concurrent.futures.Executor`` that runs each call as a Ray task.

    Args:
        address: A Ray cluster to connect to (``"auto"``, ``"ray://host:10001"``); ``None``
            uses the running Ray session or starts a local one.
        num_cpus: CPUs each task reserves.

    Raises:
        MissingDependencyError: Ray is not installed (an ``ImportError`` naming
            ``pip install 'ofindex[ray]'``).
        ClusterError: Nothing answers at ``address`` (within :data:`CONNECT_SECONDS`), or Ray
            finds no cluster there.
    """

    def __init__(self, address: str | None = None, num_cpus: float = 1) -> None:
        try:
            import ray
        except ImportError as exc:
            raise MissingDependencyError("building on a Ray cluster needs ray: "
                                         "pip install 'ofindex[ray]'") from exc
        if not ray.is_initialized():
            if address is not None:
                check_reachable(address, "Ray cluster")
            try:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
            except (ConnectionError, TimeoutError, OSError) as exc:
                raise ClusterError(f"Ray cluster {address}: Ray found none there "
                                   f"({_said(exc)}); "
                                   "start one (`ray start --head`) or name its address "
                                   "(ray://host:10001)") from exc
        self._ray = ray
        self._num_cpus = num_cpus
        self._remote: dict[Callable[..., Any], Any] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """Run ``fn(*args, **kwargs)`` as a Ray task; returns its future."""
        remote = self._remote.get(fn)
        if remote is None:
            remote = self._remote[fn] = self._ray.remote(num_cpus=self._num_cpus)(fn)
        future: cf.Future[Any] = remote.remote(*args, **kwargs).future()
        return future
