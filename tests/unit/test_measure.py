"""acceptance.measure: nearest-rank percentiles, timing loops, sweeps, units."""
import gc
import itertools
import math
import time

import numpy as np
import pytest

from acceptance.engines.collective_data import busbw
from acceptance.measure import (
    PERCENTILES,
    Sweep,
    gbit_per_s,
    gbyte_per_s,
    nearest_rank,
    percentiles,
    samples_needed,
    sizes,
    sweep_from_profile,
    timed,
    timed_total,
    us,
)
from acceptance.rules.profile import load_profile


@pytest.fixture
def gc_state():
    """Restore the interpreter's GC state whatever a test does to it."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


# --- stats -------------------------------------------------------------------

ONE_TO_100 = np.arange(1, 101)


@pytest.mark.parametrize("p, expected", [(50, 50), (99, 99), (99.9, 100), (0, 1), (100, 100),
                                         (1, 1), (1.5, 2), (90, 90), (50.5, 51)])
def test_nearest_rank_1_to_100(p, expected):
    assert nearest_rank(ONE_TO_100, p) == expected


def test_nearest_rank_single_value_and_unsorted():
    assert nearest_rank([7.5], 0) == 7.5
    assert nearest_rank([7.5], 99.9) == 7.5
    shuffled = np.random.default_rng(1).permutation(ONE_TO_100)
    assert nearest_rank(shuffled, 50) == 50
    assert nearest_rank([3, 1, 2], 50) == 2  # ceil(1.5) - 1 = index 1
    assert nearest_rank([3, 1, 2], 34) == 2  # ceil(1.02) - 1 = index 1
    assert nearest_rank([3, 1, 2], 33) == 1


def test_nearest_rank_float_boundaries():
    # n*p/100 is an exact integer but not in floats: 41000*99.9/100 = 40959.00000000001,
    # whose naive ceil would pick the next rank.
    assert 41000 * 99.9 / 100 > 40959
    assert nearest_rank(np.arange(41000), 99.9) == 40958
    assert nearest_rank(np.arange(1000), 99.9) == 998
    assert nearest_rank(np.arange(100000), 99.9) == 99899


def test_nearest_rank_matches_formula_on_random_arrays():
    rng = np.random.default_rng(20260709)
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        values = rng.lognormal(size=n)
        p = float(rng.choice([0, 0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99, 100,
                              round(float(rng.uniform(0, 100)), 3)]))
        index = min(n - 1, max(0, math.ceil(n * p / 100 - 1e-9) - 1))
        assert nearest_rank(values, p) == np.sort(values)[index], (n, p)


def test_nearest_rank_errors():
    with pytest.raises(ValueError, match="at least one"):
        nearest_rank([], 50)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        nearest_rank([1, 2], 101)
    with pytest.raises(ValueError):
        nearest_rank([1, 2], -1)


def test_samples_needed_exact():
    assert samples_needed(50) == 200
    assert samples_needed(99) == 10000
    assert samples_needed(99.9) == 100000
    assert samples_needed(99.99) == 1000000
    assert samples_needed(0) == 100
    assert [samples_needed(p) for _, p in PERCENTILES] == [200, 10000, 100000]
    assert all(type(samples_needed(p)) is int for _, p in PERCENTILES)
    with pytest.raises(ValueError):
        samples_needed(100)


def test_percentiles_fields():
    values = np.random.default_rng(3).permutation(ONE_TO_100).astype(np.int64)
    r = percentiles(values)
    assert (r.samples, r.min, r.mean, r.p50, r.p99, r.p999, r.max) == (100, 1.0, 50.5, 50.0, 99.0, 100.0, 100.0)
    assert all(type(getattr(r, f)) is float for f in ("min", "mean", "p50", "p99", "p999", "max"))
    assert type(r.samples) is int
    # Same unit in, same unit out; values agree with nearest_rank.
    x = np.random.default_rng(4).exponential(2.0, size=12345)
    r = percentiles(x)
    assert (r.p50, r.p99, r.p999) == tuple(nearest_rank(x, p) for _, p in PERCENTILES)
    assert r.min == x.min() and r.max == x.max() and r.mean == pytest.approx(x.mean())
    with pytest.raises(ValueError):
        percentiles(np.array([]))


@pytest.mark.parametrize("n, missing", [
    (100000, []), (99999, ["p999"]), (10000, ["p999"]), (9999, ["p99", "p999"]),
    (1000, ["p99", "p999"]), (200, ["p99", "p999"]), (199, ["p50", "p99", "p999"]), (1, ["p50", "p99", "p999"]),
])
def test_insufficient(n, missing):
    r = percentiles(np.ones(n))
    assert r.insufficient() == missing
    for name, _ in PERCENTILES:
        assert (r.note(name) is None) == (name not in missing)


def test_note_text():
    r = percentiles(np.arange(1000))
    assert r.note("p99") == "1000 samples, fewer than the 10000 a p99 needs: read it as a lower bound"
    assert "1000 samples" in r.note("p999") and "100000" in r.note("p999")
    assert r.note("p50") is None
    with pytest.raises(KeyError):
        r.note("p75")


# --- timing ------------------------------------------------------------------

class Counter:
    def __init__(self):
        self.calls = 0
        self.gc_seen = set()

    def __call__(self):
        self.calls += 1
        self.gc_seen.add(gc.isenabled())


def test_timed_basic():
    op = Counter()
    t = timed(op, iters=50, warmup=7)
    assert t.dtype == np.int64 and t.shape == (50,)
    assert (t > 0).all()
    assert op.calls == 57
    assert op.gc_seen == {False}


def test_timed_zero_warmup_and_iters():
    op = Counter()
    assert timed(op, iters=3).shape == (3,) and op.calls == 3
    assert timed(op, iters=0).shape == (0,) and op.calls == 3


@pytest.mark.parametrize("initially", [True, False])
def test_timed_restores_gc(gc_state, initially):
    (gc.enable if initially else gc.disable)()
    timed(Counter(), 5, warmup=2)
    assert gc.isenabled() is initially
    timed_total(Counter(), 5, warmup=2)
    assert gc.isenabled() is initially


@pytest.mark.parametrize("initially", [True, False])
@pytest.mark.parametrize("fn", [timed, timed_total])
def test_gc_restored_after_exception(gc_state, initially, fn):
    (gc.enable if initially else gc.disable)()
    calls = []

    def op():
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fn(op, 10, warmup=2)
    assert gc.isenabled() is initially


def test_timed_sleep_measures_at_least_the_sleep():
    t = timed(lambda: time.sleep(0.001), iters=5, warmup=1)
    assert (t >= 1_000_000).all()
    assert t.max() < 1_000_000_000


def test_timed_reuses_out_buffer():
    out = np.zeros(100, dtype=np.int64)
    t = timed(Counter(), iters=40, out=out)
    assert np.shares_memory(t, out)
    assert t.shape == (40,)
    assert (out[:40] > 0).all() and (out[40:] == 0).all()
    t2 = timed(Counter(), iters=100, out=out)
    assert np.shares_memory(t2, out) and (out > 0).all()


@pytest.mark.parametrize("out", [np.zeros(5, dtype=np.int64), np.zeros(10, dtype=np.float64),
                                 np.zeros((10, 2), dtype=np.int64)])
def test_timed_rejects_bad_out(out):
    op = Counter()
    with pytest.raises(ValueError, match="int64"):
        timed(op, iters=10, out=out)
    assert op.calls == 0


def test_timed_total():
    op = Counter()
    total = timed_total(op, iters=20, warmup=3)
    assert type(total) is int and total > 0
    assert op.calls == 23 and op.gc_seen == {False}
    assert timed_total(lambda: time.sleep(0.001), iters=5) >= 5_000_000


def test_timing_rejects_negative_counts():
    for fn in (timed, timed_total):
        with pytest.raises(ValueError):
            fn(Counter(), -1)
        with pytest.raises(ValueError):
            fn(Counter(), 1, warmup=-1)


# --- sweep -------------------------------------------------------------------

def test_sizes():
    s = sizes(8, 64 * 2**20, 2)
    assert len(s) == 24 and s[0] == 8 and s[-1] == 64 * 2**20
    assert all(b == 2 * a for a, b in itertools.pairwise(s))
    assert sizes(4096, 256 * 2**20, 4) == [4096 * 4**k for k in range(9)]
    assert sizes(5, 5, 2) == [5]
    assert sizes(3, 20, 3) == [3, 9]  # stops below max when the factor overshoots


@pytest.mark.parametrize("args, word", [((0, 64, 2), "min_size"), ((8, 64, 1), "factor"),
                                        ((128, 64, 2), "max_size")])
def test_sizes_errors(args, word):
    with pytest.raises(ValueError, match=word):
        sizes(*args)


SWEEP = Sweep(sizes=(8, 1024), bytes_per_size=2**30, min_iters=5, max_iters=1000, warmup_fraction=0.1)


def test_sweep_iters_clamps():
    assert SWEEP.iters(8) == 1000                        # 2**27 would be far too many
    assert SWEEP.iters(2**30) == 5                       # 1 would be too few
    assert SWEEP.iters(2**22) == 256                     # in between: bytes_per_size // size
    assert SWEEP.iters(2**20, per_iter_bytes=2**20 * 64) == 16
    assert SWEEP.iters(2**20, per_iter_bytes=None) == 1000
    assert SWEEP.iters(0) == 1000                         # no division by zero


def test_sweep_warmup():
    assert SWEEP.warmup(1000) == 100
    assert SWEEP.warmup(5) == 1
    assert SWEEP.warmup(0) == 1
    assert SWEEP.warmup(11) == 2                         # ceil
    s = Sweep(sizes=(8,), bytes_per_size=1, min_iters=1, max_iters=1, warmup_fraction=0.07)
    assert 100 * 0.07 > 7
    assert s.warmup(100) == 7                            # not 8 from 7.000000000000001
    assert Sweep(sizes=(8,), bytes_per_size=1, min_iters=1, max_iters=1, warmup_fraction=0).warmup(100) == 1


def test_sweep_rejects_min_iters_above_max():
    with pytest.raises(ValueError, match="min_iters"):
        Sweep(sizes=(8,), bytes_per_size=1, min_iters=10, max_iters=5, warmup_fraction=0.1)


def test_sweep_from_local_profile():
    profile = load_profile("local")
    s = sweep_from_profile(profile)
    g = lambda key: profile.get(f"sweep.{key}")
    assert s.sizes == tuple(sizes(g("min_size"), g("max_size"), g("factor")))
    assert s.sizes[0] == g("min_size") and s.sizes[-1] <= g("max_size")
    assert (s.bytes_per_size, s.min_iters, s.max_iters, s.warmup_fraction) == (
        g("bytes_per_size"), g("min_iters"), g("max_iters"), g("warmup_fraction"))


def write_profile(tmp_path, sweep_table):
    path = tmp_path / "p.toml"
    path.write_text("[sweep]\n" + sweep_table, encoding="utf-8")
    return load_profile(path)


def test_sweep_from_profile_names_keys(tmp_path):
    profile = write_profile(tmp_path, 'min_size = "1MiB"\nmax_size = "64KiB"\n')
    with pytest.raises(ValueError) as e:
        sweep_from_profile(profile)
    assert "sweep.min_size" in str(e.value) and "sweep.max_size" in str(e.value)
    assert str(tmp_path / "p.toml") in str(e.value)


def test_sweep_from_profile_min_size_zero(tmp_path):
    with pytest.raises(ValueError, match="sweep.min_size"):
        sweep_from_profile(write_profile(tmp_path, 'min_size = "0B"\n'))


def test_sweep_from_profile_iters_names_keys(tmp_path):
    with pytest.raises(ValueError) as e:
        sweep_from_profile(write_profile(tmp_path, "min_iters = 50\nmax_iters = 10\n"))
    assert "sweep.min_iters" in str(e.value) and "sweep.max_iters" in str(e.value)


def test_sweep_from_profile_values(tmp_path):
    s = sweep_from_profile(write_profile(tmp_path, 'min_size = "1KiB"\nmax_size = "1MiB"\nfactor = 4\n'
                                                   'bytes_per_size = "256MiB"\nmin_iters = 2\n'
                                                   'max_iters = 50\nwarmup_fraction = 0.25\n'))
    assert s == Sweep(sizes=(1024, 4096, 16384, 65536, 262144, 1048576), bytes_per_size=256 * 2**20,
                      min_iters=2, max_iters=50, warmup_fraction=0.25)


# --- units -------------------------------------------------------------------

def test_rates():
    assert gbit_per_s(1e9, 1e9) == 8.0
    assert gbyte_per_s(1e9, 1e9) == 1.0
    assert gbit_per_s(50e9, 1e9) == 400.0                # NDR line rate = 50 GB/s
    assert gbyte_per_s(64 * 2**20, 1_000_000) == pytest.approx(67.108864)


def test_busbw():
    assert busbw("allreduce", 1.0, 8) == 1.75
    assert busbw("alltoall", 1.0, 8) == 0.875
    assert busbw("allreduce", 10.0, 1) == 0
    assert busbw("alltoall", 10.0, 1) == 0


def test_busbw_errors():
    with pytest.raises(ValueError) as e:
        busbw("all_reduce_typo", 1.0, 8)
    assert "known: allreduce, alltoall" in str(e.value)
    with pytest.raises(ValueError):
        busbw("allreduce", 1.0, 0)


def test_us():
    assert us(1500) == 1.5
    assert np.array_equal(us(np.array([1000, 2500], dtype=np.int64)), np.array([1.0, 2.5]))


def test_driver_imports_stay_light():
    import subprocess
    import sys
    code = ("import sys, acceptance.measure; "
            "bad = [m for m in ('pytest', 'mpi4py') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_timed_capped_stops_at_the_budget_after_min_iters():
    import time as _time
    from acceptance.measure import timed_capped
    calls = []

    def op():
        calls.append(1)
        _time.sleep(0.01)
    t = timed_capped(op, iters=1000, warmup=2, budget_ns=50_000_000, min_iters=2)
    assert 4 <= len(t) <= 7 and len(calls) == len(t) + 2
    assert t.sum() >= 50_000_000
    # min_iters wins over a budget already spent by the first iteration
    assert len(timed_capped(op, iters=10, warmup=0, budget_ns=1, min_iters=3)) == 3
    # a budget never reached runs every iteration
    assert len(timed_capped(lambda: None, iters=5, warmup=0, budget_ns=10**12)) == 5
