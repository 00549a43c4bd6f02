"""The one base model of every stack-file section: camelCase keys, unknown keys rejected, frozen; each
field's docstring (the string under it) is its description in the JSON Schema (``docs/reference``)."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SchemaModel(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True,
                              use_attribute_docstrings=True)
