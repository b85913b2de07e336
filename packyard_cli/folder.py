"""A package folder: its ``packyard.toml`` (or ``packyard.json``), its ignore rules, the files it packs, and
``packyard init``.

``packyard.toml``::

    name = "weather-skill"
    version = "1.0.0"
    permissions = ["network:api.weather.example"]    # KIND[:RESOURCE], or tables {kind, resource, reason}

    [metadata]                                        # free-form, copied into the manifest
    description = "Answers questions about the weather."

``packyard.json`` holds the same keys. Command-line flags win over the file (``--package``, ``--version``; any
``--permission`` replaces the file's list, ``--metadata`` adds to its table).

What is packed: every regular file under the folder except what the ignore rules exclude. The rules are
gitignore patterns: :data:`DEFAULT_IGNORES` first, then the lines of ``.packyardignore`` (so ``!pattern``
re-includes something a default excludes). Symbolic links and special files are refused (every one of them in one
error); ``--follow-links`` packs a link to a regular file inside the folder as that file's bytes.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from packyard_cli import rules
from packyard_cli.client import EXIT_USAGE, CliError

TOML_FILE = "packyard.toml"
JSON_FILE = "packyard.json"
IGNORE_FILE = ".packyardignore"
DEFAULT_IGNORES = (
    ".*",  # dotfiles and dot-folders: .git, .venv, .env, .DS_Store, .packyardignore
    "__pycache__/",
    "*.py[cod]",
    f"/{TOML_FILE}",  # the package file describes the package; it is not part of it
    f"/{JSON_FILE}",
)
KNOWN_KEYS = ("name", "version", "permissions", "metadata")

INIT_TOML = """\
# The package this folder publishes (packyard publish DIR reads it; flags override it).
name = {name}
version = {version}

# What the package asks to be granted: KIND[:RESOURCE], KIND one of {kinds}.
permissions = []

[metadata]
description = {description}
"""

INIT_IGNORE = """\
# Files `packyard publish` leaves out, as gitignore patterns, after the defaults:
#   .* (dotfiles and dot-folders)   __pycache__/   *.py[cod]   /packyard.toml   /packyard.json
# A line starting with ! puts something back, e.g. !.well-known/
build/
*.tar.gz
"""


@dataclass(frozen=True)
class PackageConfig:
    """What a package file says (every field optional: flags may supply it)."""

    source: Path | None = None
    name: str | None = None
    version: str | None = None
    permissions: list[dict[str, str]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def _usage(title: str, detail: str | None = None) -> CliError:
    return CliError(title, detail=detail, exit_code=EXIT_USAGE)


def check_folder(folder: str | Path) -> Path:
    path = Path(folder)
    if not path.exists():
        raise _usage(f"no such folder: {folder}", "give the folder to package (one with a packyard.toml)")
    if not path.is_dir():
        raise _usage(f"not a folder: {folder}", "give the folder to package, or --archive with --manifest")
    return path


def load_config(folder: str | Path) -> PackageConfig:
    """The folder's ``packyard.toml`` or ``packyard.json`` (both at once is an error); empty when neither."""
    root = check_folder(folder)
    found = [root / name for name in (TOML_FILE, JSON_FILE) if (root / name).is_file()]
    if len(found) > 1:
        raise _usage(f"{root} has both {TOML_FILE} and {JSON_FILE}", "keep one of them")
    if not found:
        return PackageConfig()
    source = found[0]
    try:
        text = source.read_text("utf-8")
        raw = tomllib.loads(text) if source.name == TOML_FILE else json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise _usage(f"cannot read {source}", str(exc)) from None
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise _usage(f"{source} is not valid {'TOML' if source.name == TOML_FILE else 'JSON'}", str(exc)) from None
    return parse_config(raw, source)


def parse_config(raw: Any, source: Path) -> PackageConfig:
    """Check a package file's content against the service's rules; every problem names the file and the key."""
    if not isinstance(raw, dict):
        raise _usage(f"{source}: expected a table of {', '.join(KNOWN_KEYS)}")
    unknown = sorted(set(raw) - set(KNOWN_KEYS))
    if unknown:
        raise _usage(f"{source}: unknown key {unknown[0]!r}", f"the keys are {', '.join(KNOWN_KEYS)}")
    name, version = raw.get("name"), raw.get("version")
    if name is not None:
        problem = rules.package_problem(name) if isinstance(name, str) else "name must be a string"
        if problem:
            raise _usage(f"{source}: {problem}")
    if version is not None:
        problem = rules.version_problem(version) if isinstance(version, str) else "version must be a string"
        if problem:
            raise _usage(f"{source}: {problem}")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        raise _usage(f"{source}: metadata must be a table (JSON object)")
    permissions = None
    if "permissions" in raw:
        if not isinstance(raw["permissions"], list):
            raise _usage(f"{source}: permissions must be a list")
        permissions = [_permission(entry, source) for entry in raw["permissions"]]
    return PackageConfig(source=source, name=name, version=version, permissions=permissions, metadata=metadata)


def _permission(entry: Any, source: Path) -> dict[str, str]:
    if isinstance(entry, str):
        kind, _, resource = entry.partition(":")
        value: dict[str, str] = {"kind": kind, "resource": resource or "*"}
    elif isinstance(entry, dict) and set(entry) <= {"kind", "resource", "reason"} and "kind" in entry:
        value = {key: str(entry[key]) for key in ("kind", "resource", "reason") if key in entry}
        value.setdefault("resource", "*")
    else:
        raise _usage(f"{source}: a permission is 'KIND[:RESOURCE]' or {{kind, resource, reason}}; got {entry!r}")
    if value["kind"] not in rules.PERMISSION_KINDS:
        raise _usage(f"{source}: permission kind {value['kind']!r} is not one of {', '.join(rules.PERMISSION_KINDS)}")
    return value


# ------------------------------------------------------------------ ignore rules and the files packed


def ignore_spec(root: str | Path) -> pathspec.PathSpec[Any]:
    lines = list(DEFAULT_IGNORES)
    ignore_file = Path(root) / IGNORE_FILE
    if ignore_file.is_file():
        lines.extend(ignore_file.read_text("utf-8").splitlines())
    return pathspec.GitIgnoreSpec.from_lines(lines)


@dataclass(frozen=True)
class FolderFiles:
    files: dict[str, Path]  # relative POSIX path → file (for a followed link: the link, read through to its target)
    ignored: list[str]  # relative paths left out (folders end with '/')
    followed: dict[str, str] = field(default_factory=dict)  # link → its target, relative (--follow-links)


@dataclass(frozen=True)
class _Refused:
    path: str
    why: str
    hint: str


REFUSED_SHOWN = 20  # a refusal lists this many offending paths, then how many more


def collect(root: str | Path, spec: pathspec.PathSpec[Any] | None = None, *, follow_links: bool = False) -> FolderFiles:
    """The regular files to pack, sorted, and what the ignore rules left out. Links and special files that are not
    ignored are refused, all of them in one error (packages hold regular files only). With ``follow_links`` a link
    to a regular file inside the folder is packed as that file's bytes; a link to a folder, or to anything outside
    the folder, is still refused."""
    base = check_folder(root)
    real_base = base.resolve()
    spec = spec or ignore_spec(base)
    files: dict[str, Path] = {}
    ignored: list[str] = []
    followed: dict[str, str] = {}
    refused: list[_Refused] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(dirpath)
        kept = []
        for name in sorted(dirnames):
            relative = (here / name).relative_to(base).as_posix()
            if spec.match_file(relative + "/"):
                ignored.append(relative + "/")
            elif (here / name).is_symlink():
                refused.append(
                    _Refused(
                        relative,
                        f"a symbolic link to a folder ({os.readlink(here / name)})",
                        f"add {relative}/ to {IGNORE_FILE}",
                    )
                )
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = here / name
            relative = full.relative_to(base).as_posix()
            if spec.match_file(relative):
                ignored.append(relative)
                continue
            mode = full.lstat().st_mode
            if stat.S_ISREG(mode):
                files[relative] = full
            elif stat.S_ISLNK(mode):
                target = _link_target(full, real_base, follow_links, relative)
                if isinstance(target, _Refused):
                    refused.append(target)
                else:
                    files[relative] = full
                    followed[relative] = target
            else:
                refused.append(_Refused(relative, "not a regular file", f"add {relative} to {IGNORE_FILE}"))
    if refused:
        raise _refusal(base, refused)
    if not files:
        detail = f"everything in it is ignored ({', '.join(sorted(ignored)[:5])})" if ignored else "it is empty"
        raise _usage(f"nothing to package in {root}", detail)
    return FolderFiles(
        files=dict(sorted(files.items())), ignored=sorted(ignored), followed=dict(sorted(followed.items()))
    )


def _link_target(link: Path, real_base: Path, follow_links: bool, relative: str) -> str | _Refused:
    """The target of a link to a file, relative to the folder, when it may be packed; else why not."""
    shown = os.readlink(link)
    ignore_it = f"add {relative} to {IGNORE_FILE}"
    if not follow_links:
        return _Refused(
            relative,
            f"a symbolic link to {shown}, not a regular file",
            f"{ignore_it}, or pass --follow-links to pack its target",
        )
    real = link.resolve()
    if not real.is_relative_to(real_base):
        return _Refused(relative, f"a symbolic link to {real}, outside the package folder", ignore_it)
    if not real.exists():
        return _Refused(relative, f"a symbolic link to {shown}, which does not exist", ignore_it)
    if not stat.S_ISREG(real.stat().st_mode):
        return _Refused(relative, f"a symbolic link to {shown}, which is not a regular file", ignore_it)
    return real.relative_to(real_base).as_posix()


def _refusal(base: Path, refused: list[_Refused]) -> CliError:
    shown = refused[:REFUSED_SHOWN]
    lines = [f"{item.path}: {item.why}; {item.hint}" for item in shown]
    if len(refused) > len(shown):
        lines.append(f"... and {len(refused) - len(shown)} more")
    links = all("symbolic link" in item.why for item in refused)
    count = f"{len(refused)} symbolic links" if links else f"{len(refused)} links or special files"
    title = f"{base} holds {count} a package cannot hold (packages hold regular files only)"
    if len(refused) == 1:
        title = f"{base / refused[0].path} is {refused[0].why} (packages hold regular files only)"
    return CliError(title, detail="\n".join(lines), exit_code=EXIT_USAGE)


def read_files(found: FolderFiles) -> tuple[dict[str, bytes], dict[str, int]]:
    data: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    for relative, path in found.files.items():
        data[relative] = path.read_bytes()
        modes[relative] = 0o755 if path.stat().st_mode & 0o111 else 0o644
    return data, modes


# ------------------------------------------------------------------ init


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def default_name(folder: Path) -> str:
    """A package name made from the folder's name (lowercase, other characters as '-')."""
    text = "".join(c if c.isalnum() or c in "._-" else "-" for c in folder.resolve().name.lower())
    text = text.strip("._-")[:64].strip("._-")
    return text or "my-package"


def init_folder(
    folder: str | Path,
    *,
    name: str | None = None,
    version: str = "0.1.0",
    permissions: Iterable[Mapping[str, str]] = (),
    description: str = "",
    force: bool = False,
) -> list[Path]:
    """Write ``packyard.toml`` (and ``.packyardignore`` if absent) in ``folder``; returns the files written."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    target = root / TOML_FILE
    for existing in (target, root / JSON_FILE):
        if existing.exists() and not force:
            raise _usage(f"{existing} already exists", "edit it, or pass --force to replace it")
    name = name or default_name(root)
    for problem in (rules.package_problem(name), rules.version_problem(version)):
        if problem:
            raise _usage(problem)
    text = INIT_TOML.format(
        name=_toml_string(name),
        version=_toml_string(version),
        kinds=", ".join(rules.PERMISSION_KINDS),
        description=_toml_string(description),
    )
    declared = [p["kind"] + ("" if p.get("resource", "*") == "*" else f":{p['resource']}") for p in permissions]
    if declared:
        text = text.replace("permissions = []", f"permissions = [{', '.join(map(_toml_string, declared))}]")
    target.write_text(text, "utf-8")
    written = [target]
    ignore = root / IGNORE_FILE
    if not ignore.exists():
        ignore.write_text(INIT_IGNORE, "utf-8")
        written.append(ignore)
    return written
