"""preflight helpers: pure comparisons plus this machine's real facts."""
import platform
import resource

import mpi4py
import pytest

import acceptance
from acceptance.rules import judge
from acceptance.host.preflight import UNLIMITED, layout_problems, memlock_limit, odd_ones_out, software_versions
from acceptance.rules.profile import load_profile


@pytest.mark.parametrize("limit, minimum, ok", [
    (UNLIMITED, "unlimited", True),
    (UNLIMITED, "1GiB", True),
    (1 << 40, "unlimited", False),
    (65536, "64KiB", True),
    (65536, "65537B", False),
    (8 << 20, "64KiB", True),
    (0, "0B", True),
])
def test_memlock_is_judged_by_the_one_judge(tmp_path, limit, minimum, ok):
    """The suite records memlock through acceptance.rules.judge: a limit at or above the minimum passes,
    "unlimited" (recorded as null) passes anything, and nothing but "unlimited" meets "unlimited"."""
    path = tmp_path / "p.toml"
    path.write_text(f'extends = "local"\n[preflight]\nmemlock_min = "{minimum}"\n')
    got = []
    value = None if limit == UNLIMITED else limit
    _, verdict = judge.record(lambda *a, **kw: got.append((a, kw)), load_profile(str(path)), "preflight",
                              "memlock", value)
    assert (verdict == "pass") is ok and got[0][1]["verdict"] == verdict


def test_odd_ones_out_names_the_odd_node():
    got = odd_ones_out({
        "node1": {"python": "3.11.4", "mpi": "x"},
        "node2": {"python": "3.11.4", "mpi": "x"},
        "node3": {"python": "3.10.0", "mpi": "x"},
    })
    assert got == ["node3: python '3.10.0' differs from '3.11.4' on 2 of 3 nodes"]


def test_odd_ones_out_all_agree():
    same = {"python": "3.11", "pytest": "8.0"}
    assert odd_ones_out({"a": dict(same), "b": dict(same), "c": dict(same)}) == []
    assert odd_ones_out({}) == []


def test_odd_ones_out_missing_key():
    got = odd_ones_out({
        "node1": {"python": "3.11", "pytest": "8.0"},
        "node2": {"python": "3.11", "pytest": "8.0"},
        "node3": {"python": "3.11"},
    })
    assert got == ["node3: pytest None differs from '8.0' on 2 of 3 nodes"]


def test_odd_ones_out_several_keys_sorted():
    got = odd_ones_out({
        "n1": {"b": "1", "a": "1"},
        "n2": {"b": "1", "a": "1"},
        "n3": {"b": "2", "a": "2"},
    })
    assert got == ["n3: a '2' differs from '1' on 2 of 3 nodes",
                   "n3: b '2' differs from '1' on 2 of 3 nodes"]


def test_layout_even_ok():
    ranks = {"n1": [0, 1], "n2": [2, 3]}
    rails = {"n1": [0, 1], "n2": [1, 0]}
    assert layout_problems(ranks, rails, 2) == []
    assert layout_problems(ranks, rails, 0) == []


def test_layout_uneven_ranks():
    ranks = {"n1": [0, 1], "n2": [2, 3], "n3": [4]}
    rails = {"n1": [0, 1], "n2": [0, 1], "n3": [0]}
    got = layout_problems(ranks, rails, 0)
    assert got == ["n3: 1 ranks, but 2 on the other 2 of 3 nodes"]


def test_layout_missing_rail():
    ranks = {"n1": [0, 1], "n2": [2, 3]}
    rails = {"n1": [0, 1], "n2": [0, 0]}
    got = layout_problems(ranks, rails, 2)
    assert got == ["n2: rails [0], expected [0, 1]",
                   "n2: more than one rank on rail(s) [0]"]


def test_layout_duplicate_rail_with_all_present():
    ranks = {"n1": [0, 1, 2]}
    rails = {"n1": [0, 1, 1]}
    got = layout_problems(ranks, rails, 2)
    assert got == ["n1: more than one rank on rail(s) [1]"]


def test_layout_expected_rails_zero_means_one_per_rank():
    ranks = {"n1": [0, 1, 2, 3]}
    assert layout_problems(ranks, {"n1": [0, 1, 2, 3]}, 0) == []
    assert layout_problems(ranks, {"n1": [0, 1, 0, 1]}, 0) == [
        "n1: rails [0, 1], expected [0, 1, 2, 3]",
        "n1: more than one rank on rail(s) [0, 1]",
    ]
    # With an explicit rail count of 2 the same layout only has duplicates.
    assert layout_problems(ranks, {"n1": [0, 1, 0, 1]}, 2) == [
        "n1: more than one rank on rail(s) [0, 1]",
    ]


def test_software_versions():
    v = software_versions()
    assert set(v) == {"python", "mpi4py", "mpi_library", "pytest", "acceptance"}
    assert v["python"] == platform.python_version()
    assert v["mpi4py"] == mpi4py.__version__
    assert v["pytest"] == pytest.__version__
    assert v["acceptance"] == acceptance.__version__
    assert v["mpi_library"] and "\n" not in v["mpi_library"]
    assert v["mpi_library"] == v["mpi_library"].strip()


def test_memlock_limit():
    got = memlock_limit()
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert got == (UNLIMITED if soft == resource.RLIM_INFINITY else soft)
    assert got == UNLIMITED or (type(got) is int and got >= 0)
    assert judge.one("preflight", "memlock", None if got == UNLIMITED else got, load_profile("local"))[1] in (
        "pass", "fail")
