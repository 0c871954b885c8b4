"""Every documented example runs as written: each code block of README.md and of every page of
the documentation site, docs/*.md, found by itself (Python blocks as plain scripts in a fresh
interpreter, shell blocks line by line through the real `ofindex` entry point), and each
example line of every `ofindex … --help` text.

The examples name `data/` (a generated dataset in the working directory), `s3://bucket/…`,
`gs://public-data/…`, `gs://my-bucket/…` and `abfs://datasets/…` (the suite's moto,
fake-gcs-server and Azurite, reached through AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST and
AZURE_STORAGE_CONNECTION_STRING exactly as a user would point a client at another endpoint),
`https://data.example.com/…` and `tcp://scheduler:8786` (replaced by the suite's nginx URL
and a real Dask LocalCluster's address, the only rewrites). A block may be left out only with
a `<!-- docs-test: skip (reason) -->` line right above it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import ofindex
from tests.kit import paths

ROOT = paths.ROOT
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
#: Every page whose code blocks run: the README and each Markdown file of the site.
PAGES = [README, *sorted(os.path.join(DOCS, name) for name in os.listdir(DOCS)
                         if name.endswith(".md"))]
BIN = os.path.dirname(sys.executable)
HTTP_PLACEHOLDER = "https://data.example.com"
DASK_PLACEHOLDER = "tcp://scheduler:8786"

_BLOCK = re.compile(r"(?:<!-- docs-test: (?P<directive>[^>]*?) -->\n)?```(?P<lang>\w*)\n"
                    r"(?P<body>.*?)```", re.S)


def page_blocks(page: str) -> list[tuple[int, str, str, str]]:
    """``(number, language, directive, body)`` of every fenced block of a Markdown page."""
    with open(page, encoding="utf-8") as f:
        text = f.read()
    return [(k, m["lang"], m["directive"] or "", m["body"])
            for k, m in enumerate(_BLOCK.finditer(text))]


BLOCKS = page_blocks(README)
#: ``(page name, number, language, directive, body)`` of every block of every page.
ALL_BLOCKS = [(os.path.relpath(page, ROOT), *block) for page in PAGES
              for block in page_blocks(page)]
#: Each line of a block marked ``smoke (…)`` (the benchmarks), run with ``--smoke`` as a test of
#: its own: one line's run is bounded by the suite's per-test timeout, not the whole block's.
SMOKE_LINES = [line.split(" #")[0].strip()
               for _, _, lang, directive, body in ALL_BLOCKS
               if directive.startswith("smoke (") and lang == "bash"
               for line in body.splitlines() if line.strip() and not line.startswith("#")]


#: A documented block that crashes says where: Python's fault handler prints every thread's
#: traceback on SIGSEGV, SIGABRT, SIGBUS..., and glibc writes its fatal messages (a heap
#: check's) to stderr rather than to a terminal (reading.md's remote block exited with SIGABRT
#: and an empty stderr once in a fresh-clone run, and once in 26 runs of that page by hand,
#: where the compiled module may have been rebuilt in place meanwhile; the cause is not known).
CRASH_REPORTS = {"PYTHONFAULTHANDLER": "1", "LIBC_FATAL_STDERR_": "1"}


def _run(cmd, cwd, env, timeout=300, shell=False):
    env = {**env, **CRASH_REPORTS}
    run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, shell=shell, executable="/bin/bash" if shell else None)
    assert run.returncode == 0, (
        f"{cmd!r} exited with {run.returncode}\n--- stdout\n{run.stdout[-3000:]}\n"
        f"--- stderr\n{run.stderr[-3000:]}")
    return run


def _make_world(root, moto_server, gcs_server, nginx_server, azurite_server=None):
    """A working directory with data/, and the same shards in the suite's S3, GCS and HTTP
    servers (and Azurite, when given) under the names the examples use. Returns
    ``(cwd, env)``."""
    import gcsfs
    import s3fs

    from ofindex.cli.synthetic import write_dataset
    from tests.kit import servers

    cwd = os.path.join(root, "work")
    os.makedirs(cwd)
    files = write_dataset(os.path.join(cwd, "data"), 3000, 4, index=False)
    import ofindex

    write_dataset(os.path.join(cwd, "data-of"), 500, 2, format="ofrecord", index=False)
    for k in range(2):  # data-gz/: GZIP TFRecords as TensorFlow writes them, not yet indexed
        with ofindex.Writer(os.path.join(cwd, "data-gz", f"part-{k}.tfrecord.gz"),
                            compression="gzip", index=False) as w:
            w.write_many(b"record %d" % i for i in range(5000))
    from ofindex.proto import event_pb2

    for run in ("train", "eval"):  # logs/: a TensorBoard log directory (`ofindex events`)
        with ofindex.Writer(os.path.join(cwd, "logs", run, "events.out.tfevents.1.docs"),
                            index=False) as w:
            for step in range(100):
                event = event_pb2.Event(step=step, wall_time=1.7e9 + step)
                event.summary.value.add(tag="loss", simple_value=1.0 / (step + 1))
                w.write(event)
    s3 = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_options(moto_server.url))
    gcs = gcsfs.GCSFileSystem(skip_instance_cache=True, **servers.gcs_options(gcs_server.url))
    for bucket in ("bucket",):
        if not s3.exists(bucket):
            s3.mkdir(bucket)
    for bucket in ("public-data", "my-bucket"):
        if not gcs.exists(bucket):
            gcs.mkdir(bucket)
    www = os.path.join(nginx_server.root, "train")
    os.makedirs(www, exist_ok=True)
    for f in files:
        name = os.path.basename(f)
        with open(f, "rb") as fh:
            data = fh.read()
        s3.pipe_file(f"bucket/train/{name}", data)
        gcs.pipe_file(f"public-data/train/{name}", data)
        shutil.copy(f, os.path.join(www, name))
    ofindex.build_index(www)  # the web server serves data and sidecars; nothing builds there
    _make_tfds(cwd, gcs)
    env = dict(os.environ)
    if azurite_server is not None:
        import adlfs

        env["AZURE_STORAGE_CONNECTION_STRING"] = servers.azure_connection_string(
            azurite_server.url)
        azure = adlfs.AzureBlobFileSystem(skip_instance_cache=True,
                                          **servers.azure_options(azurite_server.url))
        if not azure.exists("datasets"):
            azure.mkdir("datasets")
        for f in files:
            with open(f, "rb") as fh:
                azure.pipe_file(f"datasets/train/{os.path.basename(f)}", fh.read())
    env.update(
        PATH=BIN + os.pathsep + env.get("PATH", ""),
        AWS_ENDPOINT_URL=moto_server.url, AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
        STORAGE_EMULATOR_HOST=gcs_server.url, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
        AWS_ALLOW_HTTP="true",  # obstore (docs/reading.md) reaches moto over plain HTTP
        PYTHONWARNINGS="error::ResourceWarning",
    )
    return cwd, env


def _make_tfds(cwd, gcs):
    """tensorflow_datasets/rlds_family/1.0.0 (docs/tfds.md), written by TFDS itself in a
    process of its own (TensorFlow stays out of this one), and its copy in
    gs://public-data/tfds/."""
    _run([sys.executable, "-c", "import sys; from tests.kit import tfds_builders; "
          "tfds_builders.prepare('rlds_family', sys.argv[1])",
          os.path.join(cwd, "tensorflow_datasets")], cwd,
         {**os.environ, "PYTHONPATH": ROOT})
    builder = os.path.join(cwd, "tensorflow_datasets", "rlds_family", "1.0.0")
    for name in sorted(os.listdir(builder)):
        with open(os.path.join(builder, name), "rb") as f:
            gcs.pipe_file(f"public-data/tfds/rlds_family/1.0.0/{name}", f.read())


@pytest.fixture(scope="module")
def dask_scheduler(moto_server):
    """A real Dask cluster (one worker process) for the cluster-build examples; its worker
    reaches the suite's S3 the way a cluster's workers get their endpoint: from the
    environment they start in."""
    from dask.distributed import LocalCluster

    worker_env = {"AWS_ENDPOINT_URL": moto_server.url, "AWS_ACCESS_KEY_ID": "testing",
                  "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in worker_env}
    os.environ.update(worker_env)
    try:
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True,  # HTTP server:
                               dashboard_address="127.0.0.1:0", host="127.0.0.1")  # a free port
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    with cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def world(tmp_path_factory, moto_server, gcs_server, nginx_server, azurite_server,
          dask_scheduler):
    cwd, env = _make_world(str(tmp_path_factory.mktemp("docs")), moto_server, gcs_server,
                           nginx_server, azurite_server)
    # data/ indexed before any block runs, as the README's `ofindex build data` leaves it: a
    # page's blocks then pass whichever worker runs them, in whatever order (run alone, the
    # blocks of docs/shuffling.md found no index)
    ofindex.build_index(os.path.join(cwd, "data"))
    env["OFINDEX_DOCS_HTTP"] = nginx_server.url
    env["OFINDEX_DOCS_DASK"] = dask_scheduler
    # Ray's directory of its own (short: Ray's socket paths must stay under 108 bytes): an
    # example's ray.init() starts a cluster, where it would otherwise join the last cluster
    # started on this machine (another test's, run in parallel, or one the user left running)
    ray_dir = tempfile.mkdtemp(prefix="ofx-ray-")
    env["RAY_TMPDIR"] = ray_dir
    yield cwd, env
    shutil.rmtree(ray_dir, ignore_errors=True)


def _placeholders(text: str, env: dict[str, str]) -> str:
    return (text.replace(HTTP_PLACEHOLDER, env["OFINDEX_DOCS_HTTP"])
            .replace(DASK_PLACEHOLDER, env["OFINDEX_DOCS_DASK"]))


def _shell_lines(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("line", SMOKE_LINES, ids=[
    line.replace(".venv/bin/python ", "") for line in SMOKE_LINES])
@pytest.mark.slow
def test_benchmark_smoke(line, world):
    """A benchmark command of the docs, run from the repository with ``--smoke`` (seconds at
    tiny sizes) by the test's interpreter."""
    _, env = world
    command = line.replace(".venv/bin/python", sys.executable)
    # a temporary directory of its own: the tools keep what they generate under
    # $TMPDIR/ofindex-bench, shared by tools (Hugging Face copies of the same records), and
    # the other pytest process may run another tool at the same time; short, since Unix
    # socket paths under it (multiprocessing's) must stay under 108 bytes
    tmp = tempfile.mkdtemp(prefix="ofx-smoke-")
    try:
        _run(command + " --smoke", ROOT, {**env, "TMPDIR": tmp}, timeout=290, shell=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_block(page, number, lang, directive, body, cwd, env):
    """Run one code block of ``page`` as a reader would (python or bash)."""
    if directive.startswith("smoke (") and lang == "bash":
        assert _shell_lines(body), f"{page} block {number}: an empty smoke block"
        return  # each line is a test_benchmark_smoke case
    if directive:
        assert directive.startswith("skip (") and directive.endswith(")"), (
            f"{page} block {number}: unknown docs-test directive {directive!r}")
        return  # left out on purpose, with the reason in the page itself
    body = _placeholders(body, env)
    if lang == "python":
        script = os.path.join(cwd, f"{page.replace(os.sep, '_')}_block_{number}.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(body)
        _run([sys.executable, script], cwd, env)
    elif lang == "bash":
        if body.startswith("python3 -m venv .venv"):
            return  # the install command: test_readme_install_command_works runs it
        for line in _shell_lines(body):
            _run(line, cwd, env, shell=True)
    else:
        pytest.fail(f"{page} block {number} has language {lang!r}: use python or bash so "
                    "that it is run, or mark it `<!-- docs-test: skip (reason) -->`")


#: The pages, each with its blocks in order: a page's later blocks may use what its earlier
#: ones made (writing.md converts into mnist-like/, then reads it), so a page runs as one
#: test, in one process, as its reader runs it (run block by block, the blocks of one page
#: went to different test processes and found nothing).
PAGE_NAMES = sorted({block[0] for block in ALL_BLOCKS})
#: The pages whose blocks take longest (a local Spark, Beam, Dask; Keras training; the CLI's
#: commands one process each; TensorBoard logs, Ray, TFDS: 18-64 s each in a fresh clone): run in
#: the slow tier, which the test command also runs, to keep the default one under 12 minutes on
#: 2 cores (it took 13:00 with every page in it).
SLOW_PAGES = {"docs/engines.md", "docs/tensorflow.md", "docs/cli.md", "docs/training.md",
              "docs/events.md", "docs/writing.md", "docs/ray.md", "docs/format.md",
              "docs/tfds.md"}


@pytest.mark.parametrize("page", [
    pytest.param(page, marks=pytest.mark.slow) if page in SLOW_PAGES else page
    for page in PAGE_NAMES])
@pytest.mark.timeout(900)
def test_documented_blocks_run(page, world):
    cwd, env = world
    for _, number, lang, directive, body in [b for b in ALL_BLOCKS if b[0] == page]:
        _run_block(page, number, lang, directive, body, cwd, env)


def test_readme_has_the_two_setup_commands():
    setup = [b for b in BLOCKS if b[1] == "bash" and b[3].strip().startswith(
        ("python3 -m venv .venv", "bash tools/run-tests.sh"))]
    assert [b[3].strip() for b in setup] == [
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/ofindex demo",
        "bash tools/run-tests.sh"]
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        assert "bash tools/run-tests.sh" in f.read()


@pytest.mark.slow
def test_readme_install_command_works(tmp_path):
    """The README's first command, in a copy of the repository's files (a fresh venv)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    dst = str(tmp_path / "repo")
    for rel in listed.splitlines():
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dst, rel))
    (command,) = [b[3].strip() for b in BLOCKS if b[3].startswith("python3 -m venv")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(BIN))
    command = command.replace("ofindex demo", "ofindex demo --records 5000")
    run = _run(command, dst, env, timeout=600, shell=True)
    assert "records/s" in run.stdout and "loops: compiled" in run.stdout


def _help_examples() -> list[str]:
    from ofindex.cli.parser import EXAMPLES

    out = []
    for name in EXAMPLES:  # build first: the other examples read what it indexed
        text = subprocess.run([os.path.join(BIN, "ofindex"), name, "--help"],
                              capture_output=True, text=True, check=True).stdout
        lines = text.split("examples:\n", 1)[1].splitlines()
        out += [line.strip() for line in lines if line.strip().startswith("ofindex ")]
    top = subprocess.run([os.path.join(BIN, "ofindex"), "--help"], capture_output=True,
                         text=True, check=True).stdout
    listed = [line.strip() for line in top.split("examples:\n", 1)[1].splitlines()
              if line.strip()]
    assert listed == out, "the top-level help lists the subcommands' examples in order"
    return out


@pytest.mark.slow
def test_every_help_example_runs(tmp_path, moto_server, gcs_server, nginx_server,
                                 dask_scheduler):
    cwd, env = _make_world(str(tmp_path), moto_server, gcs_server, nginx_server)
    env.update(OFINDEX_DOCS_HTTP=nginx_server.url, OFINDEX_DOCS_DASK=dask_scheduler)
    examples = _help_examples()
    assert len(examples) >= 9
    for line in examples:
        _run(_placeholders(line, env), cwd, env, shell=True)
