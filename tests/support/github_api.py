"""Requests to GitHub's API checked against GitHub's OpenAPI description, for every test.

`check_request(method, url, body)` matches a request to one operation of
tests/fixtures/github/openapi.json (cut by scripts/cut-openapi for the operations in
operations.txt), then validates its path and query parameters and its JSON body against that
operation's schemas; it raises AssertionError naming the operation and what is wrong.
`validated_responses()` (the `github_responses` fixture) is a `responses.RequestsMock` whose
every call is checked this way when it closes. `check_response(method, url, status, body)`
checks a stand-in's answer the same way: a status the operation documents, and a JSON body
matching that status's schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import graphql
import jsonschema
import responses
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "github"
DESCRIPTION = FIXTURES / "openapi.json"
OPERATIONS = FIXTURES / "operations.txt"
# GitHub's public GraphQL schema (SDL, @octokit/graphql-schema 15.26.1, MIT): every GraphQL
# document reqdrive sends must validate against it (fields, arguments, variable types).
GRAPHQL_SCHEMA = FIXTURES / "graphql" / "schema.graphql"
DOCUMENT_URI = "urn:reqdrive:github-openapi"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# GitHub Enterprise Server serves the same API under /api/v3 and GraphQL at /api/graphql.
ENTERPRISE_PREFIX = "/api/v3"
GRAPHQL_PATHS = ("/graphql", "/api/graphql")
CHECK_RUN_WRITES = {
    ("post", "/repos/{owner}/{repo}/check-runs"),
    ("patch", "/repos/{owner}/{repo}/check-runs/{check_run_id}"),
}


@dataclass(frozen=True)
class Operation:
    """One operation of the description: how to recognise its URL and where its schemas are."""

    method: str
    template: str
    pattern: re.Pattern[str]
    pointer: str  # JSON pointer of the operation object inside the document

    @property
    def name(self) -> str:
        return (
            f"{self.method.upper()} {self.template} ({_document_at(self.pointer)['operationId']})"
        )


def check_request(method: str, url: str, body: bytes | str | Any | None) -> str:
    """Raise AssertionError unless this request is one GitHub's description allows; return
    the operation it was checked against ("POST /repos/{owner}/{repo}/...", or "graphql").

    `url` is a full URL or a path (with its query); `body` the raw bytes or text sent, or the
    JSON value already decoded; None or empty for no body.
    """
    split = urlsplit(url)
    path, query = split.path, parse_qs(split.query, keep_blank_values=True)
    value = _decoded(method, path, body)
    if method.upper() == "POST" and path in GRAPHQL_PATHS:
        _check_graphql(value)
        return "graphql"
    operation = _operation(method.lower(), path.removeprefix(ENTERPRISE_PREFIX))
    match = operation.pattern.fullmatch(path.removeprefix(ENTERPRISE_PREFIX))
    assert match is not None
    _check_parameters(operation, {k: unquote(v) for k, v in match.groupdict().items()}, query)
    _check_body(operation, value)
    return f"{operation.method.upper()} {operation.template}"


def check_response(method: str, url: str, status: int, body: bytes | str | Any | None) -> None:
    """Raise AssertionError unless GitHub documents this answer to this request."""
    path = urlsplit(url).path
    if method.upper() == "POST" and path in GRAPHQL_PATHS:
        return  # GraphQL answers are shaped by the query, not by the REST description
    operation = _operation(method.lower(), path.removeprefix(ENTERPRISE_PREFIX))
    responses_pointer = operation.pointer + "/responses"
    documented = _document_at(responses_pointer)
    key = str(status) if str(status) in documented else "default"
    assert key in documented, (
        f"{operation.name}: GitHub does not answer {status} (documented: {sorted(documented)})"
    )
    pointer = f"{responses_pointer}/{key}"
    response = _document_at(pointer)
    if "$ref" in response:
        pointer = response["$ref"].removeprefix("#")
        response = _document_at(pointer)
    value = _decoded(method, path, body)
    content = response.get("content", {})
    if "application/json" not in content:
        assert value is None, f"{operation.name}: a {status} answer has no body, got {value!r:.80}"
        return
    assert value is not None, f"{operation.name}: a {status} answer has a JSON body"
    schema_pointer = f"{pointer}/content/{_escape('application/json')}/schema"
    _validate(operation, f"{status} answer", value, schema_pointer)


@contextmanager
def validated_responses(**kwargs: Any) -> Iterator[responses.RequestsMock]:
    """A `responses.RequestsMock` that checks every request it saw when the block ends."""
    kwargs.setdefault("assert_all_requests_are_fired", False)
    with responses.RequestsMock(**kwargs) as rsps:
        yield rsps
        check_calls(rsps.calls)


def check_calls(calls: Any) -> None:
    """Check each recorded `responses` call; one AssertionError lists every bad request."""
    problems = []
    for call in calls:
        request = call.request
        try:
            check_request(request.method or "", request.url or "", request.body)
        except AssertionError as error:
            problems.append(str(error))
    assert not problems, "requests GitHub would refuse:\n" + "\n".join(problems)


def _decoded(method: str, path: str, body: bytes | str | Any | None) -> Any:
    if isinstance(body, bytes | bytearray):
        body = body.decode()
    if body is None or body == "":
        return None
    if not isinstance(body, str):
        return body
    try:
        return json.loads(body)
    except ValueError as error:
        raise AssertionError(f"{method.upper()} {path}: the body is not JSON ({error})") from None


def _check_graphql(value: Any) -> None:
    where = "POST /graphql"
    assert isinstance(value, dict), f"{where}: the body must be a JSON object, got {value!r:.80}"
    assert isinstance(value.get("query"), str), f"{where}: 'query' must be a string"
    variables = value.get("variables", {})
    assert isinstance(variables, dict), f"{where}: 'variables' must be an object"
    extra = set(value) - {"query", "variables"}
    assert not extra, f"{where}: unexpected keys {sorted(extra)}"
    try:
        document = graphql.parse(value["query"])
    except graphql.GraphQLError as error:
        raise AssertionError(f"{where}: the query does not parse: {error.message}") from None
    errors = graphql.validate(_graphql_schema(), document)
    assert not errors, f"{where}: GitHub's schema refuses it: " + "; ".join(
        e.message for e in errors
    )


@cache
def _graphql_schema() -> graphql.GraphQLSchema:
    # GitHub's SDL defines two EnterpriseOwnerInfo fields twice and deprecates fields its
    # interfaces do not; GitHub serves it as it is, so the schema itself is taken as valid
    # (the documents sent are still validated in full against it).
    sdl = GRAPHQL_SCHEMA.read_text()
    return graphql.build_schema(sdl, assume_valid_sdl=True, assume_valid=True)


def _operation(method: str, path: str) -> Operation:
    candidates = [op for op in _operations() if op.pattern.fullmatch(path)]
    same_method = [op for op in candidates if op.method == method]
    if not same_method:
        others = sorted({f"{op.method.upper()} {op.template}" for op in candidates})
        known = f" (the description has {', '.join(others)})" if others else ""
        raise AssertionError(
            f"{method.upper()} {path} matches no operation in {DESCRIPTION.name}{known}: if "
            f"reqdrive calls it, add it to {OPERATIONS.relative_to(FIXTURES.parents[2])} and "
            "re-run scripts/cut-openapi"
        )
    # /commits/{ref} also matches .../commits/x/check-runs (ref may hold slashes): the
    # template with more fixed text is the specific one.
    return max(same_method, key=lambda op: len(re.sub(r"\{[^}]+\}", "", op.template)))


def _check_parameters(
    operation: Operation, path_values: dict[str, str], query: dict[str, list[str]]
) -> None:
    declared = _parameters(operation)
    for (name, where), pointer in declared.items():
        parameter = _document_at(pointer)
        if where == "path":
            raw: list[str] | None = [path_values[name]]
        elif where == "query":
            raw = query.get(name)
        else:
            continue  # headers are the client library's business
        if raw is None:
            assert not parameter.get("required"), (
                f"{operation.name}: the required {where} parameter {name!r} is missing"
            )
            continue
        schema_pointer = pointer + "/schema"
        value = _coerced(raw, _resolved(_document_at(schema_pointer)))
        _validate(operation, f"{where} parameter {name!r}", value, schema_pointer)
    unknown = sorted(set(query) - {name for name, where in declared if where == "query"})
    assert not unknown, f"{operation.name}: unknown query parameters {unknown}"


def _check_body(operation: Operation, value: Any) -> None:
    spec = _document_at(operation.pointer)
    if "requestBody" not in spec:
        assert value in (None, {}), f"{operation.name}: takes no body, got {value!r:.80}"
        return
    body_pointer = operation.pointer + "/requestBody"
    request_body = _document_at(body_pointer)
    if "$ref" in request_body:
        body_pointer = request_body["$ref"].removeprefix("#")
        request_body = _document_at(body_pointer)
    if value is None:
        assert not request_body.get("required"), f"{operation.name}: the JSON body is missing"
        return
    assert "application/json" in request_body["content"], (
        f"{operation.name}: GitHub takes {sorted(request_body['content'])}, not JSON"
    )
    if (operation.method, operation.template) in CHECK_RUN_WRITES and isinstance(value, dict):
        # GitHub's rule, which octokit's hand-written create schema lost (checked first: the
        # update schema's anyOf says the same thing less clearly).
        finished = value.get("status") == "completed" or "completed_at" in value
        assert not finished or "conclusion" in value, (
            f"{operation.name}: a check run with status 'completed' or a 'completed_at' needs "
            "a 'conclusion'"
        )
    schema_pointer = body_pointer + "/content/" + _escape("application/json") + "/schema"
    _validate(operation, "body", value, schema_pointer)


def _validate(operation: Operation, what: str, value: Any, schema_pointer: str) -> None:
    schema = {"$ref": f"{DOCUMENT_URI}#{schema_pointer}"}
    validator = jsonschema.Draft4Validator(schema, registry=_registry())
    error = best_match(validator.iter_errors(value))
    if error is not None:
        at = "".join(f"[{part!r}]" for part in error.absolute_path)
        raise AssertionError(f"{operation.name}: {what}{at}: {error.message}")


def _coerced(raw: list[str], schema: dict[str, Any]) -> Any:
    """A query or path string as the type its schema declares (strings stay strings)."""
    kind = schema.get("type")
    if kind == "array":
        items = _resolved(schema.get("items", {}))
        parts = raw if len(raw) > 1 else raw[0].split(",")
        return [_coerced([part], items) for part in parts]
    text = raw[-1]
    if kind == "integer" and re.fullmatch(r"-?\d+", text):
        return int(text)
    if kind == "number" and re.fullmatch(r"-?\d+(\.\d+)?", text):
        return float(text)
    if kind == "boolean" and text in ("true", "false"):
        return text == "true"
    return text  # the schema check then says what type it wanted


def _parameters(operation: Operation) -> dict[tuple[str, str], str]:
    """(name, in) → JSON pointer of the parameter object, path-item level first."""
    found = {}
    item_pointer = operation.pointer.rsplit("/", 1)[0]
    for owner in (item_pointer, operation.pointer):
        for index, parameter in enumerate(_document_at(owner).get("parameters", [])):
            pointer = f"{owner}/parameters/{index}"
            if "$ref" in parameter:
                pointer = parameter["$ref"].removeprefix("#")
                parameter = _document_at(pointer)
            found[parameter["name"], parameter["in"]] = pointer
    return found


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = _document_at(schema["$ref"].removeprefix("#"))
    return schema


@cache
def _operations() -> tuple[Operation, ...]:
    document = _document()
    found = []
    for template, item in document["paths"].items():
        for method in METHODS:
            if method not in item:
                continue
            pointer = f"/paths/{_escape(template)}/{method}"
            operation = Operation(method, template, re.compile("^$"), pointer)
            multi = {
                name
                for (name, where), at in _parameters(operation).items()
                if where == "path" and _document_at(at).get("x-multi-segment")
            }
            found.append(Operation(method, template, _pattern(template, multi), pointer))
    return tuple(found)


def _pattern(template: str, multi_segment: set[str]) -> re.Pattern[str]:
    """A regex for a path template: {name} is one segment, or several if GitHub says so."""

    def group(match: re.Match[str]) -> str:
        name = match[1]
        return f"(?P<{name}>{'.+' if name in multi_segment else '[^/]+'})"

    return re.compile(re.sub(r"\\\{(\w+)\\\}", group, re.escape(template)))


@cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = with_nullable(json.loads(DESCRIPTION.read_text()))
    return document


@cache
def _registry() -> Registry:
    resource = Resource.from_contents(_document(), default_specification=DRAFT4)
    return Registry().with_resources([(DOCUMENT_URI, resource)])  # typed; with_resource is not


def _document_at(pointer: str) -> Any:
    node: Any = _document()
    for part in pointer.lstrip("/").split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def with_nullable(node: Any, *, names: bool = False) -> Any:
    """OAS 3.0's `nullable: true` as JSON Schema: the schema, or null.

    Written as anyOf so it also works beside a oneOf or a $ref with no `type` (GitHub accepts
    `milestone: null` on an issue, whose schema is such a oneOf). Examples are data, left as
    they are; `names`: the keys of this object are property names, not keywords.
    """
    if isinstance(node, list):
        return [with_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {
        key: value
        if key in ("example", "examples") and not names
        else with_nullable(value, names=key == "properties" and not names)
        for key, value in node.items()
    }
    if converted.get("nullable") is True:
        del converted["nullable"]
        return {"anyOf": [{"type": "null"}, converted]}
    return converted
