"""A renderer for the part of kustomize that deploy/kubernetes uses, for tests that have no
kustomize binary (`kubectl kustomize` agrees with it: tests/unit/test_kubernetes.py).

It follows kustomize's order — resources, then components over them, then generators,
then the namespace, images and patches — and refuses any other field, so a manifest
cannot quietly depend on something the tests do not render. It leaves out the hash
suffix of generated ConfigMaps (kustomize adds it and renames every reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
FIELDS = {"apiVersion", "kind", "resources", "components", "configMapGenerator", "namespace",
          "images", "patches"}
GENERATOR_FIELDS = {"name", "behavior", "envs", "literals", "options"}
TARGET_FIELDS = {"group", "version", "kind", "name", "labelSelector"}


def render(directory: Path, accumulated: list[Obj] | None = None) -> list[Obj]:
    """The objects `kubectl kustomize directory` prints (a Component adds to `accumulated`)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - FIELDS
    assert not unknown, f"{directory}: the test's renderer does not know {unknown}"
    assert spec["kind"] == ("Component" if accumulated is not None else "Kustomization")
    objects = list(accumulated or [])
    for entry in spec.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects += render(path)
        else:
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    for entry in spec.get("components", []):
        objects = render(directory / entry, objects)
    for generator in spec.get("configMapGenerator", []):
        generate_config_map(directory, generator, objects)
    for obj in objects:
        if "namespace" in spec:
            obj["metadata"]["namespace"] = spec["namespace"]
        for image in spec.get("images", []):
            set_image(obj, image)
    for patch in spec.get("patches", []):
        assert set(patch["target"]) <= TARGET_FIELDS, patch["target"]
        operations = yaml.safe_load(patch["patch"])
        assert isinstance(operations, list), "only inline JSON 6902 patches are rendered here"
        for obj in objects:
            if selected(obj, patch["target"]):
                for operation in operations:
                    apply_operation(obj, operation)
    return objects


def generate_config_map(directory: Path, generator: Obj, objects: list[Obj]) -> None:
    assert set(generator) <= GENERATOR_FIELDS, generator
    lines = list(generator.get("literals", []))
    for env_file in generator.get("envs", []):
        lines += (directory / env_file).read_text().splitlines()
    pairs = [line.strip().split("=", 1) for line in lines]
    data = {pair[0]: pair[1] for pair in pairs if pair[0] and not pair[0].startswith("#")}
    behavior = generator.get("behavior", "create")
    existing = [o for o in objects
                if o["kind"] == "ConfigMap" and o["metadata"]["name"] == generator["name"]]
    assert len(existing) == (0 if behavior == "create" else 1), f"{behavior} {generator['name']}"
    if behavior == "create":
        options = generator.get("options", {})
        assert set(options) <= {"labels", "annotations"}, options
        metadata = {"name": generator["name"], **options}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                        "data": data})
    else:
        existing[0]["data"] = {**(existing[0]["data"] if behavior == "merge" else {}), **data}


def set_image(obj: Obj, image: Obj) -> None:
    for container in containers(obj):
        name, tag = container["image"], "latest"
        if ":" in name.rpartition("/")[2]:  # not the port of a registry
            name, _, tag = name.rpartition(":")
        if name == image["name"]:
            container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def selected(obj: Obj, target: Obj) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    labels = obj["metadata"].get("labels", {})
    wanted = [term.split("=") for term in target.get("labelSelector", "").split(",") if term]
    return (target.get("kind", obj["kind"]) == obj["kind"]
            and target.get("group", group) == group
            and target.get("version", version) == version
            and target.get("name", obj["metadata"]["name"]) == obj["metadata"]["name"]
            and all(labels.get(key) == value for key, value in wanted))


def apply_operation(obj: Obj, operation: Obj) -> None:
    """One JSON Patch (RFC 6902) operation: add, replace or remove."""
    op, path = operation["op"], operation["path"].split("/")[1:]
    *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in path]
    for part in parents:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    assert op in {"add", "replace", "remove"}, operation
    if isinstance(obj, list):
        index = len(obj) if last == "-" else int(last)
        assert op == "add" or index < len(obj), operation["path"]
        if op != "add":
            del obj[index]
        if op != "remove":
            obj.insert(index, operation["value"])
    else:
        assert op == "add" or last in obj, operation["path"]
        if op == "remove":
            del obj[last]
        else:
            obj[last] = operation["value"]


def pod_spec(obj: Obj) -> Obj:
    return obj["spec"]["template"]["spec"] if obj["kind"] in {"Deployment", "Job"} else {}


def containers(obj: Obj) -> list[Obj]:
    spec = pod_spec(obj)
    return spec.get("initContainers", []) + spec.get("containers", [])
