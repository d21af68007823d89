
import numpy as np
import pytest

from acceptance.engines.memory import (
    FLIP_ENV,
    MemoryUnavailable,
    Mismatch,
    allocate,
    array_module,
    corrupt_for_test,
    expected,
    fill_pattern,
    flip_bit,
    verify,
)

MiB = 1 << 20


@pytest.mark.parametrize("nbytes", [0, 1, 7, 9, 4095, 4096, 4097, 65536 + 3, MiB])
def test_allocate_is_page_aligned_uint8(nbytes):
    buf = allocate(nbytes)
    assert buf.dtype == np.uint8
    assert buf.ndim == 1 and len(buf) == nbytes
    assert buf.flags.c_contiguous
    assert buf.ctypes.data % 4096 == 0


def test_allocate_rejects_negative():
    with pytest.raises(ValueError):
        allocate(-1)


@pytest.mark.parametrize("nbytes", [1, 7, 8, 9, 4096, MiB])
def test_fill_verify_round_trip(nbytes):
    buf = allocate(nbytes)
    fill_pattern(buf, 3, 5, 2)
    assert verify(buf, 3, 5, 2) is None
    assert np.array_equal(buf, expected(nbytes, 3, 5, 2))


def test_verify_empty_buffer():
    buf = allocate(0)
    fill_pattern(buf, 0, 1, 0)
    assert verify(buf, 0, 1, 0) is None


def test_different_seeds_give_unrelated_bytes():
    n = 64 * 1024
    base = expected(n, 0, 1, 0)
    for other in (expected(n, 1, 0, 0), expected(n, 0, 1, 1)):
        # Compare at every small shift too: a shifted copy of the same stream would slip through.
        for shift in range(17):
            same = np.count_nonzero(base[shift:] == other[: n - shift])
            assert same < n // 64  # random bytes agree ~1/256 of the time
    assert verify(expected(n, 1, 0, 0), 0, 1, 0) is not None


def test_prefix_of_larger_pattern_is_pattern():
    # Buffers of different sizes with one seed agree on their common bytes.
    assert np.array_equal(expected(9, 2, 3, 4), expected(4096, 2, 3, 4)[:9])


def test_shift_by_one_byte_is_detected():
    n = 4096
    buf = allocate(n)
    buf[1:] = expected(n, 0, 1, 0)[:-1]
    buf[0] = expected(n, 0, 1, 0)[0]
    m = verify(buf, 0, 1, 0)
    assert m is not None
    assert m.wrong_bytes > n // 2


@pytest.mark.parametrize("offset,bit", [(0, 0), (4096, 3), (65535, 7)])
def test_flip_bit_is_located_exactly(offset, bit):
    n = 65536
    buf = allocate(n)
    fill_pattern(buf, 1, 2, 3)
    flip_bit(buf, offset, bit)
    m = verify(buf, 1, 2, 3)
    assert m == Mismatch(
        offset=offset,
        expected=int(expected(n, 1, 2, 3)[offset]),
        got=int(buf[offset]),
        wrong_bytes=1,
        nbytes=n,
    )
    assert m.expected ^ m.got == 1 << bit


def test_two_flips_report_lower_offset_and_count():
    buf = allocate(8192)
    fill_pattern(buf, 0, 1, 0)
    flip_bit(buf, 5000)
    flip_bit(buf, 123, 6)
    m = verify(buf, 0, 1, 0)
    assert m.offset == 123
    assert m.wrong_bytes == 2
    assert m.expected ^ m.got == 1 << 6


def test_flip_bit_rejects_bad_arguments():
    buf = allocate(16)
    with pytest.raises(ValueError):
        flip_bit(buf, 0, 8)
    with pytest.raises(IndexError):
        flip_bit(buf, 16)


def test_mismatch_str():
    m = Mismatch(offset=4096, expected=0x3A, got=0x3B, wrong_bytes=1, nbytes=65536)
    assert (
        str(m)
        == "first wrong byte at offset 4096 of 65536: expected 0x3a, got 0x3b (1 wrong byte)"
    )
    m2 = Mismatch(offset=0, expected=0x00, got=0xFF, wrong_bytes=3, nbytes=8)
    assert (
        str(m2)
        == "first wrong byte at offset 0 of 8: expected 0x00, got 0xff (3 wrong bytes)"
    )


@pytest.fixture
def filled():
    buf = allocate(4096)
    fill_pattern(buf, 0, 1, 0)
    return buf


def test_corrupt_for_test_unset_does_nothing(monkeypatch, filled):
    monkeypatch.delenv(FLIP_ENV, raising=False)
    assert corrupt_for_test(filled) is False
    assert verify(filled, 0, 1, 0) is None


def test_corrupt_for_test_offset_only_flips_bit_0(monkeypatch, filled):
    monkeypatch.setenv(FLIP_ENV, "100")
    assert corrupt_for_test(filled) is True
    m = verify(filled, 0, 1, 0)
    assert (m.offset, m.wrong_bytes, m.expected ^ m.got) == (100, 1, 1)


def test_corrupt_for_test_offset_and_bit(monkeypatch, filled):
    monkeypatch.setenv(FLIP_ENV, "100:7")
    assert corrupt_for_test(filled) is True
    m = verify(filled, 0, 1, 0)
    assert (m.offset, m.wrong_bytes, m.expected ^ m.got) == (100, 1, 0x80)


def test_corrupt_for_test_offset_beyond_buffer(monkeypatch, filled):
    monkeypatch.setenv(FLIP_ENV, "4096")
    assert corrupt_for_test(filled) is False
    assert verify(filled, 0, 1, 0) is None


@pytest.mark.parametrize("value", ["x", "100:", "100:8", "-1", "1:2:3"])
def test_corrupt_for_test_malformed(monkeypatch, filled, value):
    monkeypatch.setenv(FLIP_ENV, value)
    with pytest.raises(ValueError, match=FLIP_ENV):
        corrupt_for_test(filled)
    assert verify(filled, 0, 1, 0) is None


def test_array_module():
    assert array_module("host") is np
    with pytest.raises(MemoryUnavailable, match="cupy"):
        array_module("cuda")
    with pytest.raises(ValueError, match="tape"):
        array_module("tape")


def test_allocate_cuda_unavailable_here():
    with pytest.raises(MemoryUnavailable):
        allocate(16, "cuda")


def test_fill_pattern_64_mib_verifies():
    # Speed is benchmarks' business (gpu_check.py times the fill); this holds the pattern at size.
    buf = allocate(64 * MiB)
    fill_pattern(buf, 0, 1, 0)
    fill_pattern(buf, 7, 8, 9)
    assert verify(buf, 7, 8, 9) is None
