"""Every named set of states lives in deployments/states.py, and every state is classified in each.

(a) The table below decides, for every State, its membership in every set of `STATE_SETS`. A new
State (or a new set) fails the test until someone writes down where it belongs.
(b) A walk over the project's code fails on a set of states written anywhere else: a tuple, list
or set literal of two or more `State.X` / `S.X`, or a `state__in=` lookup given a literal.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from deployments.choices import State
from deployments.states import STATE_SETS

COLUMNS = (
    "requested",
    "running",
    "starting",
    "serving",
    "settled",
    "scraped",
    "tear_down",
    "holds_gpus",
    "billable",
    "stoppable_by_policy",
    "startable",
    "has_serving",
    "observed",
    "final",
    "gone",
    "deleted_or_deleting",
    "deletable",
    "never_approved",
    "unhealthy",
    "admitted",
    "waiting",
)
# One row per state, one mark per set (in COLUMNS order): x = in the set, . = not.
TABLE_TEXT = """
                  req run sta ser set scr tea hol bil stp sta has obs fin gon dod del nev unh adm wai
pending_approval   x   .   .   .   .   .   .   .   .   .   .   .   .   .   .   .   x   x   .   .   .
approved           .   x   x   .   .   .   .   x   x   x   .   x   .   .   .   .   x   .   .   .   x
queued             .   x   x   .   .   .   .   x   x   x   .   x   x   .   .   .   x   .   .   .   x
provisioning       .   x   x   .   .   x   .   x   x   x   .   x   x   .   .   .   x   .   .   x   .
ready              .   x   .   x   x   x   .   x   x   x   .   x   x   .   .   .   x   .   .   x   .
degraded           .   x   .   x   .   x   .   x   x   x   .   x   x   .   .   .   x   .   x   x   .
failed             .   .   .   .   .   .   x   .   .   .   x   x   x   .   .   .   x   .   x   .   .
stopped            .   .   .   .   .   .   x   .   .   .   x   x   .   .   .   .   x   .   .   .   .
deleting           .   .   .   .   .   .   x   .   .   .   .   .   .   .   .   x   .   .   .   .   .
deleted            .   .   .   .   .   .   .   .   .   .   .   .   .   x   x   x   .   .   .   .   .
rejected           .   .   .   .   .   .   x   .   .   .   .   .   .   x   .   .   x   x   .   .   .
cancelled          .   .   .   .   .   .   x   .   .   .   .   .   .   x   .   .   x   x   .   .   .
"""
TABLE = {row.split()[0]: row.split()[1:] for row in TABLE_TEXT.strip().splitlines()[1:]}


def column(name: str) -> frozenset[str]:
    """The states the table puts in set `name`."""
    index = COLUMNS.index(name)
    return frozenset(state for state, marks in TABLE.items() if marks[index] == "x")


class TestClassification:
    def test_every_state_has_a_row_with_a_mark_for_every_set(self):
        assert set(TABLE) == set(State.values)
        assert all(len(marks) == len(COLUMNS) for marks in TABLE.values())
        assert {mark for marks in TABLE.values() for mark in marks} <= {"x", "."}

    def test_every_named_set_has_a_column(self):
        assert set(COLUMNS) == set(STATE_SETS)

    def test_each_set_is_exactly_its_column(self):
        wrong = {
            name: {"missing": sorted(column(name) - members), "extra": sorted(members - column(name))}
            for name, members in STATE_SETS.items()
            if members != column(name)
        }
        assert wrong == {}

    def test_the_gpu_rule_and_the_ledger_read_the_same_set(self):
        assert STATE_SETS["holds_gpus"] == STATE_SETS["billable"] == STATE_SETS["running"]


# --- no set of states outside deployments/states.py ---------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
APPS = ("access", "core", "deployments", "metrics", "portal", "quotas", "reclaim", "usage", "runtime")
HOME = Path("deployments/states.py")
STATE_LOOKUP = re.compile(r"(^|__)(to_|from_)?state__in$")  # state__in, deployment__state__in, to_state__in
LITERALS = (ast.Tuple, ast.List, ast.Set)
# runtime/ imports no app, so it keeps its own words for what a backend observes: only the Django
# apps are held to strings too (a literal of two or more state values is a set of states).
STRING_CHECKED = set(APPS) - {"runtime"}


def _state_ref(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("State", "S")


def _literal(node: ast.AST) -> bool:
    """A literal collection, or frozenset/set/tuple/list of one."""
    if isinstance(node, LITERALS):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("frozenset", "set", "tuple", "list")
        and bool(node.args)
        and isinstance(node.args[0], LITERALS)
    )


def offenders_in(source: str, name: str, *, strings: bool = True) -> list[str]:
    """`name:line what` for every set of states written in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, LITERALS):
            if sum(map(_state_ref, node.elts)) >= 2:
                found.append(f"{name}:{node.lineno} a literal of states")
            words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if strings and len(node.elts) >= 2 and len(words) == len(node.elts) and set(words) <= set(State.values):
                found.append(f"{name}:{node.lineno} a literal of state names")
        if isinstance(node, ast.keyword) and node.arg and STATE_LOOKUP.search(node.arg) and _literal(node.value):
            found.append(f"{name}:{node.lineno} {node.arg}= with a literal")
    return sorted(set(found), key=lambda line: (line.split(":")[0], int(line.split(":")[1].split()[0])))


def project_files() -> list[Path]:
    files = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel == HOME or {"migrations", "tests"} & set(rel.parts):
                continue
            files.append(rel)
    return files


class TestOneHomeForSets:
    def test_the_walk_finds_each_kind_of_offence(self):
        source = (
            "a = (State.READY, State.DEGRADED)\n"
            "b = frozenset({S.STOPPED, S.FAILED})\n"
            "q = M.objects.filter(state__in=[x, y])\n"
            "r = M.objects.exclude(deployment__state__in=frozenset({x}))\n"
            'c = frozenset({"ready", "degraded"})\n'
        )
        assert offenders_in(source, "f.py") == [
            "f.py:1 a literal of states",
            "f.py:2 a literal of states",
            "f.py:3 state__in= with a literal",
            "f.py:4 deployment__state__in= with a literal",
            "f.py:5 a literal of state names",
        ]

    def test_the_walk_leaves_one_state_and_named_sets_alone(self):
        source = (
            "a = dep.state == State.READY\n"
            "b = M.objects.filter(state__in=RUNNING)\n"
            "c = RUNNING | {State.FAILED}\n"
            'd = ("withdrawn", "expiring")\n'
            "e = M.objects.filter(gateway_state__in=('a', 'b'))\n"
        )
        assert offenders_in(source, "f.py") == []

    def test_no_set_of_states_is_written_outside_states_py(self):
        files = project_files()
        assert Path("deployments/reconcile.py") in files and HOME not in files
        found = [
            line
            for rel in files
            for line in offenders_in((ROOT / rel).read_text(), str(rel), strings=rel.parts[0] in STRING_CHECKED)
        ]
        assert found == [], "sets of states belong in deployments/states.py:\n" + "\n".join(found)
