"""Expand a SAM template into CloudFormation with aws-sam-translator (what ``sam deploy``'s transform does).

Runs in-process where ``samtranslator`` imports, else as a script under ``.venv-sam``'s Python, which has the
translator sam-cli deploys with (requirements-sam.lock pins aws-sam-translator 1.115.0; its ``pydantic~=2.13.3``
conflicts with the development virtualenv's pydantic, so it cannot be installed there)::

    .venv-sam/bin/python devstack/sam_transform.py < template.json > expanded.json

The input is the template as JSON with local paths already replaced (see :func:`devstack.iam.expand_template`).
This file imports only the standard library and ``samtranslator``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


class NoManagedPolicies:
    """The managed-policy loader the translator asks for the ARNs of managed policies named by name in
    ``Policies``. The template names none (only SAM policy templates and inline statements), so none are known:
    a name would then fail the translation rather than silently resolve."""

    def load(self) -> dict[str, str]:
        return {}


def transform(template: dict[str, Any], parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    from samtranslator.translator.transform import transform as sam_transform

    expanded: dict[str, Any] = sam_transform(template, dict(parameters or {}), NoManagedPolicies())
    return expanded


def main() -> int:
    request = json.load(sys.stdin)
    json.dump(transform(request["template"], request.get("parameters")), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
