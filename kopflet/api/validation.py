"""
Names, label keys and label values as apimachinery checks them (k8s.io/apimachinery/pkg/util/validation).

Pure: no I/O. The one home of these rules: the pod spec parser, the env's downward API subscripts, the sandbox's
hostname, node affinity and the node labels of the configuration all ask here.

- `is_dns1123_label` / `is_dns1123_subdomain`: `IsDNS1123Label` / `IsDNS1123Subdomain` as verdicts;
  `dns1123_label_errors` / `dns1123_subdomain_errors` with upstream's messages.
- `is_qualified_name`: `IsQualifiedName` (``[prefix/]name``, the prefix a DNS-1123 subdomain);
  `is_qualified_name_part` is its name part alone.
- `is_label_value`: `IsValidLabelValue` (empty, or a qualified name part).

The patterns are anchored with ``^...$`` and applied with ``match``.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = 63  # a label value's too (LabelValueMaxLength)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
"""The name part of a qualified name, and the form of a non-empty label value."""

_DNS1123_LABEL_MESSAGE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                          "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                          "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _errors(value: str, pattern: re.Pattern[str], max_length: int, message: str) -> list[str]:
    errors = []
    if len(value) > max_length:
        errors.append(f"must be no more than {max_length} characters")
    if not pattern.match(value):
        errors.append(message)
    return errors


def dns1123_label_errors(value: str) -> list[str]:
    """Upstream `IsDNS1123Label`: its messages, none when `value` is a valid label."""
    return _errors(value, DNS1123_LABEL, DNS1123_LABEL_MAX_LENGTH, _DNS1123_LABEL_MESSAGE)


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Upstream `IsDNS1123Subdomain`: its messages, none when `value` is a valid subdomain."""
    return _errors(value, DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MAX_LENGTH, _DNS1123_SUBDOMAIN_MESSAGE)


def is_dns1123_label(value: str) -> bool:
    """A lowercase RFC 1123 label of at most 63 characters."""
    return len(value) <= DNS1123_LABEL_MAX_LENGTH and DNS1123_LABEL.match(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """A lowercase RFC 1123 subdomain of at most 253 characters."""
    return len(value) <= DNS1123_SUBDOMAIN_MAX_LENGTH and DNS1123_SUBDOMAIN.match(value) is not None


def is_qualified_name_part(value: str) -> bool:
    """The name part of a qualified name: 1 to 63 of ``[A-Za-z0-9-_.]``, alphanumeric at both ends."""
    return 0 < len(value) <= QUALIFIED_NAME_MAX_LENGTH and QUALIFIED_NAME.match(value) is not None


def is_qualified_name(value: str) -> bool:
    """Upstream `IsQualifiedName`: ``[prefix/]name``, the prefix a DNS-1123 subdomain (split at the last ``/``)."""
    prefix, slash, name = value.rpartition("/")
    return (not slash or is_dns1123_subdomain(prefix)) and is_qualified_name_part(name)


def is_label_value(value: str) -> bool:
    """Upstream `IsValidLabelValue`: empty, or up to 63 characters of the qualified name part's form."""
    return value == "" or is_qualified_name_part(value)
