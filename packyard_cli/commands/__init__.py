"""The ``packyard`` commands, one module per group: ``local`` (the local stack and its tokens), ``publishing``
(build, publish, releases, yank) and ``installations`` (install … resolved). ``context`` is what they share: the
parsed arguments, the consoles, the API client with its endpoint and token, and waiting for an outcome.

Each command is ``cmd_<name>(ctx, args) -> exit code``; :mod:`packyard_cli.parser` wires them to their arguments.
"""
