"""Profiles: named TOML files of settings and thresholds for one kind of cluster, found, merged
along `extends` and loaded.

A profile is checked against the schema (acceptance.rules.schema, its key types in
acceptance.rules.fields): an unknown key is an error rather than ignored, because a typo would
otherwise silently fall back to a default on a real acceptance run. Units are parsed once on
loading (acceptance.rules.units), so the rest of the harness sees bytes, seconds and Gbit/s only.
This module raises ProfileError; the CLI and the pytest plugin turn it into exit status 2.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from .fields import Field
from .schema import SCHEMA, TOP_LEVEL
from .units import did_you_mean, toml_text

DEFAULT_PROFILE = "local"


class ProfileError(Exception):
    """A profile that cannot be used; str() is "file: key: reason"."""

    def __init__(self, file, key: str, reason: str):
        # All three in args so the exception pickles (e.g. sent between MPI ranks).
        super().__init__(str(file), key, reason)
        self.file, self.key, self.reason = str(file), key, reason

    def __str__(self) -> str:
        if self.key:
            return f"{self.file}: {self.key}: {self.reason}"
        return f"{self.file}: {self.reason}"


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    source: str
    description: str
    values: dict  # section -> key -> parsed value, every SCHEMA key present

    def get(self, dotted: str):
        """profile.get("run.hang_timeout") -> 120.0; KeyError for an unknown key."""
        node = self.values
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(dotted)
            node = node[part]
        return node

    def to_json(self) -> dict:
        return {"name": self.name, "source": self.source, "description": self.description,
                "values": copy.deepcopy(self.values)}


def builtin_dir() -> Path:
    return Path(__file__).resolve().parent / "profiles"


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.toml"))


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ProfileError(path, "", "no such file") from None
    except OSError as e:
        raise ProfileError(path, "", e.strerror or str(e)) from None
    except UnicodeDecodeError:
        raise ProfileError(path, "", "invalid TOML: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(path, "", f"invalid TOML: {e}") from None


def _parse(field: Field, raw, file, key: str):
    try:
        return field.parse(raw)
    except ValueError as e:
        raise ProfileError(file, key, str(e)) from None


def _unknown_top_level(key: str, raw) -> str:
    if isinstance(raw, dict):
        return f"unknown section (known sections: {', '.join(SCHEMA)})" + did_you_mean(key, SCHEMA)
    reason = f"unknown key (top-level keys: {', '.join(TOP_LEVEL)}; sections: {', '.join(SCHEMA)})"
    homes = [section for section, fields in SCHEMA.items() if key in fields]
    if homes:  # a setting written above its [section] header
        return reason + f"; did you mean to put it under [{homes[0]}]?"
    return reason + did_you_mean(key, [*TOP_LEVEL, *SCHEMA])


def _resolve(raw: dict, file) -> tuple[dict, dict]:
    """Check a raw profile; return (top-level values, section values with defaults filled)."""
    top = {}
    for key, value in raw.items():
        if key in TOP_LEVEL:
            top[key] = _parse(TOP_LEVEL[key], value, file, key)
        elif key not in SCHEMA:
            raise ProfileError(file, key, _unknown_top_level(key, value))
        elif not isinstance(value, dict):
            raise ProfileError(file, key, f"expected a table [{key}], got {toml_text(value)}")
    values = {}
    for section, fields in SCHEMA.items():
        table = raw.get(section, {})
        for key in table:
            if key not in fields:
                raise ProfileError(file, f"{section}.{key}",
                                   f"unknown key (known keys in [{section}]: {', '.join(fields)})"
                                   + did_you_mean(key, fields))
        values[section] = {key: None if key not in table and field.default is None
                           else _parse(field, table.get(key, field.default), file, f"{section}.{key}")
                           for key, field in fields.items()}
    return top, values


def _merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _is_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or os.sep in ref


def _builtin(name: str, file, key: str) -> Path:
    if name not in builtin_names():
        raise ProfileError(file, key, f"no such built-in profile {name!r} (built-in profiles: "
                           f"{', '.join(builtin_names())}; or give the path of a .toml file)")
    return builtin_dir() / f"{name}.toml"


def _load_raw(path: Path, chain: tuple[Path, ...]) -> dict:
    """The file's raw tables merged over those of the profiles it extends."""
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(path):], path))
        raise ProfileError(chain[-1], "extends", f"cycle: {cycle}")
    raw = _read(path)
    _resolve(raw, path)  # check each file on its own, so an error names the file it is in
    ref = raw.pop("extends", None)
    if ref is None:
        return raw
    if _is_path(ref):
        parent_path = (path.parent / os.path.expanduser(ref)).resolve()
        if not parent_path.is_file():
            raise ProfileError(path, "extends", f"no such file: {parent_path}")
    else:
        parent_path = _builtin(ref, path, "extends").resolve()
    parent = _load_raw(parent_path, (*chain, path))
    parent.pop("name", None)
    return _merge(parent, raw)


def load_profile(name_or_path: str | os.PathLike | None = None) -> Profile:
    """A built-in name, or a path to a TOML file (an existing file or anything ending in .toml)."""
    ref = DEFAULT_PROFILE if name_or_path is None else name_or_path
    if isinstance(ref, os.PathLike) or os.path.isfile(ref) or _is_path(ref):
        path = Path(ref).expanduser().resolve()
    else:
        path = _builtin(ref, ref, "").resolve()
    top, values = _resolve(_load_raw(path, ()), path)
    return Profile(name=top.get("name") or path.stem, source=str(path),
                   description=top.get("description", ""), values=values)


def format_profile_list() -> str:
    """One line per built-in profile: name and the first line of its description."""
    rows = [(name, load_profile(name).description) for name in builtin_names()]
    width = max((len(name) for name, _ in rows), default=0)
    return "\n".join(f"{name:<{width}}  {(desc.splitlines() or [''])[0]}".rstrip() for name, desc in rows)


def format_profile(p: Profile) -> str:
    """The resolved profile as TOML that loads back to the same values."""
    lines = [f"# Profile {p.name!r}, resolved: defaults filled in, `extends` applied.",
             f"# Source: {p.source}"]
    if p.name != Path(p.source).stem:
        lines.append(f"name = {json.dumps(p.name, ensure_ascii=False)}")
    lines.append(f"description = {json.dumps(p.description, ensure_ascii=False)}")
    for section, fields in SCHEMA.items():
        rows = [(f"{key} = {field.to_toml(p.values[section][key])}" if p.values[section][key] is not None
                 else f"# {key} = (not set)", field.help)
                for key, field in fields.items()]
        width = max(len(text) for text, _ in rows)
        lines += ["", f"[{section}]"]
        lines += [f"{text:<{width}}  # {help}" if help else text for text, help in rows]
    return "\n".join(lines)
