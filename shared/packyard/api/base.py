"""What every API response module shares: ``ApiModel``, the base of every response body, and the few views both
sides of the API render (``ReleaseArchive``: a release's stored archive, on the publish side and in ``resolved``).

Kept apart from the per-side modules so a handler imports only the views it answers with (issue 11, cold start):
``workspace_responses`` and ``consent_responses`` build on this module, not on ``publishing_responses``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, SerializationInfo, SerializerFunctionWrapHandler, model_serializer


class ApiModel(BaseModel):
    """Base of every response body: camelCase aliases; a None value means "key left out" unless kept as null."""

    # defer_build: a handler builds the schemas of the views it answers with, on first use, not all of them at import
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid", defer_build=True)

    keep_null: ClassVar[frozenset[str]] = frozenset()
    """Aliases of the keys answered as ``null`` rather than left out when their value is None."""
    _null_keys: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        aliases = {name: field.alias or name for name, field in cls.model_fields.items()}
        unknown = cls.keep_null - set(aliases.values())
        if unknown:
            raise TypeError(f"{cls.__name__}.keep_null names no field: {sorted(unknown)}")
        # by alias or by name, whichever way the caller dumps
        cls._null_keys = cls.keep_null | {name for name, alias in aliases.items() if alias in cls.keep_null}

    # No return annotation on purpose: pydantic would take an annotated return type as this model's serialization
    # schema (a bare object), where without one the schema stays the model's own, typed field by field.
    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # type: ignore[no-untyped-def]
        data = handler(self)
        return {key: value for key, value in data.items() if value is not None or key in self._null_keys}


class ReleaseArchive(ApiModel):
    sha256: str = Field(description="sha256 hex of the stored archive")
    size: int = Field(description="archive size in bytes")
