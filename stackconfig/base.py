"""The one base model of every stack-file section: camelCase keys, unknown keys rejected, frozen; each
field's docstring (the string under it) is its description in the JSON Schema (``docs/reference``)."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


SCHEMA_VERSION = 1
"""The version of the stack and run file schemas this release reads; CHANGELOG.md says what each version
changed. A release that changes what a field means raises it, and a file written for another is refused."""


class SchemaModel(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True,
                              use_attribute_docstrings=True)
