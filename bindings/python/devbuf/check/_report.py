"""Rules (what must hold, and where the spec says so) and the report the kit
returns: one result per rule, pass, fail or skip, with the first failing
case's reason and a minimal reproducer."""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

PASS: str = "pass"
FAIL: str = "fail"
SKIP: str = "skip"

# Where each protocol is specified (the seeds are in devbuf's shared/seeds).
SPECS: Dict[str, str] = {
    "buffer": "CPython C API, Buffer Protocol (docs.python.org/3/c-api/buffer.html), and "
              "Lib/test/test_buffer.py",
    "struct": "CPython struct module, Format Strings; NumPy _dtype_from_pep3118 (PEP 3118)",
    "device": "draft PEP: buffer protocol device extension (pep-draft-buffer-device-extension.md)",
    "dtypes": "draft PEP: custom dtypes in buffer formats (pep-draft-buffer-custom-dtypes.md)",
    "dlpack": "DLPack Python specification (dlpack-python-spec.rst) and array API standard "
              "__dlpack__ / from_dlpack (v2023+)",
    "cai": "CUDA Array Interface, version 3 (numba.readthedocs.io, cuda_array_interface)",
    "ai": "NumPy array interface protocol, version 3 (numpy.org/doc/stable/reference/"
          "arrays.interface.html)",
    "arrow": "Arrow C data interface, C device data interface and PyCapsule interface "
             "(arrow.apache.org/docs/format)",
    "pickle": "PEP 574: pickle protocol 5 with out-of-band data (pep-574-pickle5-out-of-band.rst)",
}


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    role: str  # "producer" or "consumer"
    spec: str  # key of SPECS
    section: str  # the section or sentence cited
    text: str  # what must hold

    @property
    def citation(self) -> str:
        return f"{SPECS[self.spec]}: {self.section}"


RULES: dict[str, Rule] = {}


def rule(id: str, role: str, spec: str, section: str, text: str) -> str:
    if id in RULES:
        raise ValueError(f"rule {id} defined twice")
    RULES[id] = Rule(id, role, spec, section, text)
    return id


def _kind(reason: str) -> str:
    """A failure's kind: its reason without request names, numbers, shapes and
    one-item formats, so that 'also:' lines show each different problem once,
    not the same one at other sizes, for other requests or other item types.
    Compound formats and messages stay: a format with a packed sub-array and
    one with fields at explicit offsets are two findings, as are two
    different messages of a refusal."""
    r = re.sub(r"PyBUF_[A-Z_]+(?:\|PyBUF_[A-Z_]+)*", "#", reason)
    r = re.sub(r"'[<>=@!]?Z?[a-zA-Z?]'", "'#'", r)  # a one-item format: the same for every type
    r = re.sub(r"\d+", "#", r)
    return re.sub(r"\(#(?:, #)*,?\)", "#", r)  # a shape or strides of any rank


MAX_OTHERS = 50  # distinct findings kept per rule (past that, counted)


@dataclasses.dataclass
class Result:
    rule: Rule
    status: str = SKIP
    reason: str = "no case applied"
    case: Optional[str] = None
    reproducer: Optional[str] = None
    passed: int = 0
    failed: int = 0
    # other distinct (reason, case): each other finding, once
    others: List[Tuple[str, Optional[str]]] = dataclasses.field(default_factory=list)
    more: int = 0  # distinct findings past MAX_OTHERS (counted, not kept)
    # the kinds of the failures recorded (the first one's, then each other's)
    kinds: List[str] = dataclasses.field(default_factory=list, repr=False)
    # skipped although the object speaks the protocol (its answer could not
    # be checked), not merely because the rule does not apply to it
    applies: bool = False

    def as_dict(self) -> Dict[str, Any]:
        return {"rule": self.rule.id, "role": self.rule.role, "status": self.status,
                "citation": self.rule.citation, "text": self.rule.text, "reason": self.reason,
                "case": self.case, "reproducer": self.reproducer, "passed": self.passed,
                "failed": self.failed, "applies": self.applies, "more": self.more,
                "others": [{"reason": r, "case": c} for r, c in self.others]}


class Report:
    """The kit's answer: `results` (one per rule, in rule order), `failures`,
    `ok` (nothing failed), `as_dict()`/`to_json()`, `format()` (human)."""

    def __init__(self, target: str, role: str, rules: Iterable[Rule]) -> None:
        self.target = target
        self.role = role
        self.results: Dict[str, Result] = {r.id: Result(r) for r in rules}
        self.notes: List[str] = []

    # -- recording ---------------------------------------------------------------
    def passed(self, rule_id: str, case: Optional[str] = None) -> None:
        r = self.results[rule_id]
        r.passed += 1
        if r.status == SKIP:
            r.status, r.reason, r.case = PASS, "", None

    def failed(self, rule_id: str, reason: str, case: Optional[str] = None,
               reproducer: Optional[str] = None, kind: Optional[str] = None) -> None:
        """A failure of rule_id. `kind` names the finding when the reason's
        wording does not (default: the reason without numbers and names)."""
        r = self.results[rule_id]
        r.failed += 1
        if r.status != FAIL:  # the first failure is the one reported
            r.status, r.reason, r.case, r.reproducer = FAIL, reason, case, reproducer
            r.kinds = [kind or _kind(reason)]
        else:
            self._other(r, reason, case, kind)  # and every failure of another kind, once

    @staticmethod
    def _other(r: Result, reason: str, case: Optional[str], kind: Optional[str] = None) -> None:
        k = kind or _kind(reason)
        if not r.kinds:
            r.kinds = [_kind(o) for o in [r.reason] + [o for o, _ in r.others]]
        if k not in r.kinds:
            r.kinds.append(k)
            if len(r.others) < MAX_OTHERS:
                r.others.append((reason, case))
            else:
                r.more += 1

    def skipped(self, rule_id: str, reason: str, applies: bool = False) -> None:
        """Rule not checked on this case: `applies` when the object speaks the
        protocol but its answer could not be checked (a refusal of the full
        request, values that cannot be read), not when the rule is not for it."""
        r = self.results[rule_id]
        if r.status == SKIP and (r.reason == "no case applied" or (applies and not r.applies)):
            r.reason = reason
        if r.status == SKIP and applies:
            r.applies = True

    def merge(self, other: Report) -> Report:
        for rid, res in other.results.items():
            mine = self.results.get(rid)
            if mine is None:
                self.results[rid] = res
                continue
            if res.status == FAIL and mine.status != FAIL:
                mine.status, mine.reason, mine.case, mine.reproducer = (
                    FAIL, res.reason, res.case, res.reproducer)
                mine.others, mine.more = list(res.others), res.more
                mine.kinds = list(res.kinds)
            elif res.status == FAIL:
                theirs = res.kinds or [_kind(o) for o in [res.reason] + [o for o, _ in
                                                                          res.others]]
                for (o_reason, o_case), k in zip([(res.reason, res.case)] + res.others, theirs):
                    self._other(mine, o_reason, o_case, k)
                mine.more += res.more
            elif res.status == PASS and mine.status == SKIP:
                mine.status, mine.reason = PASS, ""
            elif res.status == SKIP and mine.status == SKIP and res.applies:
                mine.applies, mine.reason = True, res.reason
            mine.passed += res.passed
            mine.failed += res.failed
        self.notes += other.notes
        return self

    # -- reading -----------------------------------------------------------------
    @property
    def failures(self) -> List[Result]:
        return [r for r in self.results.values() if r.status == FAIL]

    @property
    def unchecked(self) -> Optional[str]:
        """Why this run is no evidence (None when it is): no rule applied, or
        more rules were skipped although they apply (the object speaks the
        protocol, its answer could not be checked) than were checked."""
        c = self.counts()
        checked = c[PASS] + c[FAIL]
        skipped = [r for r in self.results.values() if r.status == SKIP and r.applies]
        if checked == 0:
            why = f"; e.g. {skipped[0].rule.id}: {skipped[0].reason}" if skipped else ""
            return f"no rule applied: nothing was checked ({c[SKIP]} rules skipped{why})"
        if len(skipped) > checked:
            return (f"most rules were skipped: {len(skipped)} rules that apply could not be "
                    f"checked, {checked} were (e.g. {skipped[0].rule.id}: {skipped[0].reason})")
        return None

    @property
    def ok(self) -> bool:
        """Nothing failed, and the run checked something (see `unchecked`)."""
        return not self.failures and self.unchecked is None

    def status(self, rule_id: str) -> str:
        return self.results[rule_id].status

    def counts(self) -> Dict[str, int]:
        c = {PASS: 0, FAIL: 0, SKIP: 0}
        for r in self.results.values():
            c[r.status] += 1
        return c

    def as_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "role": self.role, "ok": self.ok, "counts": self.counts(),
                "unchecked": self.unchecked, "notes": self.notes, "results": [r.as_dict() for r in self.results.values()]}

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.as_dict(), **kw)

    def format(self, verbose: bool = False) -> str:
        lines = [f"# devbuf.check {self.role}: {self.target}"]
        lines += [f"# note: {n}" for n in self.notes]
        for r in self.results.values():
            if r.status == PASS:
                lines.append(f"PASS {r.rule.id} ({r.passed} cases)")
            elif r.status == SKIP:
                lines.append(f"SKIP {r.rule.id}: {r.reason}")
            else:
                lines.append(f"FAIL {r.rule.id}: {r.reason}")
                lines.append(f"     rule: {r.rule.text}")
                lines.append(f"     spec: {r.rule.citation}")
                if r.case:
                    lines.append(f"     case: {r.case} ({r.failed} failing, {r.passed} passing)")
                for o_reason, o_case in r.others:
                    lines.append(f"     also: {o_reason} [{o_case}]")
                if r.more:
                    lines.append(f"     also: {r.more} more findings of other kinds, "
                                 f"past the first {MAX_OTHERS}")
                if r.reproducer:
                    lines.append("     reproducer:")
                    lines += ["       " + x for x in r.reproducer.splitlines()]
            if verbose and r.status != FAIL:
                lines.append(f"     rule: {r.rule.text}")
        c = self.counts()
        lines.append(f"{c[PASS]} passed, {c[FAIL]} failed, {c[SKIP]} skipped")
        why = self.unchecked
        if why:
            lines.append(f"NOT OK: {why}")
        return "\n".join(lines)

    __str__ = format
