"""The client certificate's files: ``<cert-dir>/kubelet-client-<timestamp>.pem`` (certificates, then the key) and
the ``kubelet-client-current.pem`` symlink to the one in use, as client-go util/certificate/certificate_store.go
keeps them (v1.37.1). A new pair is written and synced before ``kubelet-client-updated.pem`` is pointed at it and
renamed over ``current``, so a crash leaves either pair selected, never half of one; ``recover`` finishes a swap
a crash interrupted.

Blocking (files): the methods are called in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import ssl
from collections.abc import Callable
from pathlib import Path

from kopflet.certificate import pem


class StoreError(Exception):
    """The store's files are not as they must be (a regular file where the symlink goes, a pair that does not
    load); the message is upstream's."""


class NoCertKeyError(StoreError):
    """No pair at any of the places the store looks."""


@dataclasses.dataclass(frozen=True)
class Pair:
    """A certificate (chain) and its key as the store found them: where they are and what they hold."""

    cert_path: str
    key_path: str
    certificate_pem: bytes
    key_pem: bytes


def load_pair(cert_path: str, key_path: str) -> Pair:
    """The pair at these paths, checked the way tls.LoadX509KeyPair checks it (the key is the certificate's)."""
    with open(cert_path, "rb") as f:
        certificate_pem = f.read()
    with open(key_path, "rb") as f:
        key_pem = f.read()
    try:
        pem.certificates(certificate_pem)
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_path, key_path)
    except (pem.PemError, ssl.SSLError) as exc:
        raise StoreError(f"could not convert data from {cert_path!r} into cert/key pair: {exc}") from exc
    return Pair(cert_path, key_path, certificate_pem, key_pem)


class FileStore:
    """NewFileStore("kubelet-client", certDir, certDir, certFile, keyFile)."""

    def __init__(self, cert_directory: str, *, prefix: str = pem.CLIENT_PAIR_PREFIX, key_directory: str = "",
                 cert_file: str = "", key_file: str = "",
                 now: Callable[[], datetime.datetime] = datetime.datetime.now) -> None:
        self.cert_directory, self.prefix = cert_directory, prefix
        self.key_directory = key_directory or cert_directory
        self.cert_file, self.key_file, self._now = cert_file, key_file, now

    @property
    def current_path(self) -> str:
        """``<cert-dir>/kubelet-client-current.pem``: what a bootstrapped kubeconfig names."""
        return os.path.join(self.cert_directory, pem.pair_filename(self.prefix, pem.CURRENT))

    @property
    def _updated_path(self) -> str:
        return os.path.join(self.cert_directory, pem.pair_filename(self.prefix, pem.UPDATED))

    def recover(self) -> None:
        """A swap cut short (``updated`` symlink, no ``current``) is finished; a regular file as ``updated`` is an
        error (fileStore.recover, run when the store is made)."""
        if os.path.exists(self.current_path):
            return
        if not os.path.lexists(self._updated_path):
            return
        if not os.path.islink(self._updated_path):
            raise StoreError(f"expected {self._updated_path!r} to be a symlink but it is a file")
        os.rename(self._updated_path, self.current_path)

    def current(self) -> Pair:
        """The selected pair: ``current``'s target; else the kubeconfig's certificate and key files; else
        ``<prefix>.crt`` and ``<prefix>.key`` in the directories. NoCertKeyError when none is there."""
        if os.path.exists(self.current_path):
            return load_pair(self.current_path, self.current_path)
        if self.cert_file and self.key_file and os.path.exists(self.cert_file) and os.path.exists(self.key_file):
            return load_pair(self.cert_file, self.key_file)
        cert = os.path.join(self.cert_directory, self.prefix + pem.CERT_EXTENSION)
        key = os.path.join(self.key_directory, self.prefix + pem.KEY_EXTENSION)
        if os.path.exists(cert) and os.path.exists(key):
            return load_pair(cert, key)
        raise NoCertKeyError(f"no cert/key files read at {self.current_path!r}, ({self.cert_file!r}, "
                             f"{self.key_file!r}) or ({self.cert_directory!r}, {self.key_directory!r})")

    def update(self, certificate_pem: bytes, key_pem: bytes) -> Pair:
        """Store a new pair as ``<prefix>-<local time>.pem`` (0600) and select it (fileStore.Update)."""
        text = pem.pair_file(certificate_pem, key_pem)  # PemError: invalid certificate or key data
        directory = Path(self.cert_directory)
        directory.mkdir(mode=pem.DIRECTORY_MODE, parents=True, exist_ok=True)
        path = str(directory / pem.pair_filename(self.prefix, pem.timestamp(self._now())))
        fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, pem.PAIR_FILE_MODE)
        try:
            os.write(fd, text.encode("utf-8", "surrogateescape"))
            os.fsync(fd)
        finally:
            os.close(fd)
        pair = load_pair(path, path)
        self._update_symlink(path)
        return Pair(self.current_path, self.current_path, pair.certificate_pem, pair.key_pem)

    def _update_symlink(self, filename: str) -> None:
        """updateSymlink: ``updated`` -> the new file, then renamed over ``current``; a regular file in either
        place is an error, never overwritten."""
        current_exists = os.path.lexists(self.current_path)
        if current_exists and not os.path.islink(self.current_path):
            raise StoreError(f"expected {self.current_path!r} to be a symlink but it is a file")
        if os.path.lexists(self._updated_path):
            if not os.path.islink(self._updated_path):
                raise StoreError(f"expected {self._updated_path!r} to be a symlink but it is a file")
            os.remove(self._updated_path)
        if not os.path.exists(filename):
            raise StoreError(f"file {filename!r} does not exist so it can not be used as the currently selected "
                             f"cert/key")
        os.symlink(os.path.abspath(filename), self._updated_path)
        if current_exists:
            os.remove(self.current_path)
        os.rename(self._updated_path, self.current_path)
