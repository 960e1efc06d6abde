"""podCertificate projected volume sources: a key per source, a PodCertificateRequest for it, the issued chain
(upstream pkg/kubelet/podcertificate, v1.37.1).

Pure: ``states`` (what the request says, the state machine of one source, its credential bundle, refresh, what the
files hold). I/O: ``keys`` (keys and stub PKCS#10 requests with the ``openssl`` command), ``manager`` (the requests
on the apiserver, their watch, the sources' states).
"""
