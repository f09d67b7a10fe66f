"""EnvGen inputs (gym_envfactory.generators.inputs): the metadata model and loader, OpenAPI → metadata on
a realistic document written for these tests (fixtures/petclinic_openapi.json), MCP → metadata against the
project's own server over stdio and streamable HTTP, authentic resources, and the search provider."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gym_envfactory.generators.inputs import (
    EnvMetadata,
    MCPImportError,
    MetadataError,
    NoSearch,
    OpenAPIError,
    SearchProvider,
    ToolMetadata,
    load_metadata,
    load_metadata_all,
    load_resources,
    mcp_to_metadata,
    openapi_to_metadata,
    to_class_name,
    to_snake_case,
)

FIXTURES = Path(__file__).parent / "fixtures"
PETCLINIC = FIXTURES / "petclinic_openapi.json"
ENV = "HotelBooking"


def _valid(schema: dict[str, Any], instance: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(instance)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if "$ref" in node else []) + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


# ------------------------------------------------------------------------------------------- metadata
GOOD: dict[str, Any] = {
    "class_name": "LibraryLoans",
    "description": "Borrow and return books.",
    "tools": [
        {"name": "get_book", "description": "Get a book.",
         "input_schema": {"type": "object", "properties": {"book_id": {"type": "string"}}, "required": ["book_id"]},
         "output_schema": {"type": "object", "properties": {"title": {"type": "string"}}}},
        {"name": "borrow_book", "description": "Borrow a book.",
         "input_schema": {"type": "object", "properties": {"book_id": {"type": "string"},
                                                            "days": {"type": "integer", "minimum": 1}},
                          "required": ["book_id"]},
         "output_schema": {"type": "object"}},
    ],
}


def _write(tmp_path: Path, data: Any, name: str = "meta.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return p


def test_load_metadata_round_trip(tmp_path: Path) -> None:
    meta = load_metadata(_write(tmp_path, GOOD))
    assert isinstance(meta, EnvMetadata) and isinstance(meta.tools[0], ToolMetadata)
    assert meta.class_name == "LibraryLoans" and [t.name for t in meta.tools] == ["get_book", "borrow_book"]
    assert meta.tool("borrow_book").input_schema["required"] == ["book_id"]
    assert meta.to_dict() == GOOD
    with pytest.raises(KeyError):
        meta.tool("nope")


def _tool(i: int, **change: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data["tools"][i].update(change)
    return data


@pytest.mark.parametrize("data, field, words", [
    ({k: v for k, v in GOOD.items() if k != "class_name"}, "class_name", "Field required"),
    ({**GOOD, "class_name": "library loans"}, "class_name", "LibraryLoans"),
    ({**GOOD, "tools": []}, "tools", "at least 1"),
    ({**GOOD, "tool": GOOD["tools"]}, "tool", "Extra inputs"),
    (_tool(1, name="borrow-book"), "tools[1] (borrow-book).name", "borrow_book"),
    (_tool(1, input_schema={"type": "array"}), "tools[1] (borrow_book).input_schema", "object"),
    (_tool(0, input_schema={"type": "object", "properties": {"x": {"type": "strin"}}}),
     "tools[0] (get_book).input_schema", "not a valid JSON Schema at properties/x/type"),
    (_tool(0, input_schema={"type": "object", "properties": {}, "required": ["book_id"]}),
     "tools[0] (get_book).input_schema", "book_id"),
    (_tool(1, output_schema={"type": 3}), "tools[1] (borrow_book).output_schema", "not a valid JSON Schema"),
    (_tool(1, name="get_book"), "(root)" , "duplicate tool name 'get_book'"),
    (_tool(0, inputs={}), "tools[0] (get_book).inputs", "Extra inputs"),
])
def test_load_metadata_errors_name_file_and_field(tmp_path: Path, data: dict, field: str, words: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(MetadataError) as info:
        load_metadata(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and words in msg
    if field != "(root)":
        assert f"{path}: {field}: " in msg and info.value.field == field
    assert info.value.file == str(path)


def test_load_metadata_file_errors(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match=r"missing\.json: cannot read"):
        load_metadata(tmp_path / "missing.json")
    with pytest.raises(MetadataError, match=r"broken\.json: not valid JSON: .* line 1"):
        load_metadata(_write(tmp_path, "{oops", "broken.json"))
    with pytest.raises(MetadataError, match="load_metadata_all"):
        load_metadata(_write(tmp_path, [GOOD], "many.json"))


def test_load_metadata_all_list_and_jsonl(tmp_path: Path) -> None:
    second = {**GOOD, "class_name": "Other"}
    assert [m.class_name for m in load_metadata_all(_write(tmp_path, [GOOD, second], "l.json"))] == \
        ["LibraryLoans", "Other"]
    jsonl = _write(tmp_path, json.dumps(GOOD) + "\n\n" + json.dumps(second) + "\n", "m.jsonl")
    assert [m.class_name for m in load_metadata_all(jsonl)] == ["LibraryLoans", "Other"]
    bad = _write(tmp_path, json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "class_name": "x y"}) + "\n", "b.jsonl")
    with pytest.raises(MetadataError, match=r"b\.jsonl:2: class_name"):
        load_metadata_all(bad)
    with pytest.raises(MetadataError, match=r"l2\.json: \[1\]\.tools"):
        load_metadata_all(_write(tmp_path, [GOOD, {**GOOD, "tools": []}], "l2.json"))


def test_names() -> None:
    assert to_snake_case("findPetsByStatus") == "find_pets_by_status"
    assert to_snake_case("get_/owners/{ownerId}/pets") == "get_owners_owner_id_pets"
    assert to_snake_case("HTTPServerStatus") == "http_server_status"
    assert to_snake_case("X-Request-Id") == "x_request_id"
    assert to_snake_case("class") == "class_" and to_snake_case("3d-view") == "_3d_view"
    assert to_class_name("Spring PetClinic REST") == "SpringPetClinicREST"
    assert to_class_name("envfactory-HotelBooking") == "EnvfactoryHotelBooking"
    assert to_class_name("3 little pigs") == "Env3LittlePigs"


# ------------------------------------------------------------------------------------------- OpenAPI
@pytest.fixture(scope="module")
def petclinic() -> EnvMetadata:
    return openapi_to_metadata(PETCLINIC)


def test_openapi_operations_become_tools(petclinic: EnvMetadata) -> None:
    assert petclinic.class_name == "SpringPetClinicREST"
    assert petclinic.description.startswith("Veterinary clinic back office")
    assert [t.name for t in petclinic.tools] == [
        "list_owners", "add_owner", "get_owner", "update_owner", "add_pet_to_owner", "add_visit_to_owner",
        "list_pets", "delete_pets_pet_id", "list_vets", "replace_vet_notes", "get_service_catalogue"]
    assert petclinic.tool("list_owners").description == (
        "Lists pet owners. Returns owners whose last name starts with the given text, a page at a time.")
    assert petclinic.tool("add_owner").description == "Adds a pet owner"
    # every schema is plain JSON Schema: no $ref left, valid under Draft 2020-12
    dumped = petclinic.to_dict()
    assert _refs(dumped) == []
    for t in petclinic.tools:
        jsonschema.Draft202012Validator.check_schema(t.input_schema)
        jsonschema.Draft202012Validator.check_schema(t.output_schema)
        assert t.input_schema["type"] == "object"
    assert "discriminator" not in json.dumps(dumped)


def test_openapi_parameters(petclinic: EnvMetadata) -> None:
    s = petclinic.tool("list_owners").input_schema
    # query and header parameters (via $ref), the cookie one left out, the header name snake_cased
    assert set(s["properties"]) == {"lastName", "limit", "offset", "x_request_id"}
    assert "required" not in s
    assert s["properties"]["limit"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 20,
                                        "description": "Page size."}
    assert "X-Request-Id" in s["properties"]["x_request_id"]["description"]
    # path-level parameters (a $ref) merged with the operation's; path parameters are required
    s = petclinic.tool("add_visit_to_owner").input_schema
    assert s["required"] == ["ownerId", "petId", "description"]
    assert s["properties"]["ownerId"]["examples"] == [7]
    assert s["properties"]["petId"]["description"] == "The ID of the pet."
    # enums kept, also through $ref and inside arrays
    s = petclinic.tool("list_pets").input_schema
    assert s["properties"]["type"]["items"]["enum"] == ["cat", "dog", "lizard", "snake", "bird", "hamster"]
    assert s["properties"]["status"] == {"type": "string", "enum": ["active", "deceased"], "default": "active"}
    assert petclinic.tool("list_vets").input_schema["properties"]["specialty"]["enum"] == [
        "radiology", "surgery", "dentistry"]
    assert _valid(petclinic.tool("list_pets").input_schema, {"type": ["cat", "dog"], "limit": 5})
    assert not _valid(petclinic.tool("list_pets").input_schema, {"type": ["unicorn"]})


def test_openapi_request_bodies(petclinic: EnvMetadata) -> None:
    # an object body ($ref'd requestBody → $ref'd schema): properties merged beside the path parameter
    s = petclinic.tool("update_owner").input_schema
    assert list(s["properties"]) == ["ownerId", "firstName", "lastName", "address", "city", "telephone",
                                      "preferredContact"]
    assert s["required"] == ["ownerId", "firstName", "lastName", "address", "city", "telephone"]
    # OpenAPI 3.0 nullable → JSON Schema null, the enum admits it too
    assert s["properties"]["preferredContact"] == {"type": ["string", "null"],
                                                   "enum": ["phone", "email", "letter", None]}
    assert s["properties"]["firstName"]["examples"] == ["George"]
    # readOnly properties (id, ownerId, visits' ids) are not arguments
    s = petclinic.tool("add_pet_to_owner").input_schema
    assert set(s["properties"]) == {"ownerId", "name", "birthDate", "type", "microchip"}
    assert s["required"] == ["ownerId", "name", "birthDate", "type"]
    assert _valid(s, {"ownerId": 1, "name": "Leo", "birthDate": "2020-09-07", "type": "cat", "microchip": None})
    assert not _valid(s, {"ownerId": 1, "name": "Leo", "birthDate": "2020-09-07"})
    # a body that is not an object sits under its own property
    s = petclinic.tool("replace_vet_notes").input_schema
    assert s["required"] == ["vetId", "body"]
    assert s["properties"]["body"] == {"type": "array", "items": {"type": "string"}, "maxItems": 20,
                                       "description": "The notes, one string each."}


def test_openapi_responses(petclinic: EnvMetadata) -> None:
    # 201 for creations, 200 for reads; allOf composition flattened; arrays of objects kept
    owner = petclinic.tool("add_owner").output_schema
    assert owner == petclinic.tool("get_owner").output_schema | {"description": "The owner was created."}
    assert set(owner["required"]) == {"firstName", "lastName", "address", "city", "telephone", "id", "pets"}
    pet = owner["properties"]["pets"]["items"]
    assert pet["type"] == "object" and pet["properties"]["visits"]["type"] == "array"
    assert pet["properties"]["visits"]["items"]["properties"]["description"]["maxLength"] == 255
    sample: dict[str, Any] = {"id": 1, "firstName": "George", "lastName": "Franklin", "address": "110 W. Liberty St.",
              "city": "Madison", "telephone": "6085551023", "preferredContact": None,
              "pets": [{"id": 1, "ownerId": 1, "name": "Leo", "birthDate": "2010-09-07", "type": "cat",
                        "visits": [{"id": 1, "petId": 1, "description": "rabies shot"}]}]}
    assert _valid(owner, sample)
    bad = copy.deepcopy(sample)
    bad["pets"][0]["type"] = "dragon"
    assert not _valid(owner, bad)
    assert petclinic.tool("add_visit_to_owner").output_schema["description"] == "The visit was recorded."
    # writeOnly properties are not part of results; arrays of objects with enums inside
    vets = petclinic.tool("list_vets").output_schema
    assert "pinCode" not in vets["items"]["properties"]
    assert vets["items"]["properties"]["specialties"]["items"]["properties"]["name"]["enum"] == [
        "radiology", "surgery", "dentistry"]
    # 204 → no JSON result; a +json media type counts as JSON
    assert petclinic.tool("update_owner").output_schema == {}
    assert petclinic.tool("delete_pets_pet_id").output_schema == {}
    assert petclinic.tool("list_owners").output_schema["properties"]["total"] == {"type": "integer", "minimum": 0}


def test_openapi_recursive_refs_are_cut_and_said(petclinic: EnvMetadata) -> None:
    node = petclinic.tool("get_service_catalogue").output_schema["items"]
    child = node["properties"]["children"]["items"]
    assert child["type"] == "object" and "properties" not in child
    assert "Recursive reference to #/components/schemas/ServiceCategory" in child["description"]
    assert _valid(petclinic.tool("get_service_catalogue").output_schema,
                  [{"name": "Dental", "children": [{"name": "Scaling", "priceCents": 9000}]}])


def test_openapi_depth_limit_and_options(tmp_path: Path) -> None:
    doc = json.loads(PETCLINIC.read_text())
    meta = openapi_to_metadata(doc, class_name="Clinic", max_ref_depth=2)
    assert meta.class_name == "Clinic"
    pets = meta.tool("get_owner").output_schema["properties"]["pets"]["items"]  # Owner → Pet (2 refs deep)
    visits = pets["properties"]["visits"]["items"]  # Visit would be the third
    assert "nesting depth limit 2" in visits["description"] and "properties" not in visits
    # YAML documents are read too
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "petclinic.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    assert openapi_to_metadata(path).to_dict() == openapi_to_metadata(PETCLINIC).to_dict()


def test_openapi_31_document() -> None:
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "tiny-kv"},
        "paths": {
            "/keys/{key}": {
                "put": {
                    "parameters": [{"name": "key", "in": "path", "required": True, "schema": {"type": "string"}},
                                   {"name": "ttl", "in": "query",
                                    "content": {"application/json": {"schema": {"type": ["integer", "null"]}}}}],
                    "requestBody": {"content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Value", "description": "The new value."}}}},
                    "responses": {"2XX": {"description": "ok", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Entry"}}}}},
                },
            },
        },
        "components": {"schemas": {
            "Value": {"type": "object", "properties": {"data": {"type": "string"}, "tags": {
                "type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}},
            "Entry": {"type": "object", "properties": {"key": {"type": "string"},
                                                       "value": {"$ref": "#/components/schemas/Value"}}},
        }},
    }
    meta = openapi_to_metadata(doc)
    (tool,) = meta.tools
    assert meta.class_name == "TinyKv" and tool.name == "put_keys_key" and tool.description == "PUT /keys/{key}"
    assert tool.input_schema["properties"]["ttl"] == {"type": ["integer", "null"]}
    assert list(tool.input_schema["properties"]) == ["key", "ttl", "data", "tags"]
    assert tool.input_schema["required"] == ["key"]  # the body is optional
    assert tool.input_schema["properties"]["tags"]["items"]["properties"] == {"k": {"type": "string"}}
    assert tool.output_schema["properties"]["value"]["properties"]["data"] == {"type": "string"}


def test_openapi_errors(tmp_path: Path) -> None:
    with pytest.raises(OpenAPIError, match="only OpenAPI 3.x .*swagger 2.0"):
        openapi_to_metadata({"swagger": "2.0", "info": {"title": "x"}, "paths": {}})
    with pytest.raises(OpenAPIError, match="no operations"):
        openapi_to_metadata({"openapi": "3.0.0", "info": {"title": "x"}, "paths": {}})
    dangling = {"openapi": "3.0.0", "info": {"title": "x"}, "paths": {"/a": {"get": {
        "responses": {"200": {"description": "ok", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Missing"}}}}}}}}}
    with pytest.raises(OpenAPIError, match="Missing.* points to nothing"):
        openapi_to_metadata(dangling)
    with pytest.raises(OpenAPIError, match=r"nope\.json: cannot read"):
        openapi_to_metadata(tmp_path / "nope.json")
    with pytest.raises(MetadataError, match="class_name"):
        openapi_to_metadata(PETCLINIC, class_name="not a name")


# ------------------------------------------------------------------------------------------- MCP
def _mcp_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ENVFACTORY_TOKEN"}


@pytest.fixture(scope="module")
def hotel_server() -> Iterator[str]:
    pytest.importorskip("mcp")
    pytest.importorskip("uvicorn")
    proc = subprocess.Popen([sys.executable, "-m", "gym_envfactory.cli", "serve", ENV, "--port", "0", "--announce"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_mcp_env(), text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(60)
    try:
        if not line or not line[0].strip():
            raise RuntimeError("the server did not announce its address")
        yield json.loads(line[0])["listening"]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]


def _assert_matches_hotel(meta: EnvMetadata) -> None:
    from gym_envfactory.environment.catalog import get_environment

    spec = get_environment(ENV)
    assert {t.name for t in meta.tools} == set(spec.tools) and len(meta.tools) == len(spec.tools)
    assert {"create", "reset", "snapshot", "score"}.isdisjoint(t.name for t in meta.tools)  # no control plane
    for t in meta.tools:
        want = spec.tools[t.name].mcp_schema()
        assert t.description == want["description"].strip()
        assert t.input_schema == want["inputSchema"]
        assert t.output_schema == want.get("outputSchema", {})
    assert any(t.output_schema for t in meta.tools)


def test_mcp_over_stdio() -> None:
    import anyio

    pytest.importorskip("mcp")
    command = f"{sys.executable} -m gym_envfactory.cli serve {ENV} --transport stdio"
    meta = anyio.run(lambda: mcp_to_metadata(command, timeout_s=120))
    _assert_matches_hotel(meta)
    assert meta.class_name.endswith("HotelBooking")
    assert meta.description.startswith("Hotel search across cities")


def test_mcp_over_http(hotel_server: str) -> None:
    import anyio

    meta = anyio.run(lambda: mcp_to_metadata(f"{hotel_server}/mcp/{ENV}", class_name="Hotels", timeout_s=60))
    _assert_matches_hotel(meta)
    assert meta.class_name == "Hotels"
    # with extra headers (e.g. a bearer token) the same listing comes back
    with_headers = anyio.run(lambda: mcp_to_metadata(f"{hotel_server}/mcp/{ENV}", class_name="Hotels",
                                                      headers={"X-Trace": "1"}))
    assert with_headers == meta
    # handshake-era servers wrap non-object results as {"result": ...}; the listing as served keeps that
    raw = anyio.run(lambda: mcp_to_metadata(f"{hotel_server}/mcp/{ENV}", unwrap_result=False))
    wrapped = [t for t in raw.tools if t.output_schema != meta.tool(t.name).output_schema]
    assert wrapped and all(list(t.output_schema["properties"]) == ["result"] for t in wrapped)


def test_unwrap_result_only_undoes_the_exact_wrapper() -> None:
    from gym_envfactory.generators.inputs import unwrap_result_schema

    inner = {"type": "array", "items": {"$ref": "#/$defs/Item"}}
    wrapped = {"type": "object", "properties": {"result": inner}, "required": ["result"],
               "$defs": {"Item": {"type": "string"}}}
    assert unwrap_result_schema(wrapped) == {**inner, "$defs": {"Item": {"type": "string"}}}
    genuine = {"type": "object", "properties": {"result": {"type": "string"}, "count": {"type": "integer"}},
               "required": ["result"]}
    assert unwrap_result_schema(genuine) == genuine
    optional = {"type": "object", "properties": {"result": {"type": "string"}}}
    assert unwrap_result_schema(optional) == optional


def test_mcp_unreachable_targets_raise() -> None:
    import anyio

    pytest.importorskip("mcp")
    with pytest.raises(MCPImportError):
        anyio.run(lambda: mcp_to_metadata("http://127.0.0.1:9/mcp/Nothing", timeout_s=10))
    with pytest.raises(MCPImportError):
        anyio.run(lambda: mcp_to_metadata(f"{sys.executable} -c pass", timeout_s=20))
    with pytest.raises(MCPImportError, match="empty"):
        anyio.run(lambda: mcp_to_metadata("   "))


# ------------------------------------------------------------------------------------------- resources
def test_load_resources_is_bounded_and_deterministic(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (docs / ".hidden").mkdir()
    (docs / "b_notes.md").write_text("# Notes\nRooms are priced per night.\n")
    (docs / "a_faq.txt").write_text("Q: refunds? A: within 24h.")
    (docs / "api" / "spec.json").write_text('{"paths": {}}')
    (docs / "api" / "extra.yaml").write_text("a: 1\n")
    (docs / "image.png").write_bytes(b"\x89PNG")
    (docs / ".hidden" / "secret.md").write_text("do not read")
    (docs / "z_big.md").write_text("x" * 5000)

    text = load_resources(docs)
    assert text == load_resources(docs)
    headers = [line for line in text.splitlines() if line.startswith("### ")]
    assert headers == ["### a_faq.txt", "### api/extra.yaml", "### api/spec.json", "### b_notes.md",
                       "### z_big.md"]
    assert "Rooms are priced per night." in text and "secret" not in text and "PNG" not in text

    small = load_resources(docs, max_chars=1200, max_file_chars=1000)
    assert len(small) <= 1200 + 200
    assert "4000 more characters cut" in small  # z_big.md cut at max_file_chars
    tiny = load_resources(docs, max_chars=300)
    assert "more files left out for size" in tiny and "z_big.md" in tiny.splitlines()[-1]
    assert load_resources(docs, suffixes=(".md",)).count("### ") == 2
    with pytest.raises(FileNotFoundError):
        load_resources(tmp_path / "missing")
    with pytest.raises(NotADirectoryError):
        load_resources(docs / "a_faq.txt")


def test_search_is_off_by_default() -> None:
    import anyio

    provider = NoSearch()
    assert isinstance(provider, SearchProvider) and provider.enabled is False
    assert anyio.run(lambda: provider.search("hotel booking API")) == []


def _fan_out_doc(depth: int, fan: int) -> dict:
    """``S0`` has ``fan`` properties of type ``S1``, which has ``fan`` of type ``S2`` ... (billion laughs)."""
    schemas: dict[str, Any] = {f"S{i}": {"type": "object", "properties": {
        f"p{j}": {"$ref": f"#/components/schemas/S{i + 1}"} for j in range(fan)}} for i in range(depth)}
    schemas[f"S{depth}"] = {"type": "string"}
    body = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}}
    return {"openapi": "3.0.3", "info": {"title": "laughs", "version": "1"},
            "paths": {"/x": {"post": {"operationId": "make_x", "requestBody": body,
                                      "responses": {"200": {"description": "ok", **body}}}}},
            "components": {"schemas": schemas}}


def _count_nodes(x: Any) -> int:
    if isinstance(x, dict):
        return 1 + sum(_count_nodes(v) for v in x.values())
    if isinstance(x, list):
        return sum(_count_nodes(v) for v in x)
    return 0


def test_openapi_ref_fan_out_is_capped_not_exponential(caplog: pytest.LogCaptureFixture) -> None:
    doc = _fan_out_doc(5, 10)  # 2.5 KB; 10^5 leaves in the input and again in the output if fully expanded
    assert len(json.dumps(doc)) < 3000
    meta = openapi_to_metadata(doc, max_schema_nodes=5000)
    (tool,) = meta.tools
    total = _count_nodes(tool.input_schema) + _count_nodes(tool.output_schema)
    assert total < 2 * 5000 + 100  # bounded by the cap (property maps are not counted as schema nodes)
    dumped = json.dumps(tool.input_schema) + json.dumps(tool.output_schema)
    assert "truncated" in dumped and len(dumped) < 1_000_000
    assert "make_x" in caplog.text and "truncated stubs" in caplog.text
    # the stub keeps the target's type
    deep = tool.input_schema["properties"]
    while "properties" in deep.get("p9", {}):
        deep = deep["p9"]["properties"]
    assert deep["p9"]["type"] in ("object", "string") and deep["p9"].get("description")


def test_openapi_memoised_refs_expand_like_before_and_are_not_shared() -> None:
    meta = openapi_to_metadata(_fan_out_doc(3, 4))
    (tool,) = meta.tools
    leaf = tool.input_schema["properties"]["p0"]["properties"]["p1"]["properties"]["p2"]
    assert leaf == {"type": "string"}
    assert "truncated" not in json.dumps(tool.input_schema)
    assert _count_nodes(tool.input_schema) == (1 + 4 + 16) * 2 + 64  # schemas with a properties map, leaves
    a = tool.input_schema["properties"]["p0"]
    b = tool.input_schema["properties"]["p1"]
    assert a == b and a is not b and a["properties"]["p0"] is not b["properties"]["p0"]
    assert tool.output_schema["properties"]["p3"] is not tool.input_schema["properties"]["p3"]
