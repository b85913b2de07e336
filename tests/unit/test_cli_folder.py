"""Package folders: packyard.toml / packyard.json, ignore rules, packyard init."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packyard_cli.build import build_from_directory
from packyard_cli.client import EXIT_USAGE, CliError
from packyard_cli.folder import collect, default_name, init_folder, load_config

ROOT = Path(__file__).resolve().parents[2]


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_defaults_leave_out_dotfiles_caches_and_the_package_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "SKILL.md": "x",
            "src/main.py": "x",
            "src/__pycache__/main.cpython-311.pyc": "x",
            "src/old.pyc": "x",
            ".git/HEAD": "x",
            ".env": "x",
            "packyard.toml": 'name = "a"',
            "docs/packyard.toml": "kept: only the top-level one is the package file",
        },
    )
    found = collect(tmp_path)
    assert list(found.files) == ["SKILL.md", "docs/packyard.toml", "src/main.py"]
    assert {".git/", ".env", "packyard.toml", "src/__pycache__/", "src/old.pyc"} <= set(found.ignored)


def test_the_ignore_file_adds_patterns_and_can_put_things_back(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"SKILL.md": "x", "notes.log": "x", ".well-known/a.json": "{}", ".packyardignore": "*.log\n!.well-known/\n"},
    )
    assert list(collect(tmp_path).files) == [".well-known/a.json", "SKILL.md"]


def test_a_missing_or_empty_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="no such folder") as missing:
        collect(tmp_path / "nope")
    assert missing.value.exit_code == EXIT_USAGE
    write(tmp_path, {".hidden": "x"})
    with pytest.raises(CliError, match="nothing to package") as empty:
        collect(tmp_path)
    assert "ignored" in str(empty.value.detail)


def test_a_symlink_is_refused_unless_ignored(tmp_path: Path) -> None:
    write(tmp_path, {"SKILL.md": "x"})
    (tmp_path / "link").symlink_to(tmp_path / "SKILL.md")
    with pytest.raises(CliError, match="not a regular file"):
        collect(tmp_path)
    write(tmp_path, {".packyardignore": "link\n"})
    assert list(collect(tmp_path).files) == ["SKILL.md"]


def test_toml_and_json_package_files(tmp_path: Path) -> None:
    toml_dir = write(
        tmp_path / "t",
        {
            "packyard.toml": 'name = "weather-skill"\nversion = "1.0.0"\n'
            'permissions = ["network:api.weather.example", {kind = "state"}]\n[metadata]\ndescription = "d"\n',
            "a": "x",
        },
    )
    config = load_config(toml_dir)
    assert (config.name, config.version, config.metadata) == ("weather-skill", "1.0.0", {"description": "d"})
    assert config.permissions == [
        {"kind": "network", "resource": "api.weather.example"},
        {"kind": "state", "resource": "*"},
    ]
    json_dir = write(tmp_path / "j", {"packyard.json": json.dumps({"name": "x", "version": "0.1.0"})})
    assert load_config(json_dir).name == "x"
    assert load_config(write(tmp_path / "none", {"a": "x"})).name is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('name = "Bad_Name"', "package name"),
        ('version = "1.0"', "not a semantic version"),
        ('nmae = "x"', "unknown key 'nmae'"),
        ('permissions = ["netwrok:x"]', "not one of"),
        ("name = ", "not valid TOML"),
    ],
)
def test_a_bad_package_file_is_a_usage_error_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    write(tmp_path, {"packyard.toml": content})
    with pytest.raises(CliError, match=message) as caught:
        load_config(tmp_path)
    assert caught.value.exit_code == EXIT_USAGE and "packyard.toml" in caught.value.title


def test_init_writes_a_package_file_that_loads_and_refuses_to_overwrite(tmp_path: Path) -> None:
    folder = tmp_path / "My Skill"
    written = init_folder(folder, name=default_name(folder), permissions=[{"kind": "network", "resource": "x.example"}])
    assert [p.name for p in written] == ["packyard.toml", ".packyardignore"]
    config = load_config(folder)
    assert (config.name, config.version, config.permissions) == (
        "my-skill",
        "0.1.0",
        [{"kind": "network", "resource": "x.example"}],
    )
    with pytest.raises(CliError, match="already exists"):
        init_folder(folder)
    assert init_folder(folder, name="other", force=True)[0].name == "packyard.toml"


def test_the_examples_are_two_versions_of_the_journeys_package() -> None:
    for version in ("1.0.0", "1.1.0"):
        folder = ROOT / "examples" / "weather-skill" / version
        config = load_config(folder)
        assert (config.name, config.version) == ("weather-skill", version)
        assert config.permissions == [{"kind": "network", "resource": "api.weather.example"}]
        assert sorted(build_from_directory(folder).manifest["files"][i]["path"] for i in range(2)) == [
            "SKILL.md",
            "src/main.py",
        ]
