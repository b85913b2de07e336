"""Packyard: publish immutable packages and install them durably into workspaces.

This package is the Lambda layer: the domain (releases, uploads, quotas, archive verification), the data access
layer (``packyard.store``) and the shared HTTP/observability plumbing. Only ``packyard.store`` touches boto3.
"""
