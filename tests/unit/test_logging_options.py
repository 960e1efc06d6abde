"""The logging formats' options (component-base logs/api/v1 OutputRoutingOptions): splitStream and infoBufferSize as
settings: upstream's flags, the file's logging.options, the LoggingAlphaOptions and LoggingBetaOptions gates,
logsapi.Validate's errors, /configz. How the handler writes them: test_log_routing.py."""

from __future__ import annotations

from typing import Any

import pytest

from kopflet.config import configz, log_options, settings
from kopflet.config.log_options import FormatOptions, LoggingError, OutputRouting
from kopflet.config.settings import AgentConfig, ConfigError
from tests.unit.test_config import run, with_file

ALPHA = "--feature-gates=LoggingAlphaOptions=true"
SPLIT = OutputRouting(split_stream=True)
BUFFERED = OutputRouting(info_buffer_size="64Ki")

# --- logsapi.Validate ------------------------------------------------------------------------------------------


def forbidden(path: str) -> str:
    return f"{path}: Forbidden: Feature LoggingAlphaOptions is disabled"


@pytest.mark.parametrize(("log_format", "vmodule", "options", "alpha", "beta", "errors"), [
    ("text", (), FormatOptions(), False, True, []),
    ("json", (), FormatOptions(), False, True, []),
    # the alpha options: refused with LoggingAlphaOptions off, whichever format is in use (all are validated)
    ("text", (), FormatOptions(text=SPLIT), False, True, [forbidden("logging.options.text.splitStream")]),
    ("json", (), FormatOptions(text=SPLIT), False, True, [forbidden("logging.options.text.splitStream")]),
    ("json", (), FormatOptions(json=SPLIT), False, True, [forbidden("logging.options.json.splitStream")]),
    ("json", (), FormatOptions(json=BUFFERED), False, True, [forbidden("logging.options.json.infoBufferSize")]),
    # a buffer without a split stream is still an alpha option (Value() != 0), a negative one too
    ("text", (), FormatOptions(text=OutputRouting(info_buffer_size="-1")), False, True,
     [forbidden("logging.options.text.infoBufferSize")]),
    # Value() rounds up: 1m (a thousandth) is 1 byte, not zero
    ("text", (), FormatOptions(text=OutputRouting(info_buffer_size="1m")), False, True,
     [forbidden("logging.options.text.infoBufferSize")]),
    # every error, in Validate's order: text's then json's, splitStream before infoBufferSize
    ("text", (), FormatOptions(text=OutputRouting(True, "1Ki"), json=OutputRouting(True, "1Ki")), False, True,
     [forbidden("logging.options.text.splitStream"), forbidden("logging.options.text.infoBufferSize"),
      forbidden("logging.options.json.splitStream"), forbidden("logging.options.json.infoBufferSize")]),
    # with the gate on, anything goes
    ("json", (), FormatOptions(text=OutputRouting(True, "1Ki"), json=OutputRouting(True, "-5")), True, True, []),
    # the json format needs LoggingBetaOptions; text does not
    ("json", (), FormatOptions(), True, False,
     ["logging.format: Forbidden: Log format json is disabled, see LoggingBetaOptions feature"]),
    ("text", (), FormatOptions(), False, False, []),
    # format, then vmodule, then options
    ("json", (("workers", 4),), FormatOptions(json=SPLIT), False, False,
     ["logging.format: Forbidden: Log format json is disabled, see LoggingBetaOptions feature",
      "logging.vmodule: Forbidden: Only supported for text log format", forbidden("logging.options.json.splitStream")]),
])
def test_validate_is_logsapis(log_format: str, vmodule: tuple[tuple[str, int], ...], options: FormatOptions,
                              alpha: bool, beta: bool, errors: list[str]) -> None:
    assert log_options.validate(log_format, vmodule, options, alpha_options=alpha, beta_options=beta) == errors


@pytest.mark.parametrize(("text", "canonical", "value"), [
    ("0", "0", 0), ("0Ki", "0", 0), ("512", "512", 512), ("1k", "1k", 1000),
    ("1000", "1k", 1000), ("2Ki", "2Ki", 2048), ("65536", "65536", 65536), ("64Ki", "64Ki", 65536),
    ("3M", "3M", 3_000_000), ("5Mi", "5Mi", 5 * 2**20), ("6Gi", "6Gi", 6 * 2**30), ("1.5k", "1500", 1500),
    ("1.5", "1500m", 2), ("1e3", "1e3", 1000), ("-1Ki", "-1Ki", -1024),
])
def test_info_buffer_size_is_a_quantity(text: str, canonical: str, value: int) -> None:
    """resource.QuantityValue.Set, kept as Quantity.String() writes it; Value() the bytes, rounded up."""
    assert log_options.parse_info_buffer_size_flag(text) == canonical
    assert log_options.parse_info_buffer_size(text) == canonical
    assert OutputRouting(info_buffer_size=canonical).info_buffer_bytes == value


@pytest.mark.parametrize(("value", "canonical"), [(0, "0"), (65536, "65536"), (1.5, "1500m"), (-2, "-2")])
def test_info_buffer_size_in_the_file_may_be_a_number(value: Any, canonical: str) -> None:
    assert log_options.parse_info_buffer_size(value) == canonical


@pytest.mark.parametrize(("text", "message"), [
    ("lots", "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ("", "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ("1K", "unable to parse quantity's suffix"),  # upstream's help says 1K; ParseQuantity takes only k
    ("64KiB", "unable to parse quantity's suffix"),
])
def test_info_buffer_size_flag_errors_are_parse_quantitys(text: str, message: str) -> None:
    with pytest.raises(LoggingError) as caught:
        log_options.parse_info_buffer_size_flag(text)
    assert str(caught.value) == message


@pytest.mark.parametrize("value", [True, None, [], {}, "1K", "lots"])
def test_info_buffer_size_file_errors(value: Any) -> None:
    with pytest.raises(LoggingError, match=r'^expected a quantity such as "0" or "64Ki", got '):
        log_options.parse_info_buffer_size(value)


# --- the settings: flags, file, gates --------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "body", "expected"), [
    ([], "", {}),
    ([ALPHA, "--log-text-split-stream"], "", {"log_text_split_stream": True}),
    ([ALPHA, "--log-text-split-stream=false"], "", {}),
    ([ALPHA, "--log-json-split-stream=true", "--log-json-info-buffer-size", "64Ki"], "",
     {"log_json_split_stream": True, "log_json_info_buffer_size": "64Ki"}),
    ([ALPHA, "--log-text-info-buffer-size=1000"], "", {"log_text_info_buffer_size": "1k"}),
    # the last of a repeated flag wins
    ([ALPHA, "--log-json-info-buffer-size=1Ki", "--log-json-info-buffer-size=2Ki"], "",
     {"log_json_info_buffer_size": "2Ki"}),
    # the file, with the gate in the file
    ([], "featureGates: {LoggingAlphaOptions: true}\n"
         "logging: {options: {json: {splitStream: true, infoBufferSize: 1Mi}}}\n",
     {"log_json_split_stream": True, "log_json_info_buffer_size": "1Mi"}),
    # the flags override the file one field at a time (kubeletConfigFlagPrecedence re-parses them onto it)
    ([ALPHA, "--log-json-split-stream=false"], "logging: {options: {json: {splitStream: true, infoBufferSize: 1Mi}}}\n",
     {"log_json_info_buffer_size": "1Mi"}),
    ([ALPHA, "--log-json-info-buffer-size=0"], "logging: {options: {json: {splitStream: true, infoBufferSize: 1Mi}}}\n",
     {"log_json_split_stream": True}),
    # the defaults as kubeadm writes them need no gate
    ([], "logging: {options: {text: {infoBufferSize: \"0\"}, json: {infoBufferSize: \"0\", splitStream: false}}}\n",
     {}),
    (["--log-text-split-stream=false", "--log-json-info-buffer-size=0"], "", {}),
])
def test_settings(argv: list[str], body: str, expected: dict[str, Any]) -> None:
    cfg = with_file(body, *argv)
    gates = {"LoggingAlphaOptions": True} if ALPHA in argv or "LoggingAlphaOptions" in body else {}
    assert cfg == AgentConfig(node_name="node-1", feature_gates=gates, **expected)


@pytest.mark.parametrize(("argv", "body", "message"), [
    (["--log-json-split-stream"], "",
     "invalid configuration: logging.options.json.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled"),
    (["--log-text-info-buffer-size=4Ki"], "",
     "invalid configuration: logging.options.text.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is "
     "disabled"),
    (["--feature-gates=LoggingAlphaOptions=false", "--log-json-split-stream"], "",
     "invalid configuration: logging.options.json.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled"),
    # the flag's gate over the file's
    (["--feature-gates=LoggingAlphaOptions=false"], "featureGates: {LoggingAlphaOptions: true}\n"
                                                    "logging: {options: {text: {splitStream: true}}}\n",
     "invalid configuration: logging.options.text.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled"),
    # several: upstream's aggregate
    (["--log-json-split-stream", "--log-json-info-buffer-size=1Ki"], "",
     "invalid configuration: [logging.options.json.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled, "
     "logging.options.json.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is disabled]"),
    (["--feature-gates=LoggingBetaOptions=false", "--logging-format=json"], "",
     "invalid configuration: logging.format: Forbidden: Log format json is disabled, see LoggingBetaOptions feature"),
    (["--feature-gates=LoggingBetaOptions=false"],
     "logging: {format: json, vmodule: [{filePattern: a, verbosity: 1}]}\n",
     "invalid configuration: [logging.format: Forbidden: Log format json is disabled, see LoggingBetaOptions "
     "feature, logging.vmodule: Forbidden: Only supported for text log format]"),
    ([ALPHA, "--log-json-info-buffer-size=lots"], "",
     "--log-json-info-buffer-size: quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ([ALPHA, "--log-text-info-buffer-size="], "",
     "--log-text-info-buffer-size: quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ([ALPHA, "--log-text-split-stream=yes"], "", '--log-text-split-stream: expected true or false, got "yes"'),
    ([ALPHA, "--log-text-info-buffer-size"], "", "flag needs an argument: --log-text-info-buffer-size"),
])
def test_refused(argv: list[str], body: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        with_file(body, *argv)
    assert str(caught.value) == message


def test_the_gates_are_implemented_both_ways() -> None:
    """LoggingAlphaOptions and LoggingBetaOptions at either value are no no-ops: neither noted nor refused."""
    cfg = run(["--feature-gates=LoggingAlphaOptions=true,LoggingBetaOptions=false"])
    assert cfg.startup_notes == ()
    assert run(["--feature-gates=LoggingAlphaOptions=false,LoggingBetaOptions=true"]).startup_notes == ()


@pytest.mark.parametrize(("fields", "options", "used"), [
    ({}, FormatOptions(), OutputRouting()),
    ({"log_text_split_stream": True, "log_json_info_buffer_size": "1Ki"},
     FormatOptions(text=SPLIT, json=OutputRouting(info_buffer_size="1Ki")), SPLIT),
    ({"log_format": "json", "log_text_split_stream": True, "log_json_split_stream": True,
      "log_json_info_buffer_size": "1Ki"},
     FormatOptions(text=SPLIT, json=OutputRouting(True, "1Ki")), OutputRouting(True, "1Ki")),
])
def test_the_format_in_use_picks_its_options(fields: dict[str, Any], options: FormatOptions,
                                             used: OutputRouting) -> None:
    cfg = AgentConfig(node_name="n", **fields)
    assert cfg.log_options == options
    assert cfg.log_routing == used


def test_configz_serves_the_options_as_upstream_encodes_them() -> None:
    cfg = AgentConfig(node_name="n", log_json_split_stream=True, log_json_info_buffer_size="64Ki",
                      log_text_info_buffer_size="1k")
    assert configz.kubelet_configuration(cfg)["logging"]["options"] == {
        "text": {"infoBufferSize": "1k"}, "json": {"splitStream": True, "infoBufferSize": "64Ki"}}


def test_usage_has_upstreams_flags() -> None:
    text = settings.usage()
    for flag in ("--log-text-split-stream ", "--log-json-split-stream ", "--log-text-info-buffer-size quantity",
                 "--log-json-info-buffer-size quantity"):
        assert flag in text
