"""The GitHub fixtures in tests/fixtures/github stand alone and match their own schemas."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import pytest

from tests.support import webhooks

ROOT = Path(__file__).resolve().parents[2]
# Spelled in pieces so this file does not match itself.
OUTSIDE = ["../" + "shared", "/work/" + "shared", "REQDRIVE_" + "SHARED_DIR"]
EXAMPLE_FILES = sorted(webhooks.EXAMPLES.glob("*/*.json"))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_validates_against_its_events_schema(path: Path) -> None:
    payload = json.loads(path.read_bytes())
    schema = webhooks.validate(path.parent.name, payload)
    assert schema.startswith(f"{path.parent.name}$")  # checked against its own event's schema


def test_a_payload_that_breaks_its_schema_is_refused() -> None:
    payload = webhooks.example("issues", "labeled.payload.json")
    payload["issue"]["number"] = "one"
    with pytest.raises(Exception, match="is not of type 'integer'"):
        webhooks.validate("issues", payload)


def test_licenses_stay_beside_the_copied_data() -> None:
    fixtures = webhooks.FIXTURES
    for license_file in [
        fixtures / "webhooks" / "LICENSE",
        fixtures / "webhook-schemas" / "LICENSE",
        fixtures / "LICENSE.octokit-openapi",
        fixtures / "LICENSE.github-rest-api-description.md",
    ]:
        assert "MIT" in license_file.read_text() or "Permission is hereby granted" in (
            license_file.read_text()
        )


def test_the_cut_openapi_holds_exactly_the_listed_operations() -> None:
    document = json.loads((webhooks.FIXTURES / "openapi.json").read_text())
    listed = set()
    for line in (webhooks.FIXTURES / "operations.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            method, template = line.split(" ", 1)
            listed.add((method.lower(), template))
    cut = {
        (method, template)
        for template, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert cut == listed
    assert "@octokit/openapi@23.0.2" in document["info"]["description"]


def test_the_cut_openapi_resolves_every_reference_inside_itself() -> None:
    document = json.loads((webhooks.FIXTURES / "openapi.json").read_text())
    text = json.dumps(document)
    for ref in set(_refs(document)):
        section, name = ref.split("/")[2:]
        assert name in document["components"][section], f"{ref} missing from the cut ({len(text)})"


def test_nothing_in_the_repository_reaches_outside_it() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    offenders = []
    for name in filter(None, tracked):
        path = ROOT / name.decode()
        if not path.is_file() or path.suffix in {".json", ".patch"} or "fixtures" in path.parts:
            continue
        text = path.read_text(errors="replace")
        if any(outside in text for outside in OUTSIDE):
            offenders.append(name.decode())
    assert offenders == []


def test_cut_openapi_refuses_a_source_it_cannot_vouch_for(tmp_path: Path) -> None:
    other = tmp_path / "api.github.com.json"
    other.write_text('{"openapi": "3.0.3", "paths": {}}')
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "cut-openapi"),
            str(other),
            "--output",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "is not @octokit/openapi@23.0.2" in result.stderr
    assert not (tmp_path / "out.json").exists()


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _cut_openapi() -> Any:
    loader = SourceFileLoader("cut_openapi", str(ROOT / "scripts" / "cut-openapi"))
    spec = importlib.util.spec_from_loader("cut_openapi", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_cut_keeps_the_listed_operations_and_every_component_they_reach() -> None:
    schema = {"$ref": "#/components/schemas/a"}
    ok = {"200": {"content": {"application/json": {"schema": schema}}}}
    document = {
        "openapi": "3.0.3",
        "paths": {
            "/x/{id}": {
                "parameters": [{"$ref": "#/components/parameters/id"}],
                "get": {"responses": ok},
                "delete": {"responses": {}},
            },
            "/y": {"get": {"responses": {}}},
        },
        "components": {
            "parameters": {"id": {"name": "id", "in": "path", "schema": {"type": "string"}}},
            "schemas": {
                "a": {"properties": {"b": {"$ref": "#/components/schemas/b"}}},
                "b": {"type": "string"},
                "unused": {"type": "integer"},
            },
        },
    }
    cut = _cut_openapi().cut(document, [("get", "/x/{id}")])
    assert list(cut["paths"]) == ["/x/{id}"]
    assert set(cut["paths"]["/x/{id}"]) == {"get", "parameters"}
    assert set(cut["components"]["schemas"]) == {"a", "b"}
    assert set(cut["components"]["parameters"]) == {"id"}
    with pytest.raises(SystemExit, match="not in the source description: POST /x/"):
        _cut_openapi().cut(document, [("post", "/x/{id}")])
