"""Restricted API groups: ``--http-restricted-api`` and ``--grpc-restricted-protocol``.

A restricted group answers only requests that carry a given header with a given value; the
rest get 403 over HTTP and UNAVAILABLE over gRPC. Mirrors Triton 2.51 (``restricted_features.h``,
``TritonParser::ParseRestrictedFeatureOption``, ``HTTPAPIServer::RespondIfRestricted``,
``CommonCallData::ExecutePrecondition``), checked against tritonserver 2.51 on this machine:

- the flag is ``<group>[,<group>...]:<header>=<value>`` and may repeat; a group may appear in
  one flag only, and the parse errors read as Triton's;
- HTTP looks the header name up case-insensitively, takes the first of repeated headers and
  compares the value exactly; the check comes before the method check (a POST to a restricted
  ``GET`` route answers 403, not 405);
- gRPC expects the metadata key ``triton-grpc-protocol-<header>``. gRPC metadata keys are
  always lower case on the wire, so the key is matched in lower case (Triton compares it as
  given, which makes an upper-case key impossible to satisfy); the message names it as given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from workbench.errors import InvalidArgumentError

#: The groups, in Triton's order (``RESTRICTED_CATEGORY_NAMES``).
CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
#: gRPC metadata key prefix (``kRestrictedProtocolHeaderTemplate``)
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclass(frozen=True, slots=True)
class Restriction:
    """The header a restricted group needs, and its value."""

    header: str
    value: str

    def allows(self, value: bytes | str | None) -> bool:
        """Whether a request whose header has ``value`` (``None``: absent) may pass."""
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        return value == self.value

    @property
    def lookup(self) -> bytes:
        """The header's name as HTTP/1.1 requests (lower case) and gRPC metadata carry it."""
        return self.header.lower().encode("latin-1")

    @property
    def http_refusal(self) -> str:
        return f"This API is restricted, expecting header '{self.header}'"

    @property
    def grpc_refusal(self) -> str:
        return f"This protocol is restricted, expecting header '{self.header}'"


Restrictions = Mapping[str, Restriction]


def parse_restrictions(
    specs: str | Iterable[str], option: str, kind: str, header_prefix: str = ""
) -> dict[str, Restriction]:
    """``{group: Restriction}`` from flag values such as ``model-repository,trace:key=value``.

    ``option`` names the flag in messages (``http-restricted-api``), ``kind`` the group's noun
    (``api`` or ``protocol``); ``header_prefix`` is put before the header name (gRPC's).
    """
    restrictions: dict[str, Restriction] = {}
    for spec in [specs] if isinstance(specs, str) else specs:
        groups, header, value = _split(spec, option)
        for group in groups.split(","):
            if group not in CATEGORIES:
                raise InvalidArgumentError(f"unknown restricted {kind} '{group}'")
            if group in restrictions:
                raise InvalidArgumentError(
                    f"restricted {kind} '{group}' can not be specified in multiple config groups"
                )
            restrictions[group] = Restriction(header_prefix + header, value)
    return restrictions


def _split(spec: str, option: str) -> tuple[str, str, str]:
    """``<groups>:<header>=<value>`` as Triton's ``ParseGenericConfigOption`` cuts it."""
    groups, colon, rest = spec.partition(":")
    header, equals, value = rest.partition("=")
    if not (colon and equals and groups and header and value):
        raise InvalidArgumentError(
            f"--{option} option format is '<config name>:<setting>=<value>'. Got {spec}"
        )
    return groups, header, value


def http_restrictions(specs: str | Iterable[str]) -> dict[str, Restriction]:
    """``--http-restricted-api`` values as restrictions."""
    return parse_restrictions(specs, "http-restricted-api", "api")


def grpc_restrictions(specs: str | Iterable[str]) -> dict[str, Restriction]:
    """``--grpc-restricted-protocol`` values as restrictions (header ``triton-grpc-protocol-*``)."""
    return parse_restrictions(specs, "grpc-restricted-protocol", "protocol", GRPC_HEADER_PREFIX)


def is_loopback(address: str) -> bool:
    """Whether listening on ``address`` keeps the endpoint on this machine."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def exposure_warning(
    endpoint: str, address: str, restrictions: Restrictions, explicit_control: bool, uploads: bool
) -> str | None:
    """A warning when ``endpoint`` listens beyond loopback with its repository API open."""
    if is_loopback(address) or "model-repository" in restrictions:
        return None
    if not explicit_control:
        risk = "anyone who can reach it can list the repository's models"
    elif uploads:
        risk = (
            "anyone who can reach it can load and unload models, and a load with 'file:' "
            "parameters writes and runs code as this user"
        )
    else:
        risk = "anyone who can reach it can load and unload models"
    flag = "--http-restricted-api" if endpoint == "HTTP" else "--grpc-restricted-protocol"
    return (
        f"{endpoint} listens on {address} and its model-repository API is unrestricted: {risk}; "
        f"restrict it with {flag}=model-repository:<header>=<secret>"
        + ("" if not (explicit_control and uploads) else " or --allow-model-upload=false")
    )


__all__ = [
    "CATEGORIES",
    "GRPC_HEADER_PREFIX",
    "Restriction",
    "Restrictions",
    "exposure_warning",
    "grpc_restrictions",
    "http_restrictions",
    "is_loopback",
    "parse_restrictions",
]
