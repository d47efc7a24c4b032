"""JUnit XML for CI systems, written with the junit-xml package: one suite per service, one test
case per context point (its figures as properties, the comparison as the failure message) and one
for the curve's verdict (the explanation as the failure message).

junit-xml has no per-test-case properties, so the suite's document is built by the package and
each case's <properties> (the element pytest's own --junitxml uses) is added to it."""

from __future__ import annotations

import os
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from perftests.record import RunRecord
from perftests.reports.fields import outcome_text, point_properties, verdict_kind, verdict_text


class _Case(TestCase):
    def __init__(self, *args: Any, properties: list[tuple[str, Any]] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.properties = properties if properties is not None else []


class _Suite(TestSuite):
    def build_xml_doc(self, encoding: str | None = None) -> ET.Element:
        doc = super().build_xml_doc(encoding)
        for case, element in zip(self.test_cases, doc.findall("testcase"), strict=True):
            if case.properties:
                props = ET.Element("properties")
                for name, value in case.properties:
                    ET.SubElement(props, "property", {"name": name, "value": str(value)})
                element.insert(0, props)
        return doc


def suite(record: RunRecord) -> TestSuite:
    kind = verdict_kind(record)
    classname = f"perftests.{record.name}"
    cases: list[TestCase] = []
    run_failed = record.errors or (record.outcome is not None and record.outcome.kind.value == "machine")
    for r in record.results():
        elapsed = sum(p.elapsed_s for p in record.points if p.context == r.context)
        case = _Case(
            f"decode_throughput[ctx={r.context}]",
            classname=classname,
            elapsed_sec=elapsed or None,
            properties=point_properties(r, kind),
        )
        if run_failed:
            case.add_error_info(
                message=outcome_text(record).splitlines()[0] if record.outcome else record.errors[0],
                error_type="run error (not a regression)",
            )
        elif r.estimate is None:
            case.add_error_info(message=r.problem or "not measured", error_type="measurement")
        elif r.problem:
            case.add_failure_info(message=r.problem, failure_type="no judgement")
        elif r.failed and r.comparison is not None:
            case.add_failure_info(
                message=r.comparison.describe(),
                output=verdict_text(record),
                failure_type=kind or "regression",
            )
        cases.append(case)
    cases.append(_curve_case(record, classname))
    b = record.baseline
    ja = record.judged_against
    props = {
        "profile": record.profile,
        "target": record.name,
        "engine": record.engine,
        "service_url": record.service_url,
        "commit": record.commit or "unknown",
        "tool_version": record.tool_version,
        "baseline": ja.path if ja else "",
        "baseline_created": b.created if b else "",
        "verdict": kind or "none",
        "outcome": record.outcome.kind.value if record.outcome else "none",
        "launches": str(len(record.launches)),
        "provisional": str(bool(b and b.provisional)).lower(),
    }
    return _Suite(
        f"perftests.{record.name}",
        cases,
        hostname=socket.gethostname(),
        timestamp=record.created,
        properties=props,
    )


def _curve_case(record: RunRecord, classname: str) -> TestCase:
    v, o = record.verdict, record.outcome
    props: list[tuple[str, Any]] = []
    case = _Case("curve_verdict", classname=classname, properties=props)
    if o is not None:
        props += [("outcome", o.kind.value), ("exit_code", o.exit_code)]
    if record.errors or (o is not None and o.kind.value == "machine"):
        case.add_error_info(
            message=o.headline if o else record.errors[0],
            output=outcome_text(record),
            error_type="run error (not a regression)",
        )
    elif record.refresh:
        props.append(("refreshed", record.judged_against.path if record.judged_against else ""))
    elif v is None:
        case.add_error_info(
            message="no verdict: no point was judged (none measured, or no baseline)", error_type="no verdict"
        )
    else:
        props += [
            ("verdict", v.kind.value),
            ("passed", str(v.passed).lower()),
            ("provisional", str(v.provisional).lower()),
        ]
        if o is not None and o.failed:
            case.add_failure_info(
                message=f"verdict: {v.kind.value}", output=verdict_text(record), failure_type=v.kind.value
            )
    return case


def to_string(records: list[RunRecord]) -> str:
    return to_xml_report_string([suite(r) for r in records], prettyprint=True, encoding="utf-8")


def write(records: list[RunRecord], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(to_string(records), encoding="utf-8")
    tmp.replace(path)
