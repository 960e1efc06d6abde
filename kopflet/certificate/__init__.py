"""The node's client certificate: TLS bootstrap and rotation (upstream pkg/kubelet/certificate, client-go
util/certificate).

Pure: ``csr`` (the CertificateSigningRequest objects and what an answer means), ``rotation`` (deadlines and
backoff), ``kubeconfig`` (reading and writing kubeconfig files), ``pem`` (PEM blocks, the store's file names,
``openssl x509`` output). I/O: ``openssl`` (keys and requests with the ``openssl`` command), ``store`` (the
``kubelet-client-*.pem`` files), ``signing`` (create a CSR, wait for its certificate), ``bootstrap``
(``--bootstrap-kubeconfig``), ``manager`` (``rotateCertificates``).
"""
