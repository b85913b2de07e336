"""The ``packyard`` client side: building deterministic archives and manifests, and (later) the CLI."""
