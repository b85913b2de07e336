"""Shell completion scripts, generated from the parser itself (so they never drift from the commands):
``packyard completion bash|zsh|fish``.

* bash: ``eval "$(packyard completion bash)"`` in ~/.bashrc
* zsh: ``eval "$(packyard completion zsh)"`` in ~/.zshrc (bash completion through ``bashcompinit``)
* fish: ``packyard completion fish > ~/.config/fish/completions/packyard.fish``

They complete commands, each command's options, the values of options with a fixed set of choices, and file or
folder names where a command takes a path.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass

SHELLS = ("bash", "zsh", "fish")
PATH_OPTIONS = frozenset({"--archive", "--manifest", "--out", "--state-dir"})
PATH_COMMANDS = frozenset({"build", "publish", "init"})


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    takes_value: bool
    choices: tuple[str, ...]
    help: str


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]


def _options(parser: argparse.ArgumentParser) -> tuple[Option, ...]:
    found = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        choices = tuple(str(c) for c in action.choices) if action.choices else ()
        found.append(
            Option(tuple(action.option_strings), action.nargs != 0, choices, (action.help or "").split("(")[0])
        )
    return tuple(found)


def describe(parser: argparse.ArgumentParser) -> tuple[tuple[Option, ...], tuple[Command, ...]]:
    """The top-level options and every command with its options."""
    commands: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: str(choice.help or "") for choice in action._choices_actions}
            for name, sub in action.choices.items():
                commands.append(Command(name, helps.get(name, ""), _options(sub)))
    return _options(parser), tuple(commands)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    top, commands = describe(parser)
    if shell == "fish":
        return _fish(top, commands)
    body = _bash(top, commands)
    if shell == "zsh":
        return (
            "# packyard completion for zsh (through bash completion)\nautoload -U +X bashcompinit && bashcompinit\n"
            + body
        )
    return body


def _words(options: tuple[Option, ...]) -> str:
    return " ".join(flag for option in options for flag in option.flags)


def _bash(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    every = {flag: option for cmd in commands for option in cmd.options for flag in option.flags}
    every.update({flag: option for option in top for flag in option.flags})
    valued = sorted(flag for flag, option in every.items() if option.takes_value)
    lines = [
        '# packyard completion for bash: eval "$(packyard completion bash)"',
        "_packyard() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i skip=""',
        f"    local commands={shlex.quote(' '.join(c.name for c in commands))}",
        f"    local valued=' {' '.join(valued)} '",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        local word="${COMP_WORDS[i]}"',
        '        if [[ -n "$skip" ]]; then skip=""; continue; fi',
        '        if [[ "$word" == -* ]]; then [[ "$valued" == *" $word "* ]] && skip=1; continue; fi',
        '        if [[ -z "$cmd" ]]; then cmd="$word"; fi',
        "    done",
        '    case "$prev" in',
    ]
    for flag, option in sorted(every.items()):
        if option.choices:
            lines.append(
                f'        {flag}) COMPREPLY=($(compgen -W {shlex.quote(" ".join(option.choices))} -- "$cur")); return;;'
            )
    path_flags = "|".join(sorted(PATH_OPTIONS & set(every)))
    if path_flags:
        lines.append(f'        {path_flags}) COMPREPLY=($(compgen -f -- "$cur")); return;;')
    other = "|".join(f for f in valued if not every[f].choices and f not in PATH_OPTIONS)
    if other:
        lines.append(f"        {other}) return;;")
    lines += [
        "    esac",
        '    if [[ -z "$cmd" ]]; then',
        f'        if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W {shlex.quote(_words(top))} -- "$cur"));',
        '        else COMPREPLY=($(compgen -W "$commands" -- "$cur")); fi',
        "        return",
        "    fi",
        "    local opts=''",
        '    case "$cmd" in',
    ]
    for cmd in commands:
        lines.append(f"        {cmd.name}) opts={shlex.quote(_words(cmd.options))};;")
    lines += [
        "    esac",
        '    if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$opts" -- "$cur")); return; fi',
        f'    case "$cmd" in {"|".join(sorted(PATH_COMMANDS))}) COMPREPLY=($(compgen -d -- "$cur"));; esac',
        "}",
        "complete -o default -F _packyard packyard",
        "",
    ]
    return "\n".join(lines)


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_option(option: Option, condition: str | None) -> str:
    parts = ["complete -c packyard"]
    if condition:
        parts.append(f"-n {_fish_quote(condition)}")
    for flag in option.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if option.choices:
        parts.append(f"-x -a {_fish_quote(' '.join(option.choices))}")
    elif option.takes_value:
        parts.append("-r" if option.flags[-1] in PATH_OPTIONS else "-x")
    if option.help.strip():
        parts.append(f"-d {_fish_quote(option.help.strip())}")
    return " ".join(parts)


def _fish(top: tuple[Option, ...], commands: tuple[Command, ...]) -> str:
    lines = ["# packyard completion for fish: packyard completion fish > ~/.config/fish/completions/packyard.fish"]
    lines.append("complete -c packyard -f")
    names = " ".join(c.name for c in commands)
    for cmd in commands:
        lines.append(
            f"complete -c packyard -n {_fish_quote('not __fish_seen_subcommand_from ' + names)} -a {cmd.name} "
            f"-d {_fish_quote(cmd.help)}"
        )
    for option in top:
        lines.append(_fish_option(option, None))
    for cmd in commands:
        condition = f"__fish_seen_subcommand_from {cmd.name}"
        top_flags = {f for o in top for f in o.flags}
        for option in cmd.options:
            if not set(option.flags) & top_flags:
                lines.append(_fish_option(option, condition))
        if cmd.name in PATH_COMMANDS:
            lines.append(f"complete -c packyard -n {_fish_quote(condition)} -a '(__fish_complete_directories)'")
    return "\n".join(lines) + "\n"
