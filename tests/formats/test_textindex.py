"""The text 'offset length' index shared with vahidk's tfrecord2idx and NVIDIA DALI: export,
and an import that trusts no line of it (each bad line is refused with an OfindexError naming
the text index, the line and the next step, in CLI terms on the command line and in Python
terms from Python)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ofindex
from ofindex import CorruptRecordError, SidecarError, StaleIndexError
from ofindex.cli import main
from ofindex.formats.textindex import parse_text
from ofindex.index.textimport import sidecar_from_text
from ofindex.storage import storage_for
from tests.kit.fuzzkit import Tally, guarded
from tests.kit.helpers import ref_ofrecord, ref_tfrecord, sidecar_of, write_raw

RECORDS = [b"x" * n for n in (0, 1, 10, 300, 7)]
#: the TFRecord file of RECORDS: its records' offsets and framed lengths (16 bytes of framing)
SPANS = [(0, 16), (16, 17), (33, 26), (59, 316), (375, 23)]
SIZE = 398
TALLY = Tally("import-index, mutated text indexes")


def _text(spans) -> bytes:
    return b"".join(b"%d %d\n" % span for span in spans)


def _load_tfrecord2idx():
    """vahidk's tfrecord2idx module alone: importing the `tfrecord` package registers
    'tensorflow.BytesList', which clashes with TensorFlow loaded by other tests."""
    import importlib.util

    spec = importlib.util.find_spec("tfrecord")
    assert spec is not None, "the test extra installs vahidk's tfrecord"
    path = os.path.join(os.path.dirname(spec.origin), "tools", "tfrecord2idx.py")
    mod_spec = importlib.util.spec_from_file_location("_vahidk_tfrecord2idx", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def test_export_matches_tfrecord2idx_and_imports_back(tmp_path, capsys):
    tfrecord2idx = _load_tfrecord2idx()
    data = write_raw(str(tmp_path / "a.tfrecord"), ref_tfrecord(RECORDS))
    theirs = str(tmp_path / "theirs.idx")
    tfrecord2idx.create_index(data, theirs)
    assert main(["build", data, "--no-progress"]) == 0
    assert main(["export-index", data, "--output", str(tmp_path / "ours.idx")]) == 0
    assert (tmp_path / "ours.idx").read_text() == (tmp_path / "theirs.idx").read_text()
    assert (tmp_path / "ours.idx").read_bytes() == _text(SPANS)

    os.unlink(sidecar_of(data))
    assert main(["import-index", data, theirs]) == 0
    assert ofindex.open(data)[:] == RECORDS


def test_import_takes_whitespace_variants_and_ofrecord_files(tmp_path, capsys):
    data = write_raw(str(tmp_path / "a.ofrecord"), ref_ofrecord(RECORDS))
    spans = [(0, 8), (8, 9), (17, 18), (35, 308), (343, 15)]  # 8 bytes of framing
    text = b"".join(b" %d\t%d \r\n" % span for span in spans) + b"\n\n"
    index = write_raw(str(tmp_path / "a.idx"), text)
    assert main(["import-index", data, index]) == 0
    assert ofindex.open(data)[:] == RECORDS


@pytest.fixture
def tfrecord(tmp_path):
    return write_raw(str(tmp_path / "a.tfrecord"), ref_tfrecord(RECORDS))


def _lines(edit) -> bytes:
    spans = [f"{o} {n}" for o, n in SPANS]
    return ("\n".join(edit(spans)) + "\n").encode()


# (text index, line named, words of the message, error class from Python)
BAD = {
    # the issue's case: an offset past int64 (was OverflowError: Python int too large)
    "offset past int64": (_lines(lambda s: [s[0], "99999999999999999999 17", *s[2:]]), 2,
                          "larger than 2**63 - 1", SidecarError),
    "length past int64": (_lines(lambda s: [s[0], "16 18446744073709551616", *s[2:]]), 2,
                          "larger than 2**63 - 1", SidecarError),
    "offset 2**63": (_lines(lambda s: [s[0], f"{2**63} 17", *s[2:]]), 2,
                     "larger than 2**63 - 1", SidecarError),
    "a number of 5000 digits": (_lines(lambda s: [s[0], "1" * 5000 + " 17", *s[2:]]), 2,
                                "larger than 2**63 - 1", SidecarError),
    "offset 2**63 - 1, past the file": (_lines(lambda s: [s[0], f"{2**63 - 1} 17", *s[2:]]), 2,
                                        "starts past the end", StaleIndexError),
    "offset + length past int64": (_lines(lambda s: [s[0], f"16 {2**63 - 1}", *s[2:]]), 2,
                                   "runs past the end", StaleIndexError),
    "length past the file": (_lines(lambda s: [*s[:4], "375 24"]), 5, "runs past the end",
                             StaleIndexError),
    "negative offset": (_lines(lambda s: [s[0], "-16 17", *s[2:]]), 2, "at least 0",
                        SidecarError),
    "negative length": (_lines(lambda s: [s[0], "16 -17", *s[2:]]), 2, "at least 0",
                        SidecarError),
    "hexadecimal": (_lines(lambda s: [s[0], "0x10 17", *s[2:]]), 2, "not a whole number",
                    SidecarError),
    "a fraction": (_lines(lambda s: [s[0], "16 17.0", *s[2:]]), 2, "not a whole number",
                   SidecarError),
    "non-ASCII digits": (_lines(lambda s: [s[0], "\u0661\u0666 17", *s[2:]]), 2,
                         "not a whole number", SidecarError),
    "one field": (_lines(lambda s: [s[0], "16", *s[2:]]), 2, "1 fields instead of 2",
                  SidecarError),
    "three fields": (_lines(lambda s: [s[0], "16 17 0", *s[2:]]), 2, "3 fields instead of 2",
                     SidecarError),
    "a blank line": (_lines(lambda s: [s[0], "", *s[1:]]), 2, "0 fields instead of 2",
                     SidecarError),
    "not text": (b"\x00\xff\xfe garbage\n", 1, "not a whole number", SidecarError),
    "first record not at byte 0": (_lines(lambda s: s[1:]), 1, "does not start at byte 0",
                                   StaleIndexError),
    "overlapping spans": (_lines(lambda s: [s[0], "10 23", *s[2:]]), 2, "overlaps",
                          StaleIndexError),
    "a line twice": (_lines(lambda s: [*s[:2], s[1], *s[2:]]), 3, "overlaps", StaleIndexError),
    "lines out of order": (_lines(lambda s: [s[0], s[2], s[1], *s[3:]]), 2,
                           "leaves bytes 16 to 33", StaleIndexError),
    "a gap": (_lines(lambda s: [s[0], "20 13", *s[2:]]), 2, "leaves bytes 16 to 20",
              StaleIndexError),
    "shorter than the framing": (_lines(lambda s: [s[0], "16 3", "19 14", *s[2:]]), 2,
                                 "shorter than the 16 bytes", SidecarError),
    "last lines missing": (_lines(lambda s: s[:3]), 3, "records are missing", StaleIndexError),
    "no lines": (b"", 0, "has no lines", StaleIndexError),
    # spans that tile the file but are not its records
    "two records as one": (_lines(lambda s: ["0 33", *s[2:]]), 1,
                           "frames 16 bytes, not 33", StaleIndexError),
    "one record as two": (_lines(lambda s: [*s[:3], "59 100", "159 216", s[4]]), 4,
                          "frames 316 bytes, not 100", StaleIndexError),
}


def _check_message(message: str, text_url: str, line: int, words: str) -> None:
    assert "\n" not in message, message
    assert message.startswith(text_url), message
    assert words in message, message
    if line:
        assert f"line {line}" in message, message


@pytest.mark.parametrize("case", sorted(BAD))
def test_import_names_the_bad_line_on_the_command_line(case, tfrecord, tmp_path, capsys):
    text, line, words, _ = BAD[case]
    index = write_raw(str(tmp_path / "a.idx"), text)
    assert main(["import-index", tfrecord, index]) == 1
    out = capsys.readouterr()
    err = out.err.strip()
    assert err.startswith("ofindex: error: "), err
    _check_message(err.removeprefix("ofindex: error: "), index, line, words)
    assert f"`ofindex build {tfrecord}`" in err and "build_index(" not in err, err
    assert not os.path.exists(sidecar_of(tfrecord))  # nothing written


@pytest.mark.parametrize("case", sorted(BAD))
def test_import_names_the_bad_line_in_python(case, tfrecord):
    text, line, words, error = BAD[case]
    storage, path = storage_for(tfrecord)
    with pytest.raises(error) as caught:
        sidecar_from_text(storage, path, text, text_url="idx.txt")
    assert type(caught.value) is error
    _check_message(str(caught.value), "idx.txt", line, words)
    assert f"ofindex.build_index({tfrecord!r})" in str(caught.value), caught.value


def test_import_names_the_line_of_a_damaged_record(tfrecord, tmp_path, capsys):
    raw = bytearray(ref_tfrecord(RECORDS))
    raw[59 + 9] ^= 0xFF  # the length CRC of the fourth record
    write_raw(tfrecord, bytes(raw))
    index = write_raw(str(tmp_path / "a.idx"), _text(SPANS))
    assert main(["import-index", tfrecord, index]) == 1
    err = capsys.readouterr().err.strip()
    _check_message(err.removeprefix("ofindex: error: "), index, 4, "length CRC mismatch")
    assert "--format ofrecord" in err and "format='ofrecord'" not in err, err
    storage, path = storage_for(tfrecord)
    with pytest.raises(CorruptRecordError, match="format='ofrecord'") as caught:
        sidecar_from_text(storage, path, _text(SPANS), text_url=index)
    assert caught.value.offset == 59 and caught.value.record == 3


def test_the_issue_case_gives_one_line_and_no_traceback(tfrecord, tmp_path):
    # the real entry point, in a subprocess: exit code 1, one line, no traceback
    index = write_raw(str(tmp_path / "a.idx"), BAD["offset past int64"][0])
    exe = os.path.join(os.path.dirname(sys.executable), "ofindex")
    r = subprocess.run([exe, "import-index", tfrecord, index], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "OverflowError" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and f"{index}, line 2" in r.stderr, r.stderr


def test_parse_text_reads_plain_and_unusual_layouts_alike():
    plain = _text(SPANS)
    spaced = b"".join(b"  %d \t %d\r\n" % span for span in SPANS) + b"\n \n"
    for text in (plain, plain.rstrip(b"\n"), spaced, b"000 0016\n" + plain[5:]):
        offsets, lengths = parse_text(text, path="t")
        assert offsets.tolist() == [o for o, _ in SPANS]
        assert lengths.tolist() == [n for _, n in SPANS]
    assert parse_text(f"{2**63 - 1} 0\n".encode(), path="t")[0].tolist() == [2**63 - 1]
    assert parse_text(b"", path="t")[0].tolist() == []


# ---- fuzzing: a correct sidecar or an OfindexError, never another exception ------------------

NUMBERS = st.sampled_from([0, 1, 15, 16, 17, 33, 375, 397, 398, 399, 2**31, 2**32, 2**62,
                           2**63 - 1, 2**63, 2**64, 10**30]) | st.integers(-(10**20), 10**20)


@st.composite
def mutated_text(draw, text: bytes) -> bytes:
    """A text index with up to four edits: numbers changed, lines dropped, repeated or
    swapped, tokens added or removed, whitespace changed, bytes set, truncation."""
    lines = text.decode().splitlines()
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["number", "number", "drop", "repeat", "swap", "token",
                                    "space", "byte", "truncate"]))
        at = draw(st.integers(0, max(0, len(lines) - 1)))
        if not lines:
            lines = [""]
        fields = lines[at].split()
        if how == "number" and fields:
            fields[draw(st.integers(0, len(fields) - 1))] = str(draw(NUMBERS))
            lines[at] = " ".join(fields)
        elif how == "drop":
            del lines[at]
        elif how == "repeat":
            lines.insert(at, lines[at])
        elif how == "swap" and len(lines) > 1:
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif how == "token":
            lines[at] = draw(st.sampled_from([f"{lines[at]} 0", " ".join(fields[:1]),
                                              f"x{lines[at]}", f"{lines[at]}.5", ""]))
        elif how == "space":
            lines[at] = draw(st.sampled_from(["\t", "  ", " \r"])).join(fields)
        elif how == "byte":
            raw = bytearray(lines[at].encode())
            if raw:
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0x20, 0x7E))
            lines[at] = raw.decode()
        elif how == "truncate":
            lines = lines[:at]
    return "\n".join(lines).encode() + draw(st.sampled_from([b"\n", b"", b"\n\n"]))


FILES = {"tfrecord": (ref_tfrecord, 16), "ofrecord": (ref_ofrecord, 8)}


def _starts(overhead: int) -> tuple[list[int], int]:
    starts, pos = [], 0
    for record in RECORDS:
        starts.append(pos)
        pos += len(record) + overhead
    return starts, pos


def _good(overhead: int) -> bytes:
    starts, end = _starts(overhead)
    return b"".join(b"%d %d\n" % (s, e - s) for s, e in zip(starts, [*starts[1:], end],
                                                             strict=True))


TEXT_CASES = st.sampled_from(sorted(FILES)).flatmap(
    lambda kind: st.tuples(st.just(kind), mutated_text(_good(FILES[kind][1]))))


@settings(max_examples=500, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@example(case=("tfrecord", _lines(lambda s: [s[0], "99999999999999999999 17", *s[2:]])))
@given(case=TEXT_CASES)
def test_mutated_text_indexes_give_the_sidecar_or_an_ofindex_error(tmp_path_factory, case):
    TALLY.input()
    kind, text = case
    frame, overhead = FILES[kind]
    data = str(tmp_path_factory.getbasetemp() / f"textindex-fuzz.{kind}")
    if not os.path.exists(data):
        write_raw(data, frame(RECORDS))
    storage, path = storage_for(data)
    outcome, got = guarded(lambda: sidecar_from_text(storage, path, text, text_url="idx"),
                           64 * len(text) + (1 << 20), TALLY, kind)
    if outcome == "ok":  # taken only when it says what the correct index says
        assert got == sidecar_from_text(storage, path, _good(overhead), text_url="idx"), text
        assert parse_text(text, path="idx")[0].tolist() == _starts(overhead)[0], text
        return
    message = str(got)
    assert "\n" not in message and message.startswith("idx") and "line" in message, message


def test_import_checks_a_file_on_a_web_server(nginx_server, tmp_path, capsys):
    # a remote data file is streamed as the builder streams it; past damage, the records
    # before it are found again to name the line that points at the damage
    raw = ref_tfrecord(RECORDS)
    damaged = bytearray(raw)
    damaged[59 + 9] ^= 0xFF  # the length CRC of the fourth record
    write_raw(os.path.join(nginx_server.root, "textindex", "good.tfrecord"), raw)
    write_raw(os.path.join(nginx_server.root, "textindex", "bad.tfrecord"), bytes(damaged))
    index = write_raw(str(tmp_path / "a.idx"), _text(SPANS))
    url = f"{nginx_server.url}/textindex"
    assert main(["import-index", f"{url}/good.tfrecord", index, "--index-dir",
                 str(tmp_path / "idx")]) == 0
    with ofindex.open(f"{url}/good.tfrecord", index_dir=str(tmp_path / "idx")) as ds:
        assert ds[:] == RECORDS
    capsys.readouterr()
    assert main(["import-index", f"{url}/bad.tfrecord", index, "--index-dir",
                 str(tmp_path / "idx")]) == 1
    err = capsys.readouterr().err.strip()
    _check_message(err.removeprefix("ofindex: error: "), index, 4, "length CRC mismatch")
    two_as_one = write_raw(str(tmp_path / "b.idx"), BAD["two records as one"][0])
    assert main(["import-index", f"{url}/good.tfrecord", two_as_one, "--index-dir",
                 str(tmp_path / "idx")]) == 1
    err = capsys.readouterr().err.strip()
    _check_message(err.removeprefix("ofindex: error: "), two_as_one, 1, "frames 16 bytes")
