"""Installations: what a workspace has installed (the model and its scope) and the grants it holds."""
