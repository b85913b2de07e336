"""The ``packyard`` client side: the CLI (``packyard_cli.main``) and deterministic package builds."""

__version__ = "0.1.0"
