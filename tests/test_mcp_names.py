"""MCP tool names and input schemas as every provider accepts them."""

from nanoagent.mcp.names import MAX_NAME, clean_schema, tool_names
from tests.mcp_servers import WEIRD_SCHEMA


def test_names_are_prefixed_sanitised_and_within_the_limit():
    names = tool_names([("my server", "read.file"), ("s", "x" * 100), ("s", "x" * 99 + "y")])
    assert names[("my server", "read.file")] == "mcp__my_server__read_file"
    long_one, long_two = names[("s", "x" * 100)], names[("s", "x" * 99 + "y")]
    assert len(long_one) == len(long_two) == MAX_NAME and long_one != long_two
    assert long_one.startswith("mcp__s__xxx")


def test_tools_that_sanitise_to_the_same_name_stay_distinct_the_same_way_every_time():
    pairs = [("a", "get.item"), ("a", "get_item"), ("b", "get_item")]
    first = tool_names(pairs)
    assert first == tool_names(list(reversed(pairs)))
    assert len(set(first.values())) == 3
    assert first[("a", "get.item")] == "mcp__a__get_item"  # the first in order keeps the plain name
    assert first[("b", "get_item")] == "mcp__b__get_item"


def test_a_schema_full_of_rejected_keywords_is_cleaned_and_keeps_its_meaning():
    schema = clean_schema(WEIRD_SCHEMA)
    assert schema == {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "where": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                      "required": ["x", "y"]},
            "mode": {"type": "string", "enum": ["a", "b"], "description": "(default: 'a')"},
            "options": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["where"],
    }


def test_top_level_combinators_nullable_types_and_odd_formats_are_flattened():
    schema = clean_schema({
        "anyOf": [{"properties": {"id": {"type": "string"}}, "required": ["id"]},
                  {"properties": {"name": {"type": ["string", "null"], "format": "uri"}}, "required": ["name"]}],
    })
    assert schema == {"type": "object", "properties": {
        "id": {"type": "string"}, "name": {"type": "string", "description": "(format: uri)"}}}
    assert clean_schema(None) == {"type": "object", "properties": {}}
    recursive = clean_schema({"type": "object", "$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}},
                              "properties": {"node": {"$ref": "#/$defs/N"}}})
    assert "$ref" not in str(recursive)
