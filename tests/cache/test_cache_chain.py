"""The cache chain's one interface (ofindex/cache/chain.py): memory, then the machine (whose
entries are checked as fetched pieces are), then one fetch for the rest, kept in both."""

from __future__ import annotations

import pytest

from ofindex.cache.chain import PAGE_OVERHEAD, Chain, Kept, MemoryTier, Want


def _want(name: str, memory: bool = True, checked: list[str] | None = None) -> Want:
    def check(data: bytes) -> bytes | None:
        if checked is not None:
            checked.append(name)
        return data if data.startswith(b"ok") else None  # anything else: damaged

    return Want(name if memory else None, name.encode(), check)


def test_memory_then_machine_then_one_fetch(tmp_path):
    chain = Chain(1 << 20, str(tmp_path))
    assert chain.machine is not None
    chain.memory.put("a", b"ok-a", 4)
    chain.machine.put([(b"b", b"ok-b"), (b"c", b"tampered")])
    calls = []

    def fetch(missing: list[Want], kept: list[Kept]) -> None:
        calls.append([w.memory_key for w in missing])
        for want in missing:
            want.value = b"ok-fetched-" + want.machine_key
            kept.append(Kept(want.memory_key, want.machine_key, want.value, want.value))

    wants = [_want(name) for name in "abcd"]
    chain.read(wants, fetch)
    assert calls == [["c", "d"]]  # one fetch, for the damaged entry and the missing one
    assert [w.value for w in wants] == [b"ok-a", b"ok-b", b"ok-fetched-c", b"ok-fetched-d"]
    assert chain.memory.get("b") == b"ok-b"  # what the machine gave is held in memory too
    assert chain.machine.get([b"c", b"d"]) == {b"c": b"ok-fetched-c", b"d": b"ok-fetched-d"}
    again = [_want(name) for name in "abcd"]
    chain.read(again, lambda missing, kept: calls.append(missing))
    assert calls[-1] == [] and all(w.value for w in again)


def test_machine_entries_are_checked_in_the_order_asked(tmp_path):
    chain = Chain(1 << 20, str(tmp_path))
    assert chain.machine is not None
    chain.machine.put([(b"header", b"ok-h"), (b"page", b"ok-p")])
    checked: list[str] = []
    missing = chain.recall([_want("header", False, checked), _want("page", True, checked)])
    assert missing == [] and checked == ["header", "page"]


def test_what_a_failed_fetch_checked_is_kept(tmp_path):
    chain = Chain(1 << 20, str(tmp_path))

    def fetch(missing: list[Want], kept: list[Kept]) -> None:
        kept.append(Kept("x", b"x", b"ok-x", b"ok-x"))
        raise OSError("the second piece failed")

    with pytest.raises(OSError, match="second piece"):
        chain.read([_want("x"), _want("y")], fetch)
    assert chain.memory.get("x") == b"ok-x"
    assert chain.machine is not None and chain.machine.get([b"x"]) == {b"x": b"ok-x"}


def test_without_a_machine_the_chain_is_memory_and_fetch():
    chain = Chain(1 << 20)
    assert chain.machine is None and chain.data is None
    fetched = []
    chain.read([_want("a")], lambda missing, kept: fetched.extend(missing))
    assert [w.memory_key for w in fetched] == ["a"]


def test_pages_and_sidecars_share_one_bound_least_recently_used_first():
    memory = MemoryTier(3 * (8 + PAGE_OVERHEAD))
    released = []
    memory.put("sidecar", "held", 8 + PAGE_OVERHEAD, lambda: released.append("sidecar"))
    memory.put("page-1", b"1", 8 + PAGE_OVERHEAD)
    memory.put("page-2", b"2", 8 + PAGE_OVERHEAD)
    memory.touch("sidecar")  # used again: page-1 is now the oldest
    memory.put("page-3", b"3", 8 + PAGE_OVERHEAD)
    assert memory.get("page-1") is None and memory.get("sidecar") == "held"
    memory.put("page-4", b"4", 8 + PAGE_OVERHEAD)
    assert released == [] and memory.get("page-2") is None
    memory.put("big", b"x", 10 * PAGE_OVERHEAD)  # alone over the bound: kept, all else goes
    assert released == ["sidecar"] and len(memory) == 1 and memory.get("big") == b"x"



def test_a_sidecar_used_since_it_came_up_for_eviction_is_spared_once():
    """A whole sidecar is read without asking the tier (a plain store marks it used): when it
    comes up for eviction it is spared once if it was used since (second chance), and the
    tier still holds its bound and keeps the entry just put."""
    size = 8 + PAGE_OVERHEAD
    memory = MemoryTier(2 * size)
    released: list[str] = []
    marks = {"sidecar": True}

    def used() -> bool:
        was, marks["sidecar"] = marks["sidecar"], False
        return was

    memory.put("sidecar", "held", size, lambda: released.append("sidecar"), used)
    memory.put("page-1", b"1", size)
    memory.put("page-2", b"2", size)  # the sidecar comes up first, used: page-1 goes
    assert released == [] and memory.get("page-1") is None
    assert len(memory) == 2 and memory.held_bytes <= 2 * size
    memory.put("page-3", b"3", size)  # not used since: the sidecar goes now
    assert released == ["sidecar"] and memory.get("page-2") == b"2"
    alone = MemoryTier(size)  # room for one: a sidecar used every time is spared a
    alone.put("always", "held", size, lambda: released.append("always"), lambda: True)
    alone.put("page", b"p", size)  # bounded number of times, then goes
    assert released == ["sidecar", "always"] and len(alone) == 1 and alone.get("page") == b"p"

def test_a_chain_crosses_to_a_worker_with_an_empty_memory(tmp_path):
    import pickle

    chain = Chain(1 << 20, str(tmp_path), data_bytes=1 << 30)
    chain.memory.put("a", b"ok", 2)
    clone = pickle.loads(pickle.dumps(chain))
    assert len(clone.memory) == 0 and clone.max_bytes == 1 << 20
    assert clone.machine is not None and clone.machine.directory == str(tmp_path)
    assert clone.data is not None and clone.data.directory == str(tmp_path)
