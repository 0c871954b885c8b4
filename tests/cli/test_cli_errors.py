"""What a user sees when something goes wrong on the command line: one or a few lines naming
the file or URL, the cause and the next step (in command-line terms), the documented exit
code, and a traceback only with --debug. Every case runs the real `ofindex` entry point in a
subprocess, against the suite's real loopback servers where storage is involved."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.kit import servers
from tests.kit.helpers import copy_dataset, need, ref_tfrecord, sigint_as_a_terminal, write_raw

EXE = os.path.join(os.path.dirname(sys.executable), "ofindex")


def run(args, *, env=None, timeout=120, cwd=None, prefix=()):
    """Run ``ofindex args``; ``env`` values of None remove a variable."""
    full = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return subprocess.run([*prefix, EXE, *args], capture_output=True, text=True, env=full,
                          cwd=cwd, timeout=timeout)


def assert_one_line_error(r, *needles, code=1, lines=1):
    err = r.stderr.strip().splitlines()
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert 1 <= len(err) <= lines, r.stderr
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    write_raw(str(d / "part-0"), ref_tfrecord([b"a", b"bb", b"ccc"]))
    write_raw(str(d / "part-1"), ref_tfrecord([b"dddd"]))
    return str(d)


@pytest.mark.parametrize("argv", [
    [], ["build"], ["nosuchcommand"], ["get", "data/", "x"], ["info", "data/", "-s", "novalue"],
    ["get", "data/", "0", "--decode", "--raw"], ["get", "data/", "0", "--as", "example"],
    ["build", "data/", "--format", "csv"], ["build", "data/", "--workers", "many"],
])
def test_bad_command_lines_exit_2_with_one_line(argv, data):
    r = run(argv, cwd=os.path.dirname(data))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and err[-1].startswith("ofindex")
    assert "error:" in err[-1] and "--help" in err[-1]


def test_python_dash_m_is_the_same_command(data):
    r = subprocess.run([sys.executable, "-m", "ofindex", "build", data], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "indexed 2 files, 4 records" in r.stdout
    r = subprocess.run([sys.executable, "-m", "ofindex"], capture_output=True, text=True)
    assert r.returncode == 2


def test_unindexed_directory_names_every_shard_and_the_cli_step(data):
    r = run(["get", data, "0"])  # (info, head and schema read the files' start instead)
    assert_one_line_error(r, "2 of 2 shards have no index", "part-0", "part-1",
                          f"`ofindex build {data}`")
    assert "build_missing" not in r.stderr  # a Python keyword means nothing here


def test_cli_hints_use_flags_not_keyword_arguments(tmp_path):
    p = write_raw(str(tmp_path / "junk.bin"), random.Random(1).randbytes(64))
    r = run(["build", p])
    assert_one_line_error(r, "junk.bin", "cannot detect the record format",
                          "--format tfrecord or --format ofrecord")
    assert "format=" not in r.stderr
    data = bytearray(ref_tfrecord([b"x" * 40] * 3))
    p = write_raw(str(tmp_path / "cut.tfrecord"), bytes(data[:-5]))
    r = run(["build", p])
    assert_one_line_error(r, "cut.tfrecord", "record 2", "`ofindex build --allow-partial`")
    assert "allow_partial" not in r.stderr
    data[12] ^= 1
    p = write_raw(str(tmp_path / "flip.tfrecord"), bytes(data))
    assert run(["build", p]).returncode == 0
    r = run(["get", p, "0"])
    assert_one_line_error(r, "flip.tfrecord", "record 0", "data CRC mismatch", "--no-verify")
    assert "verify=False" not in r.stderr


def test_debug_shows_the_traceback(data):
    r = run(["get", data, "0", "--debug"])
    assert r.returncode == 1 and "Traceback" in r.stderr and "IndexNotFoundError" in r.stderr
    r = run(["get", data, "0"], env={"OFINDEX_DEBUG": "1"})
    assert r.returncode == 1 and "Traceback" in r.stderr


@pytest.mark.parametrize(("module", "url", "extra"), [
    ("s3fs", "s3://bucket/train/", "s3"), ("adlfs", "abfs://container/train/", "azure"),
    ("adlfs", "az://container/train/", "azure")])
def test_missing_extra_names_the_pip_command(data, module, url, extra):
    code = (f"import sys; sys.modules[{module!r}] = None; from ofindex.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "info", url],
                       capture_output=True, text=True, timeout=60)
    assert_one_line_error(r, url.split("//")[0] + "//", f"pip install 'ofindex[{extra}]'")


def test_unknown_protocol(data):
    r = run(["info", "s4://bucket/train"])
    assert_one_line_error(r, "s4://bucket/train", "unknown protocol 's4'")


def test_unreachable_endpoints_fail_at_once_in_one_line():
    """Nothing listens at the endpoint (a mistyped port): said at once, not retried for a
    minute, with where to fix the address."""
    need("s3fs", "s3")
    need("aiohttp", "http")
    port = servers.free_port()  # nothing listens there
    s3 = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
          "AWS_SECRET_ACCESS_KEY": "testing"}
    t = time.monotonic()
    r = run(["build", "s3://bucket/train"], env=s3)  # the default policy: 10 retries in 60 s
    assert_one_line_error(r, "s3://bucket/train",
                          f"nothing listens at 127.0.0.1:{port} (connection refused)",
                          "-s 'client_kwargs=", "AWS_ENDPOINT_URL")
    r = run(["info", f"http://127.0.0.1:{port}/data/part-0"])
    assert_one_line_error(r, f"http://127.0.0.1:{port}/data/part-0",
                          f"nothing listens at 127.0.0.1:{port}",
                          "check the host and port in the URL")
    assert time.monotonic() - t < 20  # two interpreters starting; retrying took 55 s each


def test_dns_and_tls_failures_are_named_not_missing_files(nginx_server):
    """A host that does not resolve and https:// to a plain-HTTP server: the cause, at once
    (not retried), never "no data files found"."""
    for cmd in (["build"], ["info"]):
        r = run([*cmd, "http://no-such-host.invalid/data/part-0"])
        assert_one_line_error(r, "could not resolve host 'no-such-host.invalid'",
                              "check the host name")
        assert "no data files" not in r.stderr
    https = nginx_server.url.replace("http://", "https://")
    for url in (f"{https}/data/", f"{https}/data/part-0"):
        r = run(["info", url])
        # the first request names the URL it made (data/ or its index directory, data.ofindex/)
        assert_one_line_error(r, f"{https}/data", "TLS (https) handshake",
                              "use http:// instead of https://")
        assert "attempts" not in r.stderr


def test_read_only_web_server_names_index_dir(nginx_server, data, tmp_path):
    """nginx answers 405 to a PUT: `build` says the location is read-only and names
    --index-dir, which then works."""
    import uuid

    name = uuid.uuid4().hex[:8]
    copy_dataset(data, os.path.join(nginx_server.root, name))
    url = f"{nginx_server.url}/{name}/"
    r = run(["get", url, "0"])  # no index: the step named must work on a web server
    assert_one_line_error(r, "no index", "--index-dir DIR")
    r = run(["info", url])  # info says the same, and what the files are
    assert r.returncode == 0 and "--index-dir DIR" in r.stdout and "shards:  2" in r.stdout
    r = run(["build", url])
    assert_one_line_error(r, "read-only", "405", "--index-dir DIR")
    assert "index_dir=" not in r.stderr
    idx = str(tmp_path / "idx")
    assert run(["build", url, "--index-dir", idx]).returncode == 0
    r = run(["get", url, "3", "--raw", "--index-dir", idx])
    assert r.returncode == 0 and r.stdout == "dddd", r.stderr


def test_missing_bucket_and_no_credentials(moto_server):
    env = {"AWS_ENDPOINT_URL": moto_server.url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing"}
    r = run(["build", "s3://no-such-bucket-here/train"], env=env)
    assert_one_line_error(r, "s3://no-such-bucket-here/train", "no data files found")
    r = run(["info", "s3://no-such-bucket-here/train/part-0"], env=env)
    assert_one_line_error(r, "no-such-bucket-here")
    bare: dict[str, str | None] = dict.fromkeys(
        ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"))
    bare.update(AWS_ENDPOINT_URL=moto_server.url, AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                AWS_CONFIG_FILE="/nonexistent")
    r = run(["build", "s3://bucket/train"], env=bare)
    assert_one_line_error(r, "s3://bucket/train", "no credentials found", "-s anon=true")


@pytest.fixture
def moto_with_auth():
    """A moto server that checks credentials (as AWS does)."""
    need("s3fs", "s3")
    need("moto.server", "moto[server]")
    port = servers.free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                            env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv = servers.Server(proc, f"http://127.0.0.1:{port}")
    try:
        servers.wait_http(srv.url + "/moto-api/", proc)
        yield srv
    finally:
        srv.stop()


def test_wrong_credentials(moto_with_auth):
    env = {"AWS_ENDPOINT_URL": moto_with_auth.url, "AWS_ACCESS_KEY_ID": "wrong",
           "AWS_SECRET_ACCESS_KEY": "wrong"}
    r = run(["info", "s3://bucket/train/"], env=env)
    assert_one_line_error(r, "s3://bucket/train", "access denied", "check the credentials")


def test_permission_denied(data, tmp_path):
    assert run(["build", data]).returncode == 0
    os.chmod(os.path.join(data, "part-0"), 0)
    # root reads everything: drop its file-permission override for the command (util-linux)
    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
              if os.geteuid() == 0 else [])
    try:
        r = run(["get", data, "0"], prefix=prefix)
    finally:
        os.chmod(os.path.join(data, "part-0"), 0o644)
    assert_one_line_error(r, "Permission denied", os.path.join(data, "part-0"))


def test_read_only_local_directory_indexes_into_the_users_cache(data, tmp_path):
    """Read-only data (the data directory and the one holding it, where the default index
    directory would go): the index goes to the per-user index cache, and opens from there;
    when the cache cannot be written either, the error names --index-dir, which then works."""
    parent = os.path.dirname(os.path.abspath(data))
    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
              if os.geteuid() == 0 else [])
    idx = str(tmp_path / "idx")
    os.makedirs(idx, exist_ok=True)
    cache = tmp_path / "cache"
    cache.mkdir()  # (in the parent, which is read-only next)
    blocked = tmp_path / "blocked"
    blocked.mkdir(mode=0o555)
    os.chmod(data, 0o555)
    os.chmod(parent, 0o555)
    try:
        built = run(["build", data], prefix=prefix, env={"OFINDEX_INDEX_CACHE": str(cache)})
        opened = run(["get", data, "3", "--raw"], prefix=prefix,
                     env={"OFINDEX_INDEX_CACHE": str(cache)})
        r = run(["build", data], prefix=prefix,
                env={"OFINDEX_INDEX_CACHE": str(blocked / "cache")})
        ok = run(["build", data, "--index-dir", idx], prefix=prefix)
    finally:
        os.chmod(parent, 0o755)
        os.chmod(data, 0o755)
    assert built.returncode == 0, built.stderr
    assert opened.returncode == 0 and opened.stdout == "dddd", opened.stderr
    assert sorted(os.listdir(parent)) == ["blocked", "cache", "data", "idx"]
    entry = os.path.realpath(data).replace("/", "%2F")  # the directory's path, encoded
    assert sorted(os.listdir(cache)) == sorted([".pruned", entry])
    assert sorted(os.listdir(cache / entry)) == ["ofindex-manifest.json", "part-0.ofidx",
                                                 "part-1.ofidx"]
    assert_one_line_error(r, data, "read-only or not writable", "--index-dir DIR")
    assert "index_dir=" not in r.stderr
    assert ok.returncode == 0, ok.stderr  # the step named works


def test_not_a_record_file_and_a_gzip_file(tmp_path):
    p = write_raw(str(tmp_path / "notes.txt"), b"hello, this is not a record file\n" * 4)
    assert_one_line_error(run(["build", p]), "notes.txt", "cannot detect the record format")
    gz = write_raw(str(tmp_path / "part-0.gz"), gzip.compress(ref_tfrecord([b"x" * 100] * 5)))
    r = run(["build", gz])  # a compressed file is indexed, not misread as OFRecord
    assert r.returncode == 0 and "1 compressed" in r.stdout, r.stderr
    r = run(["get", gz, "4", "--raw"])
    assert r.returncode == 0 and r.stdout == "x" * 100
    r = run(["build", gz, "--compression", "zlib", "--force"])
    assert_one_line_error(r, "part-0.gz", "not zlib data")


def test_partial_build_info_and_verify(tmp_path):
    d = tmp_path / "d"
    write_raw(str(d / "part-0"), ref_tfrecord([b"a" * 10] * 4))
    write_raw(str(d / "part-1"), ref_tfrecord([b"b" * 10] * 4)[:-3])
    r = run(["build", str(d), "--allow-partial"])
    assert r.returncode == 3 and "PARTIAL" in r.stderr
    r = run(["info", str(d)])
    assert r.returncode == 0 and "PARTIAL: 1 shard" in r.stdout
    assert "part-1  PARTIAL" in r.stdout
    r = run(["info", str(d), "--json"])
    assert '"partial": true' in r.stdout and '"partial_shards": 1' in r.stdout
    r = run(["verify", str(d)])
    assert r.returncode == 3 and "partial: 2 files, 7 records verified" in r.stdout
    assert "only its first 3 records" in r.stderr


def test_broken_pipe_is_quiet(data):
    assert run(["build", data]).returncode == 0
    for _ in range(3):  # the race between head exiting and our writes varies
        r = subprocess.run(f"{EXE} info {data} | head -1; exit ${{PIPESTATUS[0]}}",
                           shell=True, executable="/bin/bash", capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.startswith("format:") and r.stderr == ""


def test_interrupt_exits_130():
    """Ctrl-C while a request hangs (a server that accepts and never answers)."""
    need("aiohttp", "http")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list = []
    accepted = threading.Event()

    def hold() -> None:
        for _ in range(8):
            held.append(srv.accept())
            accepted.set()

    threading.Thread(target=hold, daemon=True).start()
    port = srv.getsockname()[1]
    proc = subprocess.Popen([EXE, "info", f"http://127.0.0.1:{port}/data/part-0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_a_terminal)
    try:
        # interrupted once its request is sent (a fixed sleep could end before a loaded
        # machine has started the interpreter)
        assert accepted.wait(120), "the CLI never connected"
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
    finally:
        proc.kill()
        proc.communicate()  # reaped and its pipes closed, even when the test failed
        for conn, _ in held:
            conn.close()
        srv.close()


def test_convert_into_its_own_source_exits_2_naming_both(data, tmp_path):
    """`ofindex convert DS DS/sub` succeeded (and a rerun read its output as data): an output
    inside the source, the source itself, or a source inside the output is a bad command
    line (exit 2, one line naming both), through a glob and a symbolic link too; nothing is
    written."""
    os.symlink(data, tmp_path / "link")
    pq_dir = tmp_path / "tables"
    pq_dir.mkdir()
    pa, pq = need("pyarrow", "pyarrow"), need("pyarrow.parquet", "pyarrow")
    pq.write_table(pa.table({"x": [1, 2]}), pq_dir / "a.parquet")
    cases = [(data, os.path.join(data, "sub"), "is inside the source"),
             (data, data, "is inside the source"),
             (str(tmp_path / "link"), os.path.join(data, "sub", "deeper"), "is inside the source"),
             (str(pq_dir / "*.parquet"), str(pq_dir / "out"), "is inside the source"),
             (str(pq_dir / "a.parquet"), str(pq_dir), "is inside the output"),
             (str(pq_dir / "a.parquet"), str(tmp_path), "is inside the output")]
    for src, dst, what in cases:
        before = sorted(os.walk(tmp_path))
        r = run(["convert", src, dst, "--no-progress"])
        assert_one_line_error(r, what, src, dst, code=2)
        assert sorted(os.walk(tmp_path)) == before, (src, dst)
    r = run(["convert", data, data + "-converted", "--no-progress"])   # a sibling is fine
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_convert_of_a_damaged_source_is_one_line_naming_the_file(tmp_path):
    """A damaged Parquet file, a truncated one, numpy files that are not, an npy of pickled
    objects and a broken Hugging Face save printed pyarrow's / numpy's / json's exception
    names ('ArrowInvalid: Parquet magic bytes…', 'OSError: Corrupt snappy compressed data',
    'BadZipFile: …', 'JSONDecodeError: …') and 'run again with --debug': one line now, naming
    the file and what to do, exit 1, and nothing written."""
    np = need("numpy", "numpy")
    pa, pq = need("pyarrow", "pyarrow"), need("pyarrow.parquet", "pyarrow")
    pq.write_table(pa.table({"x": np.arange(100_000)}), tmp_path / "good.parquet",
                   row_group_size=10_000)
    whole = (tmp_path / "good.parquet").read_bytes()
    damaged = bytearray(whole)
    damaged[2000:60000] = bytes(58000)
    files = {"not.parquet": b"hello, not parquet", "cut.parquet": whole[: len(whole) // 2],
             "damaged.parquet": bytes(damaged), "bad.npz": b"PK\x03\x04garbage",
             "bad.npy": b"\x93NUMPY garbage"}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "dataset_info.json").write_text("{")
    (tmp_path / "hf" / "state.json").write_text("{}")
    expected = {"not.parquet": "not a readable Parquet file (Parquet magic bytes",
                "cut.parquet": "not a readable Parquet file",
                "damaged.parquet": "damaged: reading failed after 0 of its 100,000 rows",
                "bad.npz": "not a readable .npy / .npz file (File is not a zip file)",
                "bad.npy": "not a readable .npy / .npz file",
                "objects.npy": "holds arrays of Python objects",
                "hf": "not a readable Hugging Face save_to_disk directory"}
    for name, what in expected.items():
        r = run(["convert", str(tmp_path / name), str(tmp_path / f"out-{name}"), "--no-progress"])
        assert_one_line_error(r, f"{tmp_path / name}: {what}", code=1)
        for raw in ("ArrowInvalid", "OSError:", "ValueError:", "BadZipFile", "JSONDecodeError",
                    "--debug"):
            assert raw not in r.stderr, r.stderr
        assert not os.path.exists(tmp_path / f"out-{name}")


# -- every numeric option of every subcommand at 0, -1 and a huge value --------------------------
HUGE = str(10**30)
#: Arguments each subcommand needs besides the option tried ({ds}: an indexed dataset, {file}:
#: its first data file, {text}: that file's text index, {dst}: a new path for each run).
BASE = {
    "build": ["{ds}", "--force", "--no-progress"], "info": ["{ds}"], "get": ["{ds}", "0"],
    "find": ["{ds}", "--where", "label=1"],
    "schema": ["{ds}"], "head": ["{ds}"], "stats": ["{ds}"],
    "convert": ["{ds}", "{dst}", "--no-progress"], "verify": ["{ds}"],
    "export-index": ["{file}", "-o", "{dst}"], "import-index": ["{file}", "{text}"],
    "plan": ["{ds}", "--readers", "4", "--target", "1000", "--store", "s3"],
    "events": ["{ds}"],
    "demo": ["--dir", "{dst}"],
}
#: Where 0 means something (no retries, print no record, free requests …): an option of
#: every subcommand, or "command option".
ZERO_OK = {"--retries", "head -n", "get INDEX", "schema --seed", "plan --price", "plan --rtt",
           "find --head"}
#: Where a negative number means something (a record counted from the end).
NEGATIVE_OK = {"get INDEX"}
#: Runs every command line in one interpreter (the entry point's main(), its output captured),
#: each within 30 s, 2 GiB of memory and files of 64 MiB: a command that works for a huge
#: count (`demo --records 1e30` wrote 22 GB in 5 minutes) fails instead of the machine.
DRIVER = """
import contextlib, io, json, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG) instead

def too_long(*_):
    raise TimeoutError("still running after 30 s")

signal.signal(signal.SIGALRM, too_long)
from ofindex.cli import main
results = []
for argv in json.loads(sys.stdin.read()):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        signal.alarm(30)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # what main let through: a failure of the test
            code, err = -1, io.StringIO(f"escaped main: {type(exc).__name__}: {exc}")
        signal.alarm(0)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def numeric_options():
    """``(command, option, metavar)`` for every option and positional of every subcommand
    that takes a number (a ``type=`` conversion), read from the parser itself: an option
    added later is tried too."""
    from ofindex.cli.parser import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    found = [(name, (action.option_strings or [action.metavar])[-1])
             for name, sub in commands.items() for action in sub._actions
             if action.type is not None and action.choices is None]
    return set(commands), found


def test_every_numeric_option_is_checked_by_the_parser(tmp_path):
    """Every subcommand's numeric options at 0, -1 and 10**30: exit 2 with one line naming
    the option (argparse's usage error), or a successful run; never an exception's name, a
    traceback or exit 1 (`demo --records 0` said 'ValueError: high <= 0', `--shard-records 0`
    exited 1, `head -n -1` and `build --workers -5` were accepted)."""
    from ofindex.cli.synthetic import write_dataset

    commands, options = numeric_options()
    assert commands == set(BASE), "a subcommand without arguments in BASE"
    ds = str(tmp_path / "ds")
    write_dataset(ds, 40, 2, kind="mnist")
    assert run(["build", ds, "--columns", "label"]).returncode == 0  # for find
    file = os.path.join(ds, "part-00000")
    text = str(tmp_path / "part-0.idx")
    assert run(["export-index", file, "-o", text]).returncode == 0
    runs, cases = [], []
    for command, option in options:
        for value in ("0", "-1", HUGE):
            base = [a.format(ds=ds, file=file, text=text, dst=str(tmp_path / f"new-{len(runs)}"))
                    for a in BASE[command]]
            if option in base:
                base[base.index(option) + 1] = value
                argv = [command, *base]
            elif option.startswith("-"):
                argv = [command, *base, option, value]
            else:  # the positional (get INDEX): the value in its place
                argv = [command, *base[:-1], value]
            runs.append(argv)
            cases.append((f"{command} {option}", value))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(runs),
                          capture_output=True, text=True, env=env, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    problems = []
    for (case, value), argv, (code, err) in zip(cases, runs, results, strict=True):
        lines = err.strip().splitlines()
        option = case.split(" ", 1)[1]
        meaningful = {"0": ZERO_OK, "-1": NEGATIVE_OK}.get(value, {case}) & {case, option}
        expected = (0, 2) if meaningful else (2,)
        if (code not in expected or len(lines) > 3 or (code == 2 and (
                len(lines) != 1 or f"argument {option}" not in err))
                or re.search(r"Traceback|\b[A-Z]\w*(Error|Exception|Warning)\b", err)):
            problems.append(f"{' '.join(argv)} -> {code}: {err.strip()[:300]}")
    assert not problems, "\n".join(problems)


def test_numbers_out_of_range_for_the_dataset_exit_2(tmp_path):
    """A record number the dataset has not, or more readers than records to plan for: bad
    arguments for this dataset (exit 2, one line), not a crash (`plan --readers 41` on 40
    records raised numpy's TypeError)."""
    from ofindex.cli.synthetic import write_dataset

    ds = str(tmp_path / "ds")
    write_dataset(ds, 40, 2, kind="random", record_size=50)
    assert_one_line_error(run(["get", ds, "0", "40"]), "record index 40 is out of range for a "
                          "dataset of 40 records (valid: -40 to 39)", code=2)
    assert run(["get", ds, "-40"]).returncode == 0
    assert_one_line_error(run(["plan", ds, "--readers", "41", "--target", "10", "--store",
                               "s3"]), "41 readers for a dataset of 40 records", code=2)
    assert run(["plan", ds, "--readers", "40", "--target", "10", "--store", "s3"]).returncode == 0
