"""The validation the Kubernetes manifests go through, offline: core objects against Kubernetes' own schemas
(kubernetes-validate, strict: an unknown field is an error), custom resources against the schemas below, written
from each published CRD's required fields and types (not copied from it)."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import SchemaNotFoundError

KUBERNETES_VERSION = "1.37.0"


def _port(number_required: bool = True) -> dict:
    port = {"type": "object", "additionalProperties": False,
            "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}}}
    return {**port, "required": ["number"]} if number_required else port


def _object(properties: dict, required: list[str] = ()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
_LABEL_VALUE = {"type": "string", "maxLength": 63, "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}
_METADATA = {"type": "object", "required": ["name"], "properties": {"name": _NAME, "namespace": _NAME}}
_DURATION = {"type": "string", "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"}


def _resource(api_version: str, kind: str, spec: dict) -> dict:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": _METADATA,
                           "spec": spec}}


# InferencePool v1 (Gateway API Inference Extension): selector.matchLabels and targetPorts are required, and so is
# endpointPickerRef in v1.0 (later releases relaxed it; a pool without one routes nowhere, so it stays required
# here); a Service reference (the default kind) needs its port.
INFERENCE_POOL = _resource("inference.networking.k8s.io/v1", "InferencePool", _object({
    "selector": _object({"matchLabels": {"type": "object", "minProperties": 1, "maxProperties": 64,
                                         "additionalProperties": _LABEL_VALUE}}, ["matchLabels"]),
    "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "items": _port()},
    "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
    "endpointPickerRef": {**_object({
        "group": {"type": "string", "maxLength": 253}, "kind": {"type": "string", "minLength": 1, "maxLength": 63},
        "name": _NAME, "port": _port(), "failureMode": {"enum": ["FailOpen", "FailClose"]}}, ["name"]),
        "if": {"anyOf": [{"not": {"required": ["kind"]}}, {"properties": {"kind": {"const": "Service"}}}]},
        "then": {"required": ["name", "port"]}},
}, ["selector", "targetPorts", "endpointPickerRef"]))

_REF = {"type": "object", "required": ["name"], "properties": {
    "group": {"type": "string"}, "kind": {"type": "string"}, "name": _NAME, "namespace": _NAME,
    "port": {"type": "integer", "minimum": 1, "maximum": 65535}, "sectionName": _NAME}}
# HTTPRoute v1 (Gateway API): parent and backend references need a name; matches, paths and timeouts are typed.
HTTP_ROUTE = _resource("gateway.networking.k8s.io/v1", "HTTPRoute", _object({
    "parentRefs": {"type": "array", "maxItems": 32, "items": _REF},
    "hostnames": {"type": "array", "items": {"type": "string"}},
    "rules": {"type": "array", "maxItems": 16, "items": _object({
        "matches": {"type": "array", "items": _object({"path": _object({
            "type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]}, "value": {"type": "string"}})})},
        "backendRefs": {"type": "array", "items": _REF},
        "timeouts": _object({"request": _DURATION, "backendRequest": _DURATION}),
    })},
}))

# PodMonitor v1 (Prometheus Operator): the selector is required; each endpoint names a pod port.
POD_MONITOR = _resource("monitoring.coreos.com/v1", "PodMonitor", {"type": "object", "required": ["selector"],
    "properties": {
        "selector": {"type": "object", "properties": {"matchLabels": {"type": "object",
                                                                      "additionalProperties": _LABEL_VALUE}}},
        "podMetricsEndpoints": {"type": "array", "items": {"type": "object", "properties": {
            "port": {"type": "string"}, "path": {"type": "string"}, "interval": _DURATION}}}}})

CUSTOM_RESOURCES = {(s["properties"]["apiVersion"]["const"], s["properties"]["kind"]["const"]): s
                    for s in (INFERENCE_POOL, HTTP_ROUTE, POD_MONITOR)}


def validate(doc: dict) -> str:
    """Raises unless `doc` is valid: a core object against Kubernetes' schema, anything else against ours (a kind
    neither knows is an error, so no custom resource goes unchecked). Returns what checked it."""
    try:
        return "kubernetes " + kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except SchemaNotFoundError:
        schema = CUSTOM_RESOURCES.get((doc.get("apiVersion"), doc.get("kind")))
        if schema is None:
            raise
        jsonschema.validate(doc, schema)
        return f"schema of {doc['kind']}"
