"""Profiles: unit parsing, loading, validation errors, extends, show/round trip."""
import json
import pickle

import numpy as np
import pytest

from acceptance.rules.judge import size_bound
from acceptance.rules.profile import ProfileError, builtin_dir, builtin_names, format_profile, format_profile_list, load_profile
from acceptance.rules.units import format_duration, format_size, parse_duration, parse_rate, parse_size
from acceptance.rules.schema import SCHEMA

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- units -------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("8MiB", 8 * 2**20), ("4KiB", 4096), ("1GiB", 2**30), ("1TiB", 2**40),
    ("1GB", 10**9), ("2kB", 2000), ("2KB", 2000), ("3MB", 3 * 10**6), ("1TB", 10**12),
    ("512B", 512), ("64", 64), (64, 64), (" 8 MiB ", 8 * 2**20), ("1.5GiB", 3 * 2**29), ("0", 0),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, message", [
    ("8mib", "did you mean 'MiB'"), ("8Mb", "unknown size unit 'Mb'"), ("8 MiBs", "unknown size unit"),
    ("abc", "not a size"), ("", "not a size"), ("1.3KiB", "not a whole number of bytes"),
    (True, "expected a size"), (None, "expected a size"),
])
def test_parse_size_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_size(text)


@pytest.mark.parametrize("text, expected", [
    ("400Gbit/s", 400.0), ("48GB/s", 384.0), ("200Mbit/s", 0.2), ("25Gb/s", 25.0),
    ("100 Gbps", 100.0), ("100Gbps", 100.0), ("12.5GB/s", 100.0), ("1Tbit/s", 1000.0),
    ("800MB/s", 6.4), ("1GiB/s", 8.589934592), ("0Gbit/s", 0.0),
])
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text, message", [
    ("400", "has no unit"), ("400Gbit", "unknown rate unit 'Gbit'"),
    ("400gbit/s", "did you mean 'Gbit/s'"), ("fast", "not a rate"), (400, "has no unit"),
])
def test_parse_rate_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_rate(text)


@pytest.mark.parametrize("text, expected", [
    ("5us", 5e-6), ("5µs", 5e-6), ("1.5ms", 1.5e-3), ("0.1ms", 1e-4), ("100ns", 1e-7),
    ("300s", 300.0), ("5min", 300.0), ("2h", 7200.0), ("120", 120.0), (120, 120.0), (0.5, 0.5),
])
def test_parse_duration(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text, message", [
    ("5 minutes", "unknown duration unit 'minutes'"), ("5sec", "unknown duration unit"),
    ("soon", "not a duration"), (False, "expected a duration"), ("inf", "not a duration"),
])
def test_parse_duration_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


@pytest.mark.parametrize("n, text", [
    (0, "0B"), (512, "512B"), (1000, "1kB"), (4096, "4KiB"), (8 * 2**20, "8MiB"),
    (10**9, "1GB"), (3 * 2**29, "1536MiB"), (12345, "12345B"),
])
def test_format_size_round_trips(n, text):
    assert format_size(n) == text
    assert parse_size(text) == n


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (5e-6, "5us"), (1.5e-3, "1.5ms"), (1e-7, "100ns"), (1e-4, "100us"), (0.3, "300ms"),
    (1, "1s"), (59.5, "59.5s"), (60, "1min"), (90, "90s"), (120, "2min"), (7200, "2h"),
])
def test_format_duration_round_trips(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


# --- built-in profiles -------------------------------------------------------

def test_default_is_local():
    p = load_profile()
    assert p.name == "local"
    assert p.source == str(builtin_dir() / "local.toml")
    assert "laptop or CI" in p.description
    assert p.get("run.hang_timeout") == 60.0
    assert p.get("preflight.memlock_min") == 8 * 2**20
    assert p.get("topology.nic_rails") == {}
    assert load_profile("local") == p
    assert load_profile(builtin_dir() / "local.toml") == p


def test_get_unknown_key():
    with pytest.raises(KeyError):
        load_profile().get("run.no_such_key")


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_validates(name):
    p = load_profile(name)
    assert p.description
    assert {s: set(keys) for s, keys in p.values.items()} == {s: set(f) for s, f in SCHEMA.items()}


def test_builtins_include_local():
    assert "local" in builtin_names()


def test_empty_file_gets_defaults(tmp_path):
    p = load_profile(write(tmp_path, "empty.toml", ""))
    assert p.name == "empty" and p.description == ""
    assert set(p.values) == set(SCHEMA)
    assert {k: p.values[k] for k in ("run", "topology", "preflight", "latency")} == {
        "run": {"engine": "auto", "engines": {}, "hang_timeout": 120.0, "nodes": 2, "ranks_per_node": 2,
                "rail_mode": "concurrent", "budget": None, "budget_margin": 0.1,
                "attempts": 2, "lost_max": 0.2},
        "topology": {"rails": 0, "nic_rails": {}, "switches": None, "routes": None},
        "preflight": {"memlock_min": 64 * 2**20, "same_versions": True, "rdma_devices": None, "port_rate": None,
                      "mtu": None, "link_layer": None, "hugepages_min": 0, "gpus_per_node": None,
                      "gpu_nic_max_distance": "PXB", "gpudirect": True, "lossless": False},
        "latency": {"size": 8, "iters": 10000, "warmup": 100},
    }
    assert p.values["rdma_write"]["latency_p99_max"] is None  # optional bound: not set
    assert p.values["collectives"]["allreduce_busbw_min"] == []
    assert p.values["counters"] == {"enabled": True, "errors_max": 0, "discards_max": 0, "pause_rate_max": None,
                                    "cnp_rate_max": None, "retransmit_ppm_max": 0.0,
                                        "pre_fec_ber_max": 2.4e-4, "pre_fec_ber_warn": 1e-5}
    assert p.values["incast"]["senders"] == 4 and p.values["incast"]["fairness_min"] is None


def test_size_map_bounds(tmp_path):
    p = load_profile(write(tmp_path, "m.toml", '[rdma_write]\nbandwidth_min = { "1MiB" = "10Gbit/s", "8B" = "1Mbit/s" }\n'))
    m = p.get("rdma_write.bandwidth_min")
    assert m == [[8, 0.001], [2**20, 10.0]]
    got = size_bound(m, np.array([4, 8, 2**20 - 1, 64 * 2**20], dtype=float))
    assert np.isnan(got[0]) and list(got[1:]) == [0.001, 0.001, 10.0]


def test_size_map_errors_name_the_entry(tmp_path):
    with pytest.raises(ProfileError) as info:
        load_profile(write(tmp_path, "m.toml", '[rdma_write]\nbandwidth_min = { "1MB" = "fast" }\n'))
    assert info.value.key == "rdma_write.bandwidth_min" and info.value.reason.startswith("1MB:")
    with pytest.raises(ProfileError) as info:
        load_profile(write(tmp_path, "n.toml", '[memreg]\nreg_time_max = { "huge" = "1ms" }\n'))
    assert info.value.key == "memreg.reg_time_max" and "'huge'" in info.value.reason


def test_existing_path_without_toml_suffix(tmp_path):
    path = write(tmp_path, "mycluster", 'name = "cluster-a"\n[run]\nhang_timeout = "5min"\n')
    p = load_profile(str(path))
    assert p.name == "cluster-a"
    assert p.get("run.hang_timeout") == 300.0


def test_to_json_is_serializable():
    data = json.loads(json.dumps(load_profile().to_json()))
    assert set(data) == {"name", "source", "description", "values"}
    assert data["values"]["run"]["hang_timeout"] == 60.0


# --- errors ------------------------------------------------------------------

@pytest.mark.parametrize("text, key, reason", [
    ("[run\nengine = ", "", ["invalid TOML"]),
    ('[run]\nhang_timout = "5s"\n', "run.hang_timout",
     ["unknown key (known keys in [run]: engine, engines, hang_timeout,", "did you mean 'hang_timeout'?"]),
    ('[rnu]\nengine = "mpi"\n', "rnu", ["unknown section", "did you mean 'run'?"]),
    ('hang_timeout = "5s"\n', "hang_timeout", ["unknown key", "put it under [run]"]),
    ("run = 5\n", "run", ["expected a table [run], got 5"]),
    ("[run]\nhang_timeout = true\n", "run.hang_timeout",
     ['expected a duration with its unit, like "120s" or "5us", got true']),
    ("[run]\nnodes = true\n", "run.nodes", ["expected an integer, got true"]),
    ("[run]\nnodes = 2.5\n", "run.nodes", ["expected an integer, got 2.5"]),
    ('[run]\nengine = "ncc"\n', "run.engine", ["must be one of auto, mpi, verbs, nccl", "did you mean 'nccl'?"]),
    ('[preflight]\nmemlock_min = "8Mb"\n', "preflight.memlock_min", ["unknown size unit 'Mb'", "MiB"]),
    ('[preflight]\nmemlock_min = "limitless"\n', "preflight.memlock_min", ["not a size"]),
    ("[preflight]\nmemlock_min = [1]\n", "preflight.memlock_min", ['or "unlimited", got an array']),
    ('[preflight]\nsame_versions = "yes"\n', "preflight.same_versions", ['expected true or false, got "yes"']),
    ("[run]\nhang_timeout = -5\n", "run.hang_timeout", ["-5 has no unit: write a duration like '120s'"]),
    ("[run]\nhang_timeout = 0\n", "run.hang_timeout", ["0 has no unit"]),
    ('[run]\nhang_timeout = "0s"\n', "run.hang_timeout", ['must be more than 0, got "0s"']),
    ("[rdma_write]\nlatency_p50_max = 5\n", "rdma_write.latency_p50_max",
     ["5 has no unit: write a duration like '120s' (units: ns, us, ms, s, min, h)"]),
    ("[memreg]\nleak_size = 4194304\n", "memreg.leak_size", ["4194304 has no unit: write a size like '8MiB'"]),
    ('[rdma_write]\nbandwidth_min = { "8" = "1Gbit/s" }\n', "rdma_write.bandwidth_min", ['"8" has no unit']),
    ('[run]\nhang_timeout = "-5s"\n', "run.hang_timeout", ['must be >= 0, got "-5s"']),
    ("[preflight]\nmemlock_min = -5\n", "preflight.memlock_min", ["-5 has no unit: write a size like '8MiB'"]),
    ("[run]\nnodes = 0\n", "run.nodes", ["must be >= 1, got 0"]),
    ("[topology]\nnic_rails = { mlx5_0 = -1 }\n", "topology.nic_rails", ["mlx5_0: must be >= 0, got -1"]),
    ('[topology]\nnic_rails = { mlx5_0 = "0" }\n', "topology.nic_rails", ['mlx5_0: expected an integer, got "0"']),
    ("description = 5\n", "description", ["expected a string, got 5"]),
])
def test_validation_errors(tmp_path, text, key, reason):
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    e = info.value
    assert (e.file, e.key) == (str(path), key)
    assert str(e).startswith(f"{path}: {key}: " if key else f"{path}: ")
    for part in reason:
        assert part in e.reason


def test_profile_error_pickles():
    e = ProfileError("a.toml", "run.nodes", "must be >= 1, got 0")
    copy = pickle.loads(pickle.dumps(e))
    assert (copy.file, copy.key, copy.reason, str(copy)) == (e.file, e.key, e.reason, str(e))


def test_unknown_profile_name():
    with pytest.raises(ProfileError) as info:
        load_profile("nosuch")
    assert "nosuch" in str(info.value)
    assert "local" in info.value.reason


@pytest.mark.parametrize("as_str", [False, True])
def test_missing_file(tmp_path, as_str):
    path = tmp_path / "missing.toml"
    with pytest.raises(ProfileError, match="no such file") as info:
        load_profile(str(path) if as_str else path)
    assert info.value.file == str(path)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('description = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ProfileError, match="invalid TOML"):
        load_profile(path)


# --- extends -----------------------------------------------------------------

def test_extends_deep_merge(tmp_path):
    write(tmp_path, "base.toml", """
name = "base-name"
description = "base"
[run]
hang_timeout = "10s"
nodes = 3
[topology]
nic_rails = { mlx5_0 = 0 }
""")
    child = write(tmp_path, "child.toml", """
extends = "base.toml"
[run]
nodes = 4
[topology]
nic_rails = { mlx5_1 = 1 }
""")
    p = load_profile(child)
    assert p.name == "child"  # a name is not inherited
    assert p.description == "base"
    assert p.values["run"] == {"engine": "auto", "engines": {}, "hang_timeout": 10.0, "nodes": 4, "ranks_per_node": 2,
                                "rail_mode": "concurrent", "budget": None, "budget_margin": 0.1,
                "attempts": 2, "lost_max": 0.2}
    assert p.values["topology"]["nic_rails"] == {"mlx5_0": 0, "mlx5_1": 1}


def test_extends_builtin(tmp_path):
    p = load_profile(write(tmp_path, "mine.toml", 'extends = "local"\n[run]\nhang_timeout = "5min"\n'))
    local = load_profile("local")
    assert p.get("run.hang_timeout") == 300.0
    assert p.get("preflight.memlock_min") == local.get("preflight.memlock_min")
    assert p.description == local.description


def test_extends_relative_to_file_not_cwd(tmp_path, monkeypatch):
    sub = tmp_path / "profiles"
    sub.mkdir()
    write(sub, "base.toml", "[run]\nnodes = 7\n")
    write(sub, "child.toml", 'extends = "base.toml"\n')
    monkeypatch.chdir(tmp_path)
    assert load_profile("profiles/child.toml").get("run.nodes") == 7


def test_extends_cycle(tmp_path):
    a = write(tmp_path, "a.toml", 'extends = "b.toml"\n')
    b = write(tmp_path, "b.toml", 'extends = "a.toml"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(a)
    assert (info.value.file, info.value.key) == (str(b), "extends")
    assert info.value.reason == f"cycle: {a} -> {b} -> {a}"


def test_extends_self(tmp_path):
    a = write(tmp_path, "a.toml", 'extends = "./a.toml"\n')
    with pytest.raises(ProfileError, match="cycle") as info:
        load_profile(a)
    assert (info.value.file, info.value.key) == (str(a), "extends")


def test_extends_missing_parent(tmp_path):
    child = write(tmp_path, "child.toml", 'extends = "gone.toml"\n')
    with pytest.raises(ProfileError, match="no such file") as info:
        load_profile(child)
    assert (info.value.file, info.value.key) == (str(child), "extends")


def test_extends_unknown_builtin(tmp_path):
    child = write(tmp_path, "child.toml", 'extends = "nosuch"\n')
    with pytest.raises(ProfileError, match="no such built-in profile 'nosuch'") as info:
        load_profile(child)
    assert (info.value.file, info.value.key) == (str(child), "extends")


def test_error_in_parent_names_parent(tmp_path):
    base = write(tmp_path, "base.toml", "[run]\nnodes = -1\n")
    child = write(tmp_path, "child.toml", 'extends = "base.toml"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(child)
    assert (info.value.file, info.value.key) == (str(base), "run.nodes")


# --- show / list -------------------------------------------------------------

def test_format_profile_list():
    text = format_profile_list()
    lines = text.splitlines()
    assert len(lines) == len(builtin_names())
    assert any(line.startswith("local ") and "laptop or CI" in line for line in lines)


def test_format_profile_shows_units_and_source():
    text = format_profile(load_profile())
    assert str(builtin_dir() / "local.toml") in text
    assert 'hang_timeout = "1min"' in text
    assert 'memlock_min = "8MiB"' in text


ROUND_TRIP = """
name = "odd name"
description = "line one\\nline \\"two\\" caf\u00e9"
[run]
engine = "nccl"
hang_timeout = "1.5ms"
[topology]
rails = 8
nic_rails = { mlx5_0 = 0, mlx5_1 = 1, "weird.nic" = 2 }
[preflight]
memlock_min = "unlimited"
same_versions = false
"""


@pytest.mark.parametrize("source", [*builtin_names(), "custom"])
def test_format_profile_round_trip(tmp_path, source):
    p = load_profile(write(tmp_path, "custom.toml", ROUND_TRIP) if source == "custom" else source)
    text = format_profile(p)
    tomllib.loads(text)
    again = load_profile(write(tmp_path, "shown.toml", text))
    assert again.values == p.values
    assert again.description == p.description
    assert format_profile(again).splitlines()[2:] == text.splitlines()[2:]  # all but the header


def test_run_engines_names_suites_and_engines(tmp_path):
    ok = load_profile(write(tmp_path, "ok.toml", '[run]\nengines = { rdma_write = "verbs", collective = "nccl" }\n'))
    assert ok.get("run.engines") == {"rdma_write": "verbs", "collective": "nccl"}
    for text, words in (('[run]\nengines = { rdma_writes = "verbs" }\n', "rdma_writes: not a suite"),
                        ('[run]\nengines = { rdma_write = "ibverbs" }\n', "rdma_write: expected one of mpi, verbs, nccl")):
        with pytest.raises(ProfileError) as info:
            load_profile(write(tmp_path, "bad.toml", text))
        assert info.value.key == "run.engines" and words in info.value.reason, info.value.reason
