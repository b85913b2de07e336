"""Workspace reads: installations, operations and what a runtime loads (``resolved``)."""
