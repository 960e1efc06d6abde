"""A small async client for the apiserver calls Kopf has no public API for.

Kopf owns the pod watch; the agent still needs to write ``pods/status`` from its workers, delete a
finished pod with grace 0 and a UID precondition, post events and read the ConfigMaps/Secrets a pod
references one at a time (the node identity cannot list them). It reuses the credentials Kopf logged
in with, so both speak as the same node.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

DEFAULT_TIMEOUT = 30.0
WATCH_TIMEOUT = 300  # seconds; client-go reflectors pick 5-10 minutes
WATCH_LINE_LIMIT = 4 * 1024 * 1024

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
MERGE = "application/merge-patch+json"


class KubeApiError(Exception):
    """A non-2xx answer: the HTTP status, the API's reason (NotFound, Conflict ...) and message."""

    def __init__(self, status: int, reason: str, message: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"


# What a call to the apiserver can fail with: an answer (KubeApiError) or no answer (connection reset,
# refused, timed out, e.g. while the apiserver restarts). Loops catch these and retry later.
API_ERRORS: tuple[type[BaseException], ...] = (KubeApiError, aiohttp.ClientError, OSError, TimeoutError)


@dataclasses.dataclass(frozen=True)
class Credentials:
    """What is needed to reach the apiserver; built from Kopf's ConnectionInfo."""

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    token: str | None = None
    scheme: str | None = None
    certificate_path: str | None = None
    certificate_data: bytes | None = None
    private_key_path: str | None = None
    private_key_data: bytes | None = None

    @classmethod
    def from_kopf(cls, info: Any) -> Credentials:
        def data(value: str | bytes | None) -> bytes | None:
            if value is None:
                return None
            raw = value.encode() if isinstance(value, str) else value
            # Kopf passes kubeconfig *-data fields through as base64 text.
            return raw if raw.lstrip().startswith(b"-----") else base64.b64decode(raw)

        def path(value: Any) -> str | None:
            return None if value is None else str(value)

        return cls(
            server=info.server.rstrip("/"), ca_path=path(info.ca_path), ca_data=data(info.ca_data),
            insecure=bool(info.insecure), token=info.token, scheme=info.scheme,
            certificate_path=path(info.certificate_path), certificate_data=data(info.certificate_data),
            private_key_path=path(info.private_key_path), private_key_data=data(info.private_key_data),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """TLS with the cluster CA and the node's client certificate, read from its files now (at start, and again
        by `KubeClient.renew_connections` when the certificate was rotated). Blocking."""
        ctx = ssl.create_default_context(cafile=self.ca_path,
                                         cadata=self.ca_data.decode() if self.ca_data else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.certificate_path or self.certificate_data:
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = self.certificate_path, self.private_key_path
                if self.certificate_data:
                    cert = f"{tmp}/tls.crt"
                    with open(cert, "wb") as f:
                        f.write(self.certificate_data)
                if self.private_key_data:
                    key = f"{tmp}/tls.key"
                    with open(key, "wb") as f:
                        f.write(self.private_key_data)
                ctx.load_cert_chain(cert, key)  # type: ignore[arg-type]
        return ctx


class KubeClient:
    """One aiohttp session to the apiserver; every request has a timeout."""

    def __init__(self, credentials: Credentials, *, timeout: float = DEFAULT_TIMEOUT,
                 user_agent: str = "kopflet") -> None:
        self.credentials, self.timeout = credentials, timeout
        headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if credentials.token:
            headers["Authorization"] = f"{credentials.scheme or 'Bearer'} {credentials.token}"
        self._headers = headers
        self._session: aiohttp.ClientSession | None = None
        self._watches: aiohttp.ClientSession | None = None
        """Watches' own pool, unbounded: a watch holds its HTTP/1.1 connection for minutes (client-go multiplexes
        them over one HTTP/2 connection), and one per object pods reference must never take the requests' places."""

    async def open(self) -> None:
        if self._session is None:
            context = self.credentials.ssl_context()
            self._session, self._watches = self._new_session(context), self._new_session(context, limit=0)

    def _new_session(self, context: ssl.SSLContext, limit: int = 32) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(ssl=context, limit=limit)
        # read_bufsize: a watch event is one JSON line, and aiohttp refuses lines longer than its buffer.
        return aiohttp.ClientSession(connector=connector, headers=self._headers,
                                     timeout=aiohttp.ClientTimeout(total=self.timeout), read_bufsize=WATCH_LINE_LIMIT)

    async def renew_connections(self) -> None:
        """The client certificate's files were rotated: new connections present the new pair and the open ones are
        closed (their requests fail and are retried), as the kubelet's rotating transport closes every connection
        when its certificate changes (pkg/kubelet/certificate/transport.go), so no kept-alive connection goes on
        with a certificate about to expire. Nothing happens to a client not open."""
        old = self._session
        if old is None:
            return
        context = await asyncio.to_thread(self.credentials.ssl_context)
        if self._session is not old:  # closed, or renewed by another call, meanwhile
            return
        old_watches = self._watches
        self._session, self._watches = self._new_session(context), self._new_session(context, limit=0)
        await old.close()
        if old_watches is not None:
            await old_watches.close()

    async def close(self) -> None:
        session, watches, self._session, self._watches = self._session, self._watches, None, None
        if session is not None:
            await session.close()
        if watches is not None:
            await watches.close()

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                      params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The one choke point: non-2xx answers become KubeApiError with the API's own reason."""
        if self._session is None:
            await self.open()
        assert self._session is not None
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self._session.request(method, f"{self.credentials.server}{path}", data=data,
                                         headers=headers, params=params) as resp:
            text = await resp.text()
            try:
                payload = json.loads(text) if text else {}
            except ValueError:
                payload = {"message": text}
            if resp.status >= 400:
                raise KubeApiError(resp.status, str(payload.get("reason", "")), str(payload.get("message", text)),
                                   method, path)
            return payload if isinstance(payload, dict) else {}

    async def get_text(self, path: str, *, params: Mapping[str, str] | None = None) -> str:
        """GET an answer that is not an API object (a node proxy's text, as ``kubectl get --raw``); non-2xx answers
        become KubeApiError with the API Status' reason and message, or the body as it came."""
        if self._session is None:
            await self.open()
        assert self._session is not None
        async with self._session.get(f"{self.credentials.server}{path}", params=params,
                                     headers={"Accept": "text/plain, */*"}) as resp:
            text = await resp.text()
            if resp.status >= 400:
                try:
                    status = json.loads(text)
                except ValueError:
                    status = None
                if isinstance(status, dict) and status.get("kind") == "Status":
                    raise KubeApiError(resp.status, str(status.get("reason", "")),
                                       str(status.get("message", text)), "GET", path)
                raise KubeApiError(resp.status, "", text.strip(), "GET", path)
            return text

    async def watch(self, path: str, resource_version: str, *, timeout_seconds: int = WATCH_TIMEOUT,
                    params: Mapping[str, str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch request, until the server ends it after `timeout_seconds`.

        An ERROR event (410 Gone when `resource_version` is too old) is raised as KubeApiError, so the
        caller lists again, as client-go's reflector does."""
        if self._watches is None:
            await self.open()
        assert self._watches is not None
        query = {**(params or {}), "watch": "1", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        timeout = aiohttp.ClientTimeout(total=timeout_seconds + self.timeout, sock_connect=self.timeout)
        async with self._watches.get(f"{self.credentials.server}{path}", params=query, timeout=timeout) as resp:
            if resp.status >= 400:
                text = await resp.text()
                raise KubeApiError(resp.status, "", text, "WATCH", path)
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise KubeApiError(int(status.get("code") or 500), str(status.get("reason", "")),
                                       str(status.get("message", "")), "WATCH", path)
                yield event

    # ---------------------------------------------------------------------------------------------- pods

    async def list_pods(self, field_selector: str) -> list[dict[str, Any]]:
        payload = await self.request("GET", "/api/v1/pods", params={"fieldSelector": field_selector})
        return list(payload.get("items", []))

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        """GET an object; None when it does not exist."""
        try:
            return await self.request("GET", path)
        except KubeApiError as e:
            if e.not_found:
                return None
            raise

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_or_none(f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}")

    async def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Strategic merge on ``pods/status``: lists merge by key, so conditions others own survive."""
        return await self.request("PATCH", f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}/status",
                                  body=patch, content_type=STRATEGIC_MERGE)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """The final delete after the terminal status: grace 0 and a UID precondition, as the kubelet's
        status manager does, so a new pod with the same name is never deleted by mistake."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid}}
        try:
            await self.request("DELETE", f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}", body=body)
        except KubeApiError as e:
            if e.not_found or e.conflict:
                return False
            raise
        return True

    # --------------------------------------------------------------------------- objects pods reference

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_or_none(f"/api/v1/namespaces/{q(namespace)}/configmaps/{q(name)}")

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_or_none(f"/api/v1/namespaces/{q(namespace)}/secrets/{q(name)}")

    # ------------------------------------------------------------------------- certificate signing requests

    async def create_csr(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", CSR_PATH, body=body)

    async def get_csr(self, name: str) -> dict[str, Any]:
        return await self.request("GET", f"{CSR_PATH}/{q(name)}")

    async def list_csrs(self, field_selector: str) -> dict[str, Any]:
        """The list object (its ``items`` and ``metadata.resourceVersion``, to watch from)."""
        return await self.request("GET", CSR_PATH, params={"fieldSelector": field_selector})

    async def healthz(self) -> None:
        """GET /healthz; KubeApiError or a connection error when the apiserver is not healthy."""
        await self.request("GET", "/healthz")

    # -------------------------------------------------------------------------------------------- events

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", f"/api/v1/namespaces/{q(namespace)}/events", body=event)

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", f"/api/v1/namespaces/{q(namespace)}/events/{q(name)}",
                                  body=patch, content_type=STRATEGIC_MERGE)


def config_map_bytes(config_map: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap object's ``data`` and ``binaryData`` as bytes (binascii.Error when binaryData is not base64)."""
    data = {k: v.encode() for k, v in (config_map.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (config_map.get("binaryData") or {}).items()})
    return data


def secret_bytes(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """A Secret object's ``data``, decoded from base64 (binascii.Error or TypeError when it is not base64)."""
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def q(segment: str) -> str:
    return quote(segment, safe="")
