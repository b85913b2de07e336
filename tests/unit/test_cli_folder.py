"""Package folders: packyard.toml / packyard.json, ignore rules, packyard init."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from packyard_cli.build import build_from_directory, build_from_files
from packyard_cli.client import EXIT_USAGE, CliError
from packyard_cli.commands.context import Context
from packyard_cli.commands.publishing import _not_published
from packyard_cli.folder import collect, default_name, init_folder, load_config, read_files
from packyard_cli.main import main
from packyard_cli.parser import build_parser

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


# ------------------------------------------------------------------ links, and what a build says it packed


def test_every_link_is_reported_in_one_run_with_what_to_ignore(tmp_path: Path) -> None:
    # Given a folder with three links: two to files, one to a folder
    write(tmp_path, {"SKILL.md": "x", "lib/a.py": "a", "docs/guide.md": "g"})
    (tmp_path / "README.md").symlink_to("SKILL.md")
    (tmp_path / "lib" / "b.py").symlink_to("a.py")
    (tmp_path / "manual").symlink_to("docs", target_is_directory=True)

    # When it is collected, Then one error names all three, each with what to do about it
    with pytest.raises(CliError) as caught:
        collect(tmp_path)
    detail = str(caught.value.detail)
    assert caught.value.exit_code == EXIT_USAGE
    assert "3 symbolic links" in caught.value.title
    assert "manual: a symbolic link to a folder (docs); add manual/ to .packyardignore" in detail
    assert "README.md: a symbolic link to SKILL.md, not a regular file; add README.md to .packyardignore" in detail
    assert "lib/b.py: a symbolic link to a.py" in detail
    assert detail.count("--follow-links") == 2  # offered for the links to files, not for the folder


def test_follow_links_packs_the_target_bytes_of_a_link_inside_the_folder(tmp_path: Path) -> None:
    # Given a link to a file inside the folder
    write(tmp_path, {"SKILL.md": "the skill", "src/main.py": "print(1)\n"})
    (tmp_path / "README.md").symlink_to("SKILL.md")

    # When collected and built with follow_links
    found = collect(tmp_path, follow_links=True)
    files, modes = read_files(found)
    manifest = build_from_files(files, modes=modes).manifest

    # Then the link is packed as a regular file with its target's bytes, and reported as followed
    assert list(found.files) == ["README.md", "SKILL.md", "src/main.py"]
    assert found.followed == {"README.md": "SKILL.md"}
    entries = {entry["path"]: entry for entry in manifest["files"]}
    assert entries["README.md"]["sha256"] == entries["SKILL.md"]["sha256"]
    assert entries["README.md"]["size"] == len("the skill")


def test_follow_links_refuses_a_link_pointing_outside_the_folder_naming_it(tmp_path: Path) -> None:
    # Given a package folder with a link to a file outside it, and one to a missing file
    outside = write(tmp_path / "elsewhere", {"secret.txt": "s"})
    package = write(tmp_path / "pkg", {"SKILL.md": "x"})
    (package / "leak.txt").symlink_to(outside / "secret.txt")
    (package / "gone.txt").symlink_to("missing.txt")

    # When collected with follow_links, Then both are refused in one error, the outside one with its target
    with pytest.raises(CliError) as caught:
        collect(package, follow_links=True)
    detail = str(caught.value.detail)
    assert f"leak.txt: a symbolic link to {(outside / 'secret.txt').resolve()}, outside the package folder" in detail
    assert "gone.txt: a symbolic link to missing.txt, which does not exist" in detail


def test_a_special_file_is_refused_beside_the_links(tmp_path: Path) -> None:
    # Given a named pipe and a link
    write(tmp_path, {"SKILL.md": "x"})
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to("SKILL.md")
    # Then one error names both
    with pytest.raises(CliError) as caught:
        collect(tmp_path)
    assert "2 links or special files" in caught.value.title
    assert "pipe: not a regular file; add pipe to .packyardignore" in str(caught.value.detail)


def ignored_folder(tmp_path: Path) -> Path:
    """A folder of 3 packed files and 8 paths the default rules leave out."""
    files = {"SKILL.md": "x", "src/main.py": "x", "src/util.py": "x", "packyard.toml": 'name = "demo"\n'}
    files.update({f".dot{index}": "x" for index in range(5)})
    files.update({"src/__pycache__/main.cpython-312.pyc": "x", "src/old.pyc": "x"})
    return write(tmp_path / "demo", files)


def test_build_says_how_many_files_it_packed_and_what_it_left_out(tmp_path: Path, capsys: Any) -> None:
    # Given a folder whose ignore rules leave out 8 paths
    folder = ignored_folder(tmp_path)

    # When it is built
    code = main(["build", str(folder), "--out", str(tmp_path / "out" / "demo")])

    # Then stderr says how many files were packed, how many were left out and the first five of them
    err = capsys.readouterr().err
    assert code == 0
    assert f"packed 3 files from {folder}; the ignore rules left out 8: .dot0, .dot1, .dot2, .dot3, .dot4" in err
    assert "and 3 more (--list shows all)" in err


def test_build_json_carries_the_packing_summary_with_every_ignored_path(tmp_path: Path, capsys: Any) -> None:
    folder = ignored_folder(tmp_path)
    (folder / "README.md").symlink_to("SKILL.md")

    code = main(["--output", "json", "build", str(folder), "--follow-links", "--out", str(tmp_path / "o" / "d")])

    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["files"] == 4
    assert summary["packing"] == {
        "packed": 4,
        "ignored": 8,
        "ignoredPaths": [
            ".dot0",
            ".dot1",
            ".dot2",
            ".dot3",
            ".dot4",
            "packyard.toml",
            "src/__pycache__/",
            "src/old.pyc",
        ],
        "followedLinks": {"README.md": "SKILL.md"},
    }


def test_build_list_shows_every_ignored_path(tmp_path: Path, capsys: Any) -> None:
    folder = ignored_folder(tmp_path)
    assert main(["build", str(folder), "--list"]) == 0
    out = capsys.readouterr().out
    assert "src/old.pyc" in out and ".dot4" in out and "SKILL.md" in out


def test_publish_json_refusal_after_verification_has_the_problem_fields_at_the_top(capsys: Any) -> None:
    # Given an upload the service rejected during verification
    final = {
        "uploadId": "u1",
        "state": "rejected",
        "rejection": {"code": "archive_rejected", "subCode": "size_mismatch", "detail": "src/main.py: 3 bytes"},
    }
    ctx = Context(
        args=build_parser().parse_args(["--output", "json", "--query", "subCode", "publish", "x"]), out=None, err=None
    )

    # When it is printed with --output json --query subCode, Then the query reads the top-level field
    assert _not_published(ctx, final, "p", "1.0.0") == 3
    assert json.loads(capsys.readouterr().out) == "size_mismatch"

    # And without a query the problem fields sit at the top, the upload beside them
    ctx = Context(args=build_parser().parse_args(["--output", "json", "publish", "x"]), out=None, err=None)
    _not_published(ctx, final, "p", "1.0.0")
    printed = json.loads(capsys.readouterr().out)
    assert (printed["code"], printed["subCode"], printed["detail"]) == (
        "archive_rejected",
        "size_mismatch",
        "src/main.py: 3 bytes",
    )
    assert (printed["status"], printed["uploadId"], printed["state"]) == (422, "u1", "rejected")
    assert printed["rejection"] == final["rejection"]
