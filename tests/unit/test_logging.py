"""The agent's own logging: klog's verbosity on Python's levels (-v, --vmodule), the text and json formats
(component-base logs/json's shape), and the handler the kopflet command installs."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kopflet.logs import formats, setup, verbosity
from kopflet.logs.verbosity import VerbosityFilter, v

# --- V levels ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("level", "expected", "name"), [
    (0, logging.INFO, "INFO"),
    (1, 19, "V1"),
    (2, 18, "V2"),
    (3, 17, "V3"),
    (4, logging.DEBUG, "DEBUG"),  # the Kubernetes convention: V(4) is debug
    (5, 9, "V5"),
    (6, 8, "V6"),
    (13, 1, "V13"),
    (20, 1, "V13"),  # deeper ones share the last level
])
def test_v_levels(level: int, expected: int, name: str) -> None:
    assert v(level) == expected
    assert logging.getLevelName(v(level)) == name


@pytest.mark.parametrize(("levelno", "expected"), [
    (logging.CRITICAL, 0), (logging.ERROR, 0), (logging.WARNING, 0), (logging.INFO, 0),
    (19, 1), (18, 2), (17, 3),
    (16, 4), (11, 4), (logging.DEBUG, 4),  # between V(3) and DEBUG: shown with the debug lines
    (9, 5), (1, 13), (0, 13),
])
def test_verbosity_of(levelno: int, expected: int) -> None:
    assert verbosity.verbosity_of(levelno) == expected


def test_verbosity_of_inverts_v() -> None:
    assert all(verbosity.verbosity_of(v(level)) == level for level in range(verbosity.MAX_LEVEL + 1))


# --- --vmodule matching (klog's modulePat.match: literal, else Go's filepath.Match) ------------------------------

@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("workers", "workers", True),
    ("workers", "workers2", False),
    ("work", "workers", False),  # a literal is the whole name
    ("work*", "workers", True),
    ("*ers", "workers", True),
    ("w?rkers", "workers", True),
    ("w?rkers", "wrkers", False),
    ("[wx]orkers", "workers", True),
    ("[^wx]orkers", "workers", False),
    ("[^x]orkers", "workers", True),
    ("[a-z]orkers", "workers", True),
    ("[A-Z]orkers", "workers", False),
    ("\\w*", "workers", True),  # an escaped literal character
    ("prober*", "probes", False),
    ("*", "anything", True),
    ("[", "[", False),  # malformed: Go's ErrBadPattern, no match
    ("[]a]", "a", False),  # a class may not start with ]
    ("[z-a]x", "bx", False),  # a backwards range is malformed
    ("a\\", "a", False),
    ("executor.py", "executor", False),  # the name has no extension
])
def test_vmodule_patterns(pattern: str, name: str, matches: bool) -> None:
    assert verbosity.match(pattern, name) is matches


@pytest.mark.parametrize(("vmodule", "module", "expected"), [
    ((), "workers", 0),
    ((("workers", 4),), "workers", 4),
    ((("workers", 4),), "manager", 0),
    ((("work*", 2), ("workers", 5)), "workers", 2),  # the first match wins
    ((("workers", 0), ("work*", 3)), "workers", 3),  # pattern=0 items are dropped, as klog's parser drops them
])
def test_module_verbosity(vmodule: tuple[tuple[str, int], ...], module: str, expected: int) -> None:
    assert verbosity.module_verbosity(module, vmodule) == expected


@pytest.mark.parametrize(("level", "vmodule", "expected"), [
    (0, (), logging.INFO),
    (2, (), 18),
    (0, (("workers", 4),), logging.DEBUG),
    (5, (("workers", 2),), 9),
])
def test_root_level(level: int, vmodule: tuple[tuple[str, int], ...], expected: int) -> None:
    assert verbosity.root_level(level, vmodule) == expected


# --- the filter: klog's V() per record ----------------------------------------------------------------------------

def record(levelno: int, *, name: str = "kopflet.pods.workers", module: str = "workers",
           msg: str = "m", **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord(name, levelno, f"/src/kopflet/pods/{module}.py", 42, msg, (), None)
    rec.__dict__.update(extra)
    return rec


@pytest.mark.parametrize(("verbosity_", "vmodule", "levelno", "module", "shown"), [
    (0, (), logging.INFO, "workers", True),
    (0, (), logging.WARNING, "workers", True),
    (0, (), v(1), "workers", False),
    (1, (), v(1), "workers", True),
    (1, (), v(2), "workers", False),
    (2, (), v(2), "workers", True),
    (3, (), logging.DEBUG, "workers", False),
    (4, (), logging.DEBUG, "workers", True),
    (4, (), v(5), "workers", False),
    # --vmodule raises one file's verbosity; -v still holds for the others, and a lower pattern never lowers -v
    (0, (("workers", 4),), logging.DEBUG, "workers", True),
    (0, (("workers", 4),), logging.DEBUG, "manager", False),
    (0, (("workers", 4),), v(5), "workers", False),
    (3, (("workers", 1),), v(3), "workers", True),
    (0, (("work*", 2),), v(2), "workers", True),
])
def test_the_filter_is_klogs_v(verbosity_: int, vmodule: tuple[tuple[str, int], ...], levelno: int, module: str,
                               shown: bool) -> None:
    assert VerbosityFilter(verbosity_, vmodule).filter(record(levelno, module=module)) is shown


@pytest.mark.parametrize(("verbosity_", "shown"), [(0, False), (1, False), (2, True), (4, True)])
def test_kopfs_per_object_info_lines_are_v2(verbosity_: int, shown: bool) -> None:
    """Kopf's "Handler 'pod_event' succeeded." on every pod event: at upstream's SyncLoop verbosity, 2."""
    line = record(logging.INFO, name="kopf.objects", module="execution", msg="Handler 'pod_event' succeeded.")
    assert VerbosityFilter(verbosity_).filter(line) is shown
    assert (line.levelno, line.levelname) == (18, "V2")


@pytest.mark.parametrize("levelno", [logging.WARNING, logging.ERROR, logging.DEBUG])
def test_kopfs_per_object_warnings_errors_and_debug_keep_their_level(levelno: int) -> None:
    line = record(levelno, name="kopf.objects", module="execution")
    VerbosityFilter(0).filter(line)
    assert line.levelno == levelno


def test_kopfs_other_info_lines_stay_at_v0() -> None:
    line = record(logging.INFO, name="kopf.activities.startup", module="activities",
                  msg="Activity 'start_agent' succeeded.")
    assert VerbosityFilter(0).filter(line) is True and line.levelno == logging.INFO


# --- formats -----------------------------------------------------------------------------------------------------

def _exc_info() -> Any:
    try:
        raise RuntimeError("the runtime is gone")
    except RuntimeError:
        return sys.exc_info()


POD_REF = {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "default", "uid": "u-1"}


@pytest.mark.parametrize(("rec", "expected"), [
    (record(logging.INFO, msg="registered node n1"),
     {"logger": "kopflet.pods.workers", "caller": "pods/workers.py:42", "msg": "registered node n1", "v": 0}),
    (record(v(2), msg="No sandbox for pod can be found. Need to start a new one"),
     {"logger": "kopflet.pods.workers", "caller": "pods/workers.py:42",
      "msg": "No sandbox for pod can be found. Need to start a new one", "v": 2}),
    (record(logging.DEBUG, msg="d"), {"logger": "kopflet.pods.workers", "caller": "pods/workers.py:42", "msg": "d",
                                      "v": 4}),
    (record(logging.WARNING, msg="w"), {"logger": "kopflet.pods.workers", "caller": "pods/workers.py:42",
                                        "msg": "w", "v": 0}),
    # errors: no v; the exception's text under err, the traceback under stacktrace
    (record(logging.ERROR, msg="sync crashed", exc_info=None), {"logger": "kopflet.pods.workers",
                                                                 "caller": "pods/workers.py:42",
                                                                 "msg": "sync crashed"}),
    # Kopf's per-object loggers: the object as klog.KObj writes it, under its kind
    (record(logging.INFO, name="kopf.objects", module="execution", msg="Handler 'pod_event' succeeded.",
            k8s_ref=POD_REF, k8s_skip=True, settings=object()),
     {"logger": "kopf.objects", "caller": "pods/execution.py:42", "msg": "Handler 'pod_event' succeeded.", "v": 0,
      "pod": {"name": "web", "namespace": "default"}}),
    (record(logging.INFO, k8s_ref={"kind": "Node", "name": "n1"}),
     {"logger": "kopflet.pods.workers", "caller": "pods/workers.py:42", "msg": "m", "v": 0,
      "node": {"name": "n1"}}),
    # extra= key/values after v, values JSON can't hold as their text
    (record(logging.INFO, source="api", pods=["default/web"], when=object.__new__(type("T", (), {
        "__str__": lambda self: "then"}))),
     {"logger": "kopflet.pods.workers", "caller": "pods/workers.py:42", "msg": "m", "v": 0, "source": "api",
      "pods": ["default/web"], "when": "then"}),
])
def test_json_lines(rec: logging.LogRecord, expected: dict[str, Any]) -> None:
    rec.created = 1580306777.04728
    line = formats.JsonFormatter().format(rec)
    assert "\n" not in line
    body = json.loads(line)
    assert body.pop("ts") == pytest.approx(1580306777047.28)  # milliseconds, as upstream's epochMillisTimeEncoder
    assert body == expected
    assert list(body) == list(expected)  # zap's order: ts, logger, caller, msg, v, key/values


def test_json_error_with_an_exception() -> None:
    rec = record(logging.ERROR, msg="pod default/web: sync crashed, retrying in 10s")
    rec.exc_info = _exc_info()
    body = json.loads(formats.JsonFormatter().format(rec))
    assert "v" not in body
    assert body["err"] == "the runtime is gone"
    assert body["stacktrace"].startswith("Traceback") and "RuntimeError: the runtime is gone" in body["stacktrace"]
    assert list(body)[:4] == ["ts", "logger", "caller", "msg"]


def test_json_keeps_newlines_and_unicode_inside_the_line() -> None:
    line = formats.JsonFormatter().format(record(logging.INFO, msg="a\nb ü"))
    assert line.count("\n") == 0 and json.loads(line)["msg"] == "a\nb ü"


@pytest.mark.parametrize(("pathname", "expected"), [
    ("/usr/lib/python3/site-packages/kopflet/pods/workers.py", "pods/workers.py:7"),
    ("workers.py", "workers.py:7"),
    ("<string>", "<string>:7"),
])
def test_caller(pathname: str, expected: str) -> None:
    assert formats.caller(pathname, 7) == expected


def test_text_lines_are_kopfs_with_the_object_prefix() -> None:
    formatter = formats.TextFormatter()
    plain = record(v(2), msg="pod default/web: No sandbox for pod can be found. Need to start a new one")
    assert formatter.format(plain).endswith(
        "] kopflet.pods.workers [V2      ] pod default/web: No sandbox for pod can be found. Need to start a new one")
    kopfs = record(logging.WARNING, name="kopf.objects", msg="Handler failed", k8s_ref=POD_REF)
    assert formatter.format(kopfs).endswith("] kopf.objects         [WARNING ] [default/web] Handler failed")
    assert kopfs.getMessage() == "Handler failed"  # the record itself is left as it was
    cluster_scoped = record(logging.INFO, msg="x", k8s_ref={"kind": "Node", "name": "n1"})
    assert formatter.format(cluster_scoped).endswith("[INFO    ] [n1] x")


# --- the handler the kopflet command installs ------------------------------------------------------------------

@pytest.fixture
def fresh_logging() -> Iterator[None]:
    root, quiet = logging.getLogger(), logging.getLogger("asyncio")
    saved = (root.handlers[:], root.level, quiet.handlers[:], quiet.propagate)
    yield
    root.handlers[:], quiet.handlers[:] = saved[0], saved[2]
    root.setLevel(saved[1])
    quiet.propagate = saved[3]


@pytest.mark.usefixtures("fresh_logging")
def test_apply_text_at_the_default_verbosity() -> None:
    out = io.StringIO()
    setup.apply("text", 0, (), stream=out)
    log = logging.getLogger("kopflet.test_logging")
    log.info("registered node n1")
    log.log(v(2), "pod default/web: No sandbox for pod can be found. Need to start a new one")
    log.debug("debug chatter")
    logging.getLogger("kopf.objects").info("Handler 'pod_event' succeeded.", extra={"k8s_ref": POD_REF})
    logging.getLogger("kopf.objects").error("Handler 'pod_event' failed.", extra={"k8s_ref": POD_REF})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("[INFO    ] registered node n1")
    assert lines[1].endswith("[ERROR   ] [default/web] Handler 'pod_event' failed.")


@pytest.mark.usefixtures("fresh_logging")
def test_apply_json_at_v2_shows_the_per_pod_lines() -> None:
    out = io.StringIO()
    setup.apply("json", 2, (), stream=out)
    logging.getLogger("kopflet.test_logging").log(v(2), "pod default/web: sync")
    logging.getLogger("kopf.objects").info("Handler 'pod_event' succeeded.", extra={"k8s_ref": POD_REF})
    logging.getLogger("kopflet.test_logging").debug("not yet")
    bodies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(b["msg"], b["v"]) for b in bodies] == [("pod default/web: sync", 2), ("Handler 'pod_event' succeeded.", 2)]
    assert bodies[1]["pod"] == {"name": "web", "namespace": "default"}
    assert bodies[0]["caller"].startswith("unit/test_logging.py:")


@pytest.mark.usefixtures("fresh_logging")
def test_apply_vmodule_raises_one_file() -> None:
    out = io.StringIO()
    setup.apply("text", 0, (("test_logging", 4),), stream=out)
    assert logging.getLogger().level == logging.DEBUG  # low enough for the file's 4 ...
    # ... the filter keeps the other files at -v: it matches the file that logs (klog's), not the logger's name
    logging.getLogger("kopflet.test_logging").handle(record(logging.DEBUG, module="manager", msg="held back"))
    logging.getLogger("kopflet.pods.workers").debug("shown")
    assert out.getvalue().count("\n") == 1 and "shown" in out.getvalue()


@pytest.mark.usefixtures("fresh_logging")
def test_apply_replaces_the_handlers_and_quiets_asyncio_below_6() -> None:
    logging.getLogger().addHandler(logging.StreamHandler(io.StringIO()))
    first = setup.apply("text", 0, (), stream=io.StringIO())
    second = setup.apply("text", 6, (), stream=io.StringIO())
    assert logging.getLogger().handlers == [second] and first is not second
    assert logging.getLogger("asyncio").propagate is True
    setup.apply("text", 5, (), stream=io.StringIO())
    quiet = logging.getLogger("asyncio")
    assert quiet.propagate is False and [type(h) for h in quiet.handlers] == [logging.NullHandler]
