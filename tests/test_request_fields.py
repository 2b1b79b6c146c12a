"""The request field table against what it describes: the generator's config.pbtxt inputs and GenerateOptions."""

from __future__ import annotations

from dataclasses import fields

from tritonclient.grpc import model_config_pb2

from tritongen.engine.options import GenerateOptions
from tritongen.request_fields import FIELDS
from tritongen.runtime.repository import read_config

from conftest import REPOSITORY

INPUTS = {i.name: model_config_pb2.DataType.Name(i.data_type).removeprefix("TYPE_")
          for i in read_config(REPOSITORY / "generator").input}


def test_every_row_with_a_tensor_is_an_input_of_its_dtype():
    assert {row.name: row.dtype for row in FIELDS if row.tensor} == {
        row.name: INPUTS.get(row.name) for row in FIELDS if row.tensor}
    assert not {row.name for row in FIELDS if not row.tensor} & set(INPUTS)


def test_every_input_is_a_row_or_the_alias_of_one_of_its_dtype():
    aliases = {alias: row.dtype for row in FIELDS if row.tensor for alias in row.aliases}
    rows = {row.name: row.dtype for row in FIELDS}
    assert {name: rows.get(name, aliases.get(name)) for name in INPUTS} == INPUTS


def test_every_option_is_a_generate_options_field():
    assert {row.option for row in FIELDS if row.option} <= {f.name for f in fields(GenerateOptions)}


def test_each_spelling_names_one_row():
    spellings = [name for row in FIELDS for name in row.names]
    assert len(spellings) == len(set(spellings))
