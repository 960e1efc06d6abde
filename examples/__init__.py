"""Examples of kopflet's policy hooks (docs/extending.md): load one with ``kopflet --hooks examples.<name>`` from a
checkout on ``PYTHONPATH``, or copy the file and give its path: ``--hooks /etc/kopflet/<name>.py``."""
