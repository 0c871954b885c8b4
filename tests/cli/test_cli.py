"""The `ofindex` command: subcommands, output and exit codes scripts rely on."""

import json
import os
import subprocess
import sys

import pytest

from ofindex.cli import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, main
from tests.kit.helpers import manifest_of, ref_ofrecord, ref_tfrecord, write_raw

RECORDS = [f"r{i}".encode() for i in range(30)]


@pytest.fixture
def data_dir(tmp_path):
    write_raw(str(tmp_path / "d" / "part-0"), ref_tfrecord(RECORDS[:10]))
    write_raw(str(tmp_path / "d" / "part-1"), ref_tfrecord(RECORDS[10:]))
    return str(tmp_path / "d")


def test_build_info_get_verify(data_dir, capsys):
    assert main(["build", data_dir, "--workers", "2", "--verify", "--no-progress"]) == EXIT_OK
    assert "indexed 2 files, 30 records" in capsys.readouterr().out
    assert main(["info", data_dir, "--json"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 30 and [s["records"] for s in info["shards"]] == [10, 20]
    assert info["loops"] == "compiled"  # the test install builds ofindex._native
    assert main(["info", data_dir]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "records: 30" in printed and "loops:   compiled" in printed
    assert main(["get", data_dir, "12", "-1"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "# record 12 (shard 1, record 2" in out and b"r12".hex(" ") in out
    assert "# record -1 (shard 1, record 19" in out
    assert main(["get", data_dir, "3", "--raw"]) == EXIT_OK
    assert main(["verify", data_dir]) == EXIT_OK
    assert "30 records verified" in capsys.readouterr().out


def test_exit_codes_for_errors(tmp_path, data_dir, capsys):
    assert main(["get", data_dir, "0"]) == EXIT_ERROR  # not indexed yet
    assert "ofindex build" in capsys.readouterr().err
    assert main(["info", data_dir]) == EXIT_OK  # says so, and what indexes them
    assert f"`ofindex build {data_dir}`" in capsys.readouterr().out
    assert main(["build", str(tmp_path / "missing")]) == EXIT_ERROR
    assert main(["build", data_dir, "--no-progress"]) == EXIT_OK
    assert main(["get", data_dir, "30"]) == EXIT_USAGE  # a record number it has not
    assert "out of range" in capsys.readouterr().err
    with pytest.raises(SystemExit) as err:
        main(["build"])
    assert err.value.code == 2


def test_partial_build_and_corruption_found_by_verify(tmp_path, capsys):
    data = bytearray(ref_tfrecord(RECORDS))
    p = write_raw(str(tmp_path / "t"), bytes(data[:-2]))
    assert main(["build", p, "--no-progress"]) == EXIT_ERROR
    assert main(["build", p, "--allow-partial", "--no-progress"]) == EXIT_PARTIAL
    assert "PARTIAL" in capsys.readouterr().err
    data[12] ^= 1  # payload of record 0
    p2 = write_raw(str(tmp_path / "u"), bytes(data))
    assert main(["build", p2, "--no-progress"]) == EXIT_OK
    assert main(["verify", p2]) == EXIT_ERROR
    assert "data CRC mismatch" in capsys.readouterr().err


def test_ofrecord_and_console_script(tmp_path):
    p = write_raw(str(tmp_path / "part-00000"), ref_ofrecord(RECORDS))
    exe = [sys.executable, "-m", "ofindex"]
    run = subprocess.run([*exe, "build", p], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([*exe, "get", str(tmp_path), "5", "--raw"], capture_output=True)
    assert run.returncode == 0 and run.stdout == RECORDS[5]
    run = subprocess.run([*exe, "--help"], capture_output=True, text=True)
    assert "examples:" in run.stdout and "exit codes" in run.stdout


def test_get_decode_prints_features(tmp_path, capsys):
    from ofindex.cli.synthetic import write_dataset

    write_dataset(str(tmp_path), 6, 2, kind="mnist")
    assert main(["get", str(tmp_path), "4", "--decode"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "image" in out and "float32" in out and "(784,)" in out and "label" in out
    assert "..." in out  # long values are elided


def test_build_skips_a_stray_file_with_one_warning_line(data_dir, capsys):
    write_raw(f"{data_dir}/README.txt", b"Two shards of 10 and 20 records.\n")
    assert main(["build", data_dir, "--no-progress"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "indexed 2 files, 30 records" in out
    (line,) = err.splitlines()
    assert line.startswith("WARNING: skipped 1 file") and f"{data_dir}/README.txt" in line
    assert main(["info", data_dir]) == EXIT_OK and "records: 30" in capsys.readouterr().out


def test_build_strict_refuses_a_stray_file_in_one_line(data_dir, capsys):
    write_raw(f"{data_dir}/label.labels.txt", b"cat\ndog\n")
    assert main(["build", data_dir, "--strict", "--no-progress"]) == EXIT_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ofindex: error: ") and f"{data_dir}/label.labels.txt" in line
    assert "without --strict" in line and "strict=" not in line


def test_build_refuses_mixed_framings_in_one_line(data_dir, capsys):
    write_raw(f"{data_dir}/part-2", ref_ofrecord(RECORDS))
    assert main(["build", data_dir, "--no-progress"]) == EXIT_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ofindex: error: ")
    assert f"2 TFRecord ({data_dir}/part-0, {data_dir}/part-1)" in line
    assert f"1 OFRecord ({data_dir}/part-2)" in line and "--format" in line
    assert main(["build", data_dir, "--format", "ofrecord", "--no-progress"]) == EXIT_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert "--format ofrecord was given but 2 files start with a valid TFRecord header" in line


def test_commands_on_a_listed_directory_say_what_they_skipped_in_one_line(data_dir, capsys):
    assert main(["build", data_dir, "--no-progress"]) == EXIT_OK
    write_raw(f"{data_dir}/NOTES.md", b"# notes\n")
    for command in (["info", data_dir], ["verify", data_dir]):  # the manifest: nothing to say
        assert main(command) == EXIT_OK
        assert capsys.readouterr().err == ""
    os.remove(manifest_of(data_dir))  # listed: NOTES.md has no index
    assert main(["info", data_dir]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "records: 30" in out
    (line,) = err.splitlines()
    assert line.startswith("WARNING: skipped 1 file") and f"{data_dir}/NOTES.md" in line
