"""Create a CertificateSigningRequest and wait for its certificate, as client-go util/certificate/csr/csr.go does
(RequestCertificateWithContext, WaitForCertificate, ensureCompatible; v1.37.1), with kopflet's own apiserver client.
Every call has the client's timeout; the whole wait has the caller's.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from kopflet.certificate import csr, openssl, pem
from kopflet.client.kubeapi import CSR_PATH, KubeApiError, KubeClient

logger = logging.getLogger(__name__)

# WaitForCertificate: the list is tried again every second until it answers; so is a broken watch here.
RETRY_PAUSE = 1.0
_NO_ANSWER: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError, TimeoutError)


class CsrRequestError(csr.CsrError):
    """The request could not be created; ``status`` is the apiserver's HTTP status, None without an answer (the
    certificate manager judges the apiserver's health by it, as its updateServerError does)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


async def request_certificate(client: KubeClient, request_pem: bytes, key_pem: bytes, usages: Sequence[str], *,
                              name: str = "", signer_name: str = csr.SIGNER_NAME,
                              expiration_seconds: int | None = None,
                              openssl_command: str = openssl.OPENSSL) -> tuple[str, str]:
    """(name, uid) of the request made now, or of the same-named one an earlier run made with the same key
    (AlreadyExists, then ensureCompatible)."""
    body = csr.csr_object(request_pem, usages, name=name, signer_name=signer_name,
                          expiration_seconds=expiration_seconds)
    try:
        created = await client.create_csr(body)
    except KubeApiError as exc:
        if not (exc.already_exists and name):
            raise CsrRequestError(f"cannot create certificate signing request: {exc.message}", exc.status) from exc
        logger.info("csr for this node already exists, reusing")
        try:
            existing = await client.get_csr(name)
        except KubeApiError as get_exc:
            raise CsrRequestError(f"cannot retrieve certificate signing request: {get_exc.message}",
                                  get_exc.status) from get_exc
        except _NO_ANSWER as get_exc:
            raise CsrRequestError(f"cannot retrieve certificate signing request: {get_exc!r}") from get_exc
        problem = await incompatibility(existing, body, key_pem, openssl_command=openssl_command)
        if problem:
            raise CsrRequestError(f"retrieved csr is not compatible: {problem}") from None
        logger.info("csr for this node is still valid")
        return name, str((existing.get("metadata") or {}).get("uid", ""))
    except _NO_ANSWER as exc:
        raise CsrRequestError(f"cannot create certificate signing request: {exc!r}") from exc
    meta = created.get("metadata") or {}
    logger.info(f"Certificate signing request {meta.get('name')} created")
    return str(meta.get("name", "")), str(meta.get("uid", ""))


def _request_bytes(obj: Mapping[str, Any]) -> bytes:
    return base64.b64decode((obj.get("spec") or {}).get("request") or "")


async def incompatibility(existing: Mapping[str, Any], wanted: Mapping[str, Any], key_pem: bytes, *,
                          openssl_command: str = openssl.OPENSSL, now: float | None = None) -> str:
    """ensureCompatible: why an existing request cannot stand for the one wanted ("" when it can): another subject
    or signer, not signed by our key, or a certificate already issued that has expired."""
    try:
        theirs, ours = _request_bytes(existing), _request_bytes(wanted)
        their_subject = await openssl.request_subject(theirs, openssl=openssl_command)
        our_subject = await openssl.request_subject(ours, openssl=openssl_command)
        if their_subject != our_subject:
            return f"csr subjects differ: new: {their_subject}, orig: {our_subject}"
        their_signer = (existing.get("spec") or {}).get("signerName") or ""
        our_signer = (wanted.get("spec") or {}).get("signerName") or ""
        if their_signer and our_signer and their_signer != our_signer:
            return f'csr signerNames differ: new "{their_signer}", orig: "{our_signer}"'
        same_key = (await openssl.request_public_key_der(theirs, openssl=openssl_command)
                    == await openssl.public_key_der(key_pem, openssl=openssl_command))
        if not same_key or not await openssl.request_signature_valid(theirs, openssl=openssl_command):
            return "error validating signature new CSR against old key: it is not signed by this key"
        issued = (existing.get("status") or {}).get("certificate")
        if issued:
            moment = time.time() if now is None else now
            for info in await openssl.chain_info(base64.b64decode(issued), openssl=openssl_command):
                if moment > info.not_after:
                    return f"one of the certificates for the CSR has expired: {time.ctime(info.not_after)}"
    except (openssl.OpensslError, pem.PemError, ValueError) as exc:
        return f"unable to parse csr: {exc}"
    return ""


async def wait_for_certificate(client: KubeClient, name: str, uid: str, timeout_seconds: float) -> bytes:
    """The PEM certificate of request ``name`` once it is Approved and issued (list, then watch from the list's
    resourceVersion, listing again when the watch is too old). CsrDenied when it is Denied or Failed, CsrError when
    it is deleted or replaced or ``timeout_seconds`` pass first, each with upstream's message."""
    selector = f"metadata.name={name}"
    try:
        async with asyncio.timeout(timeout_seconds):
            while True:
                listed = await _list(client, selector)
                version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
                for item in listed.get("items") or []:
                    certificate = csr.issued_certificate("ADDED", item, uid)
                    if certificate:
                        return certificate
                if not version:  # nothing to watch from: list again in a moment
                    await asyncio.sleep(RETRY_PAUSE)
                    continue
                certificate = await _watch(client, name, uid, selector, version)
                if certificate:
                    return certificate
    except csr.CsrDenied as exc:
        raise csr.CsrDenied(csr.waiting_error(str(exc))) from None
    except csr.CsrError as exc:
        raise csr.CsrError(csr.waiting_error(str(exc))) from None
    except TimeoutError:
        raise csr.CsrError(csr.TIMED_OUT) from None


async def _watch(client: KubeClient, name: str, uid: str, selector: str, version: str) -> bytes | None:
    """Watch the request from ``version`` until it is issued (its certificate) or the watch is too old (None:
    list again); a broken watch is started again after a pause."""
    while True:
        try:
            async for event in client.watch(CSR_PATH, version, params={"fieldSelector": selector}):
                obj = event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion", "")) or version
                if event.get("type") == "BOOKMARK":
                    continue
                certificate = csr.issued_certificate(event.get("type"), obj, uid)
                if certificate:
                    return certificate
                _log_progress(obj)
        except KubeApiError as exc:
            if exc.status == 410:
                return None
            logger.info(f"Watching certificate signing request {name} failed: {exc}")
            await asyncio.sleep(RETRY_PAUSE)
        except _NO_ANSWER as exc:
            logger.info(f"Watching certificate signing request {name} failed: {exc!r}")
            await asyncio.sleep(RETRY_PAUSE)


async def _list(client: KubeClient, selector: str) -> dict[str, Any]:
    """WaitForCertificate's first step: list until the API answers, once a second."""
    while True:
        try:
            return await client.list_csrs(selector)
        except (KubeApiError, *_NO_ANSWER) as exc:
            logger.info(f"Error fetching v1 certificate signing request: {exc}")
            await asyncio.sleep(RETRY_PAUSE)


def _log_progress(obj: Mapping[str, Any]) -> None:
    name = (obj.get("metadata") or {}).get("name")
    if any(c.get("type") == "Approved" for c in (obj.get("status") or {}).get("conditions") or []):
        logger.info(f"Certificate signing request {name} is approved, waiting to be issued")
