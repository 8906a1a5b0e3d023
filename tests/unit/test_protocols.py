"""Protocols as an axis, without a network: which protocols a command speaks, the
options a start is given, which process models can carry which protocol, a profile's
protocols, case identity and keys, thresholds per protocol, the TLS tax and the ratio to
nginx per protocol."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rich.console import Console

from charts.figures import close_all, ramp_figures
from charts.render import build_series
from charts.report import render_html
from harness.cli.diff import diff
from harness.compare import protocol_driver
from harness.diff import case_labels, diff_runs
from harness.frameworks import command_framework, command_protocols, probed_protocols
from harness.negotiation import on_trial
from harness.outputs.console import summary_table, threshold_table
from harness.profile import load_profile, parse_protocols
from harness.run.analysis import with_baseline_ratios, with_tls_tax
from harness.server_process import placeholder_values, protocol_args, protocol_unsupported
from harness.tls import Certificates
from harness.topology import parse_process_model, topology_unsupported
from model.errors import UserError
from model.results import Case, Negotiated, Run, write_run
from model.thresholds import judge_thresholds, parse_threshold
from servers import FRAMEWORKS, Framework
from tests.helpers import synthetic_case, synthetic_run

PLAIN = "app --host {host} --port {port}"
TLS = PLAIN + " --cert {tls_cert} --key {tls_key}"
ANY = TLS + " --speak {protocol}"
CERTS = Certificates(Path("/c/server.pem"), Path("/c/server.key"), Path("/c/ca.pem"), "ECDSA P-256")


def test_a_command_speaks_h1_and_h1_tls_by_its_placeholders_and_is_probed_for_h2() -> None:
    assert command_protocols("app", PLAIN) == (
        ("h1", "h2c"),
        {
            "h1-tls": "app's command does not declare h1-tls (it needs {tls_cert}, {tls_key})",
            "h2": "app's command does not declare h2 (it needs {tls_cert}, {tls_key})",
        },
    )
    assert command_protocols("app", TLS) == (("h1", "h1-tls", "h2", "h2c"), {})
    assert probed_protocols(("h1", "h1-tls", "h2", "h2c")) == ("h2", "h2c")
    framework = command_framework("app", TLS, "--server")
    assert framework.probed_protocols == ("h2", "h2c")
    assert protocol_unsupported(framework, "h2") is None
    assert on_trial(framework, "h2") and not on_trial(framework, "h1-tls")


def test_a_servers_file_declares_exactly_its_protocols_and_protocol_is_never_required() -> None:
    assert command_protocols("app", TLS, ["h2", "h2c"])[0] == ("h1", "h2", "h2c")
    assert command_protocols("app", ANY, ["h2"])[0] == ("h1", "h2")
    framework = command_framework("app", {"command": TLS, "protocols": ["h1-tls", "h2"]}, "f")
    assert (framework.protocols, framework.probed_protocols) == (("h1", "h1-tls", "h2"), ())
    assert not on_trial(framework, "h2")  # declared: a probe that fails fails the case
    assert framework.why_not("h2c") == "app's `protocols` does not list h2c"
    with pytest.raises(ValueError, match=r"h2 needs \{tls_cert\}, \{tls_key\}"):
        command_protocols("app", PLAIN, ["h2"])
    with pytest.raises(ValueError, match=r"h1-tls needs \{tls_cert\}, \{tls_key\}"):
        command_protocols("app", PLAIN, ["h1-tls"])
    with pytest.raises(ValueError, match="h3"):
        command_protocols("app", ANY, ["h3"])
    with pytest.raises(ValueError, match="probed protocols"):
        Framework(
            "x", "", (), ("unknown",), kind="command", command=PLAIN, probed_protocols=("h2",)
        )


def test_a_server_table_protocols_key_reaches_the_framework() -> None:
    framework = command_framework("app", {"command": ANY, "protocols": ["h2c"]}, "test")
    assert framework.protocols == ("h1", "h2c")
    assert protocol_unsupported(framework, "h2c") is None
    assert "h1-tls" in (protocol_unsupported(framework, "h1-tls") or "")
    with pytest.raises(UserError, match="protocols must be a list"):
        command_framework("app", {"command": ANY, "protocols": "h2c"}, "test")


def test_a_framework_is_refused_a_protocol_it_does_not_list_with_its_reason() -> None:
    framework = Framework(
        "plain", "servers.none", (), ("asyncio",), protocols=("h1", "h1-tls"),
        protocol_notes={"h2": "plain speaks HTTP/1.1 only"},
    )  # fmt: skip
    assert protocol_unsupported(framework, "h1-tls") is None
    assert protocol_unsupported(framework, "h2") == "plain speaks HTTP/1.1 only"
    assert protocol_unsupported(framework, "h2c") == framework.why_not("h2c")
    assert "h9" in (protocol_unsupported(framework, "h9") or "")


def test_protocol_args_are_the_contract_options_and_fill_a_commands_placeholders() -> None:
    assert protocol_args("h1", None) == []
    assert protocol_args("h2c", None) == ["--protocol", "h2c"]
    args = protocol_args("h1-tls", CERTS)
    assert args == [
        "--protocol",
        "h1-tls",
        "--tls-cert",
        "/c/server.pem",
        "--tls-key",
        "/c/server.key",
    ]
    values = placeholder_values(host="127.0.0.1", port=1, sink="empty", workers=1, extra_args=args)
    assert (values["protocol"], values["tls_cert"], values["tls_key"]) == (
        "h1-tls",
        "/c/server.pem",
        "/c/server.key",
    )
    with pytest.raises(UserError, match="certificates"):
        protocol_args("h2", None)


def test_a_balanced_process_model_carries_cleartext_h1_only() -> None:
    assert topology_unsupported(parse_process_model("workers:2"), "h1-tls") is None
    assert topology_unsupported(parse_process_model("lb:2"), "h1") is None
    assert "balancer" in (topology_unsupported(parse_process_model("lb:2"), "h2") or "")


# -- a profile's protocols, case identity, thresholds per protocol, the TLS tax -----------
def tls(case: Case, protocol: str = "h1-tls") -> Case:
    return dataclasses.replace(case, protocol=protocol)


@pytest.mark.parametrize(
    ("protocols", "driver", "kind", "bodies", "chosen"),
    [
        (("h1", "h1-tls"), "wrk", "concurrency", True, "wrk"),  # wrk speaks both: kept
        (("h2",), "wrk", "concurrency", False, "h2load"),  # quick's wrk, --protocol h2
        (("h1", "h2c"), "wrk", "concurrency", False, "h2load"),  # one driver for the run
        (("h2",), "httperf", "rate", False, "oha"),  # a rate ramp: oha speaks h2
        (("h2",), "wrk", "concurrency", True, "wrk"),  # bodies checked: none can, kept
        (("h1-tls",), "agent", "connections", False, "agent"),  # no driver: kept, refused later
    ],
)
def test_a_profiles_driver_gives_way_to_one_that_speaks_the_protocols(
    protocols: tuple[str, ...], driver: str, kind: str, bodies: bool, chosen: str
) -> None:
    assert protocol_driver(protocols, driver, kind, bodies) == chosen


def test_a_profile_compares_protocols_in_the_order_given_each_once() -> None:
    assert load_profile("smoke").protocols == ("h1",)
    assert load_profile("smoke", {"protocol": "h1-tls, h1,h1-tls"}).protocols == ("h1-tls", "h1")
    assert parse_protocols("h2c") == ("h2c",)
    with pytest.raises(UserError, match="protocol h3 is not one of h1, h1-tls, h2, h2c"):
        load_profile("smoke", {"protocol": "h1,h3"})


def test_the_protocol_is_part_of_a_cases_identity_and_of_a_non_h1_key() -> None:
    plain = synthetic_case("aiohttp", [1000.0])
    secure = tls(plain)
    assert plain.identity[:-1] == secure.identity[:-1]
    assert (plain.identity[-1], secure.identity[-1]) == ("h1", "h1-tls")
    assert plain.key == "aiohttp_text_empty_wrk_single_both"  # as before protocols
    assert secure.key == "aiohttp_text_empty_wrk_single_both_h1-tls"
    labels = case_labels([plain.identity, secure.identity])
    assert labels == {plain.identity: "aiohttp [h1]", secure.identity: "aiohttp [h1-tls]"}


def test_diff_matches_cases_on_their_protocol() -> None:
    old = synthetic_run("a", [synthetic_case("aiohttp", [1000.0])])
    new = synthetic_run("b", [tls(synthetic_case("aiohttp", [900.0]))])
    diff = diff_runs(old, new)
    assert diff.cases == ()
    assert (diff.only_in_old, diff.only_in_new) == (("aiohttp [h1]",), ("aiohttp [h1-tls]",))


def test_a_threshold_may_select_one_protocols_cases() -> None:
    cases = [synthetic_case("aiohttp", [1000.0]), tls(synthetic_case("aiohttp", [400.0]))]
    one = parse_threshold("aiohttp[h1-tls]: peak >= 500", FRAMEWORKS)
    every = parse_threshold("aiohttp: peak >= 500", FRAMEWORKS)
    assert one.text == "aiohttp[h1-tls]: peak >= 500" and one.protocol == "h1-tls"
    [judged] = judge_thresholds([one], cases)
    assert (judged.case, judged.held) == ("aiohttp_text_empty_wrk_single_both_h1-tls", False)
    assert [r.held for r in judge_thresholds([every], cases)] == [True, False]
    assert len(judge_thresholds([parse_threshold("*[h1]: peak > 0")], cases)) == 1
    with pytest.raises(ValueError, match="unknown protocol 'h3'"):
        parse_threshold("aiohttp[h3]: peak >= 1")


def test_a_threshold_may_gate_the_tls_tax() -> None:
    cases = with_tls_tax(
        [synthetic_case("aiohttp", [1000.0]), tls(synthetic_case("aiohttp", [600.0]))]
    )
    rule = parse_threshold("aiohttp[h1-tls]: tls_tax >= 0.7")
    [judged] = judge_thresholds([rule], cases)
    assert (judged.value, judged.held, judged.judged_on) == (0.6, False, "value (no interval)")
    [plain, _] = judge_thresholds([parse_threshold("aiohttp: tls_tax >= 0.5")], cases)
    assert (plain.held, plain.judged_on) == (
        False,
        "no value: no h1-tls case with an h1 case beside it",
    )


def test_the_tls_tax_is_h1_tls_over_h1_paired_by_round() -> None:
    plain = synthetic_case("aiohttp", [1000.0, 1010.0, 990.0])
    secure = tls(synthetic_case("aiohttp", [800.0, 820.0, 780.0]))
    other = synthetic_case("tornado", [500.0, 510.0, 490.0])
    taxed = with_tls_tax([plain, secure, other])
    assert [c.summary.tls_tax for c in taxed] == [None, 0.8, None]
    low, high = taxed[1].summary.tls_tax_ci or (0.0, 0.0)
    assert low < 0.8 < high < 1.0
    # without rounds: the peaks' ratio, no interval; without the h1 case: nothing
    [_, lone] = with_tls_tax([synthetic_case("aiohttp", []), tls(synthetic_case("aiohttp", []))])
    assert (lone.summary.tls_tax, lone.summary.tls_tax_ci) == (1.0, None)
    assert with_tls_tax([secure]) == [secure]


def test_the_ratio_to_nginx_never_crosses_protocols() -> None:
    cases = [
        synthetic_case("nginx", [2000.0]),
        tls(synthetic_case("aiohttp", [500.0])),
        synthetic_case("aiohttp", [1000.0]),
    ]
    roles = {"nginx": "baseline"}
    _, secure, plain = with_baseline_ratios(cases, roles)
    assert (secure.summary.ratio_to_nginx, plain.summary.ratio_to_nginx) == (None, 0.5)


# -- tables, figures and the report of a run with protocols ---------------------------------
def protocol_run() -> Run:
    negotiated = Negotiated(
        "h1-tls", "TLSv1.3", "TLS_AES_256_GCM_SHA384", "ECDSA P-256", "http/1.1", False
    )
    cases = [
        synthetic_case("aiohttp", [1000.0, 1010.0, 990.0]),
        dataclasses.replace(
            tls(synthetic_case("aiohttp", [800.0, 820.0, 780.0])), negotiated=negotiated
        ),
    ]
    return synthetic_run("20261201-000000.000-tls", with_tls_tax(cases), profile="tls")


def test_the_summary_table_has_protocol_and_tls_tax_columns_only_when_they_apply() -> None:
    console = Console(width=250, record=True)
    console.print(summary_table(protocol_run()))
    text = console.export_text()
    assert "protocol" in text and "TLS tax" in text and "0.80×" in text
    console = Console(width=250, record=True)
    console.print(summary_table(synthetic_run("r", [synthetic_case("aiohttp", [1000.0])])))
    assert "protocol" not in console.export_text() and "TLS tax" not in console.export_text()


def test_a_protocol_in_a_rule_or_a_label_is_printed_not_taken_for_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = protocol_run()
    rules = [parse_threshold("aiohttp[h1-tls]: peak >= 500")]
    run = dataclasses.replace(run, thresholds=judge_thresholds(rules, run.cases))
    console = Console(width=250, record=True)
    console.print(threshold_table(run))
    assert "aiohttp[h1-tls]: peak >= 500" in console.export_text()
    write_run(run, tmp_path)
    capsys.readouterr()
    diff(tmp_path, tmp_path, factor=1.1, allow_other_host=False, as_json=False)
    assert "aiohttp [h1-tls]" in capsys.readouterr().out


def test_the_report_names_protocols_what_tls_negotiated_and_the_tls_tax() -> None:
    html = render_html([protocol_run()], {})
    assert "<th>protocol</th>" in html and "<th>TLS tax</th>" in html
    assert "<h3>Protocols</h3>" in html
    assert "TLSv1.3" in html and "TLS_AES_256_GCM_SHA384" in html and "ECDSA P-256" in html
    assert "no (it cannot be told a CA)" in html
    plain = render_html([synthetic_run("r", [synthetic_case("aiohttp", [1000.0])])], {})
    assert "<th>protocol</th>" not in plain and "<h3>Protocols</h3>" not in plain


def test_a_run_of_two_protocols_gets_a_peak_per_protocol_figure() -> None:
    run = protocol_run()
    series = build_series([run])
    assert [s.label for s in series] == ["aiohttp h1", "aiohttp h1-tls"]
    figures = ramp_figures(series)
    try:
        axes = figures["protocols"].axes[0]
        bars = {p.get_gid(): p.get_height() for p in axes.patches}
        assert bars == {"protocol:h1": 1000.0, "protocol:h1-tls": 800.0}
        assert any("0.80×" in t.get_text() for t in axes.texts)
    finally:
        close_all(figures)
    single = ramp_figures(build_series([synthetic_run("r", [synthetic_case("aiohttp", [1.0])])]))
    assert "protocols" not in single
    close_all(single)
